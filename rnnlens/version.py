"""The package version (the bottom layer: anything may read it)."""
__version__ = "0.1.0"
