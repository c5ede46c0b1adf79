"""The application layer: what loads a trained run and its data, and the studies built on
it (the model report, the faithfulness study). Below it, analysis and viz are pure
functions of models, tensors and plain results; above it, the command line."""
