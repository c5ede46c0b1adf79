"""Running a model with its first recurrent layer captured, for n-gram attribution
(rnnlens.analysis.attribution): the layer's cells, inputs and states in the autograd graph.

A torch.nn.RNN/GRU/LSTM inside a user's module is swapped for `_SplitRNN` while the model
runs: its first layer runs as rnnlens cells (whose states can be read and decomposed), the
layers above as torch modules with the original parameters.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from ..cells.classic import from_torch
from ..errors import RnnlensError

TORCH_RNNS = {nn.RNN: "elman", nn.GRU: "gru", nn.LSTM: "lstm"}

# --- capturing the first layer ---------------------------------------------------------------
@dataclass
class _Captured:
    cell: nn.Module          # an rnnlens cell with the layer's weights
    x: torch.Tensor          # [B,T,E] its input, in its reading order
    mask: torch.Tensor | None
    out: torch.Tensor        # [B,T,H] its output, or [B,T,S] its full state (in the autograd graph)
    reverse: bool
    lengths: torch.Tensor | None
    full_state: bool = False  # out is the full state (the gradient may reach the LSTM's c)


def _cell_from_layer(rnn: nn.Module, direction: int) -> nn.Module:
    """The first layer's cell in one direction, batch-major, in eval mode. The copy shares
    nothing with the module: the attribution needs no parameter gradients."""
    cell = from_torch(rnn, layer=0, direction=direction)
    cell.batch_first = True
    cell.eval()
    return cell


class _SplitRNN(nn.Module):
    """Stands in for a torch.nn.RNN/GRU/LSTM during attribution: layer 0 runs as rnnlens
    cells (so its states can be read and decomposed), the layers above as a torch module
    holding the original parameters. Same outputs and final states as the original."""

    def __init__(self, rnn: nn.Module, record: list):
        super().__init__()
        if getattr(rnn, "proj_size", 0):
            raise RnnlensError("NGramAttribution does not take an LSTM with proj_size > 0")
        self.rnn, self.record = rnn, record
        self.dirs = 2 if rnn.bidirectional else 1
        self.cells = [_cell_from_layer(rnn, d) for d in range(self.dirs)]
        self.rest = None
        if rnn.num_layers > 1:
            rest = type(rnn)(rnn.hidden_size * self.dirs, rnn.hidden_size, num_layers=rnn.num_layers - 1,
                             bias=rnn.bias, batch_first=True, bidirectional=rnn.bidirectional,
                             **({"nonlinearity": rnn.nonlinearity} if isinstance(rnn, nn.RNN) else {}))
            rest.to(device=rnn.weight_ih_l0.device, dtype=rnn.weight_ih_l0.dtype)
            for name in rest._flat_weights_names:
                layer = int(name.split("_l")[1].split("_")[0])
                setattr(rest, name, getattr(rnn, name.replace(f"_l{layer}", f"_l{layer + 1}", 1)))
            rest.eval()
            self.rest = rest

    def __getattr__(self, name):
        # the user's forward may read the module's settings (hidden_size, bidirectional, ...)
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["rnn"], name)

    def forward(self, input, hx=None):
        if isinstance(input, nn.utils.rnn.PackedSequence):
            raise RnnlensError("NGramAttribution takes padded tensors, not a PackedSequence: "
                               "attribute one sentence (or equal-length sentences) at a time")
        if hx is not None:
            hs = hx if isinstance(hx, tuple) else (hx,)
            if any(bool(h.ne(0).any()) for h in hs):
                raise RnnlensError("NGramAttribution explains recurrences from a zero initial state; "
                                   "the model passed a non-zero hx")
        rnn = self.rnn
        unbatched = input.dim() == 2          # one sequence [T,E], whatever batch_first says
        if unbatched:
            x = input[None]
        else:
            x = input if rnn.batch_first else input.transpose(0, 1)
        outs, finals = [], []
        for d, cell in enumerate(self.cells):
            xd = x.flip(1) if d else x
            states, fin = cell.scan(xd)          # [B,T,S]: the LSTM's [c; h], so c_n stays attributable
            out = cell.output(states)
            self.record.append(_Captured(cell, xd.detach(), None, states, bool(d), None, full_state=True))
            outs.append(out.flip(1) if d else out)
            finals.append(states[:, -1])     # from the recorded states: the c_n path reaches them
        y = torch.cat(outs, -1) if self.dirs > 1 else outs[0]
        H = rnn.hidden_size
        h_n = [o[:, -1] for o in (outs[0],) + ((outs[1].flip(1),) if self.dirs > 1 else ())]
        c_n = [f[:, :H] for f in finals] if isinstance(rnn, nn.LSTM) else None
        if self.rest is not None:
            y, rest_state = self.rest(y)
            if isinstance(rnn, nn.LSTM):
                h_n += list(rest_state[0].unbind(0))
                c_n += list(rest_state[1].unbind(0))
            else:
                h_n += list(rest_state.unbind(0))
        h_n = torch.stack(h_n, 0)
        state = (h_n, torch.stack(c_n, 0)) if c_n is not None else h_n
        if unbatched:
            y = y[0]
            state = tuple(s[:, 0] for s in state) if isinstance(state, tuple) else state[:, 0]
        elif not rnn.batch_first:
            y = y.transpose(0, 1)
        return y, state


def _find_rnn(model: nn.Module) -> tuple[nn.Module, str, nn.Module]:
    found = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) in TORCH_RNNS]
    if isinstance(model, tuple(TORCH_RNNS)):
        raise RnnlensError("NGramAttribution needs the whole model (RNN plus the layers that score its "
                           "states), not the recurrent module alone")
    if not found:
        raise RnnlensError("no torch.nn.RNN, GRU or LSTM found in the model")
    if len(found) > 1:
        raise RnnlensError(f"the model holds {len(found)} recurrent modules; pass rnn= to choose one")
    return found[0]


@contextlib.contextmanager
def _eval(model: nn.Module):
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)
