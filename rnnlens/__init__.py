"""rnnlens: train recurrent networks on NLP tasks and read what they compute.

Every model is, exactly or to first order, an affine recurrence h_t = A(x_t) h_{t-1} + g(x_t);
its hidden state is a sum of n-gram vectors (see rnnlens.analysis.ngrams).
"""
from .cells import CELLS, from_torch
from .errors import RnnlensError

__version__ = "0.1.0"

__all__ = ["CELLS", "from_torch", "RnnlensError", "__version__"]
