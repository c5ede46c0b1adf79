"""rnnlens: train recurrent networks on NLP tasks and read what they compute.

Every model is, exactly or to first order, an affine recurrence h_t = A(x_t) h_{t-1} + g(x_t);
its hidden state is a sum of n-gram vectors (see rnnlens.analysis.ngrams).

Importing the package does not import torch: `rnnlens.CELLS` and `rnnlens.from_torch` load
the cells when first used, and the registries a config's names are checked against load when
a config is first validated, so `rnnlens --help` answers at once.
"""
from .version import __version__  # noqa: I001  (first: the modules below may read it)
from . import config as _config
from .errors import RnnlensError
from .ops import allocator as _allocator

_allocator.tune()        # glibc's malloc set for tensor-sized blocks (rnnlens/ops/allocator.py)


def _load_registries() -> None:
    """Import the modules that register the names a config may use: cells, memory
    compositions, poolings and corpora (rnnlens.config.known)."""
    from .cells import memory  # noqa: F401
    from .data import datasets  # noqa: F401
    from .heads import classify  # noqa: F401


_config.on_demand(_load_registries)


def __getattr__(name: str):
    """CELLS and from_torch, from rnnlens.cells (imported, with torch, on first use)."""
    if name in ("CELLS", "from_torch"):
        from . import cells

        return getattr(cells, name)
    raise AttributeError(f"module 'rnnlens' has no attribute {name!r}")


__all__ = ["CELLS", "from_torch", "RnnlensError", "__version__"]
