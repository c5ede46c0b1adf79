"""Benchmarks (not part of the installed package); run from the repository root, e.g.
`python -m benchmarks.cells`."""
