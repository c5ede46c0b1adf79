"""Benchmarks (not part of the installed package); run from the repository root:
`python -m benchmarks` (the whole suite, benchmarks/suite.py) or one part, e.g.
`python -m benchmarks.cells`."""
