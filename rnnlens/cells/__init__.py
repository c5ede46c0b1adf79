"""Recurrent cells. CELLS maps a config name to its class."""
from ..config import register
from .base import Cell, DenseView, LinearView, StructuredView
from .baselines import BASELINE_CELLS
from .classic import GRU, LSTM, Elman, from_torch
from .isan import ISAN
from .linear_rnn import LinearRNN
from .ngram import NGRAM_CELLS
from .rational import RATIONAL_CELLS
from .unitary import URN

CELLS = {"elman": Elman, "gru": GRU, "lstm": LSTM, **NGRAM_CELLS, **BASELINE_CELLS, **RATIONAL_CELLS,
         "isan": ISAN}  # equivalences.QRNN2 is left out: its step needs x_{t-1} (see its docstring)
CELLS.update({"urn": URN, "linear-rnn": LinearRNN})
register("cell", CELLS)
register("cell_settings", {name: cls.settings for name, cls in CELLS.items()})
register("cell_additive", {name: cls.additive for name, cls in CELLS.items()})

__all__ = ["CELLS", "Cell", "DenseView", "LinearView", "StructuredView", "Elman", "GRU", "LSTM", "from_torch"]
