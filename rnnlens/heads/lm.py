"""Word-level language modelling head: next-token prediction at every position, with an
optional tied output embedding and an adaptive softmax for large vocabularies."""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ..data.vocab import Vocab
from ..ops.linear import linear
from .base import Head


def _real(x: torch.Tensor, mask: torch.Tensor, no_pad: bool) -> torch.Tensor:
    """x[mask]: the rows of x [B,T,...] at the real positions, [N,...]. A batch with no pad
    (no_pad: every batch of a token stream but the last) is a view, not a copy: the logits of a
    language model are the largest tensor of its step, and their masked copy, and the
    scatter back in its backward, cost about a tenth of it on a CPU."""
    return x.reshape(-1, *x.shape[2:]) if no_pad else x[mask]


class LMHead(Head):
    """forward(states[B,T,H], batch) -> logits [B,T,V] (or the projected states when the
    adaptive softmax is on; its loss computes the log-probabilities itself)."""

    select = ("ppl", "min")
    train_metrics = False          # the training loss already is the mean NLL

    def __init__(self, input_size: int, vocab_size: int, embedding: nn.Embedding | None = None,
                 tie: bool = False, cutoffs: list[int] | None = None, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.adaptive = None
        self.proj = None
        cut = [c for c in (cutoffs or []) if c < vocab_size - 1]
        if cut:             # (cutoffs above a small vocabulary leave nothing: a full softmax)
            with warnings.catch_warnings():    # a tail of 0 units (see `empty_tails`): torch warns on every build
                warnings.filterwarnings("ignore", "Initializing zero-element tensors")
                self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(input_size, vocab_size, cut, div_value=4.0)
            return
        dim = embedding.embedding_dim if tie else input_size
        if tie and dim != input_size:
            self.proj = nn.Linear(input_size, dim, bias=False)
        self.out = nn.Linear(dim, vocab_size)
        if tie:
            # torch's N(0, 1) embedding init would start a tied softmax far from uniform
            nn.init.uniform_(embedding.weight, -0.1, 0.1)
            self.out.weight = embedding.weight

    def empty_tails(self) -> list[int]:
        """The adaptive softmax's tail clusters (1-based) that got no units: torch gives tail i
        input_size // 4**i, so an output narrower than 4**i leaves it none, and the words of
        such a cluster can only share its probability evenly."""
        if self.adaptive is None:
            return []
        return [i for i, t in enumerate(self.adaptive.tail, 1) if t[0].out_features == 0]

    def forward(self, states: torch.Tensor, batch) -> torch.Tensor:
        h = self.dropout(states)
        if self.adaptive is not None:
            return h
        if self.proj is not None:
            h = linear(h, self.proj.weight)
        # the output layer through rnnlens.ops.linear: oneDNN on a CPU (about 1.7x torch's
        # product at [700,128] x [128,10000] on one thread), F.linear elsewhere
        return linear(h, self.out.weight, self.out.bias)

    def nll_sum(self, output: torch.Tensor, batch) -> torch.Tensor:
        m = batch.mask
        no_pad = getattr(batch, "dense", False) or bool(m.all())
        y = _real(batch.targets, m, no_pad)
        if self.adaptive is not None:  # it returns the mean over the tokens
            return self.adaptive(_real(output, m, no_pad), y).loss * y.numel()
        return F.cross_entropy(_real(output, m, no_pad), y, reduction="sum")

    def loss(self, output, batch):
        return self.nll_sum(output, batch) / batch.mask.sum().clamp(min=1)

    def metrics(self, output, batch) -> dict:
        return self.loss_and_metrics(output, batch)[1]

    def loss_and_metrics(self, output, batch):
        """Both from one pass over the softmax (evaluation would otherwise compute it twice)."""
        loss, sums = self.metric_tensors(output, batch)
        return loss, {k: float(v) for k, v in sums.items()}

    def metric_tensors(self, output, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss_and_metrics with the metrics as 0-d tensors, computed without reading anything
        back from the device (an evaluation step captured as a CUDA graph adds them up there)."""
        nll, tokens = self.nll_sum(output, batch), batch.mask.sum()
        unk = ((batch.targets == Vocab.unk_id) & batch.mask).sum()
        return nll / tokens.clamp(min=1), {"nll": nll, "tokens": tokens, "unk": unk}

    def finalize(self, m: dict) -> dict[str, float]:
        """ppl, and beside it unk_rate: the fraction of the predicted tokens that are <unk> (the
        more of them, the easier the text looks)."""
        from ..metrics import perplexity

        tokens = max(m["tokens"], 1.0)
        return {"ppl": perplexity(m["nll"], tokens), "unk_rate": m.get("unk", 0.0) / tokens}
