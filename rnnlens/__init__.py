"""rnnlens: train recurrent networks on NLP tasks and read what they compute.

Every model is, exactly or to first order, an affine recurrence h_t = A(x_t) h_{t-1} + g(x_t);
its hidden state is a sum of n-gram vectors (see rnnlens.analysis.ngrams).
"""
from .version import __version__  # noqa: I001  (first: the modules below may read it)
from .ops import allocator as _allocator
from .cells import CELLS, from_torch
from .cells import memory as _memory  # noqa: F401  (the registries a config's names are checked against)
from .data import datasets as _datasets  # noqa: F401
from .errors import RnnlensError
from .heads import classify as _classify  # noqa: F401

_allocator.tune()        # glibc's malloc set for tensor-sized blocks (rnnlens/ops/allocator.py)

__all__ = ["CELLS", "from_torch", "RnnlensError", "__version__"]
