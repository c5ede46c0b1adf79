"""Encoder + task head, built from a config: the one model class every task uses."""
from __future__ import annotations

import torch
from torch import nn

from .cells.base import LinearView
from .data.batching import Batch
from .encoder import build_encoder
from .errors import RnnlensError
from .train.config import ModelConfig


def build_head(cfg: ModelConfig, task: str, encoder, labels: list[str] | None, vocab_size: int):
    from .heads.classify import ClassificationHead, RegressionHead, RelationHead
    from .heads.lm import LMHead
    from .heads.tagger import TaggerHead

    D = encoder.output_size
    sentence = dict(pooling=cfg.pooling, bias=cfg.output_bias, dropout=cfg.dropout,
                    mlp_hidden=cfg.mlp_hidden, final=encoder.final)
    if task == "classify":
        return ClassificationHead(D, len(labels), **sentence)
    if task == "regress":
        return RegressionHead(D, **sentence)
    if task == "relation":
        return RelationHead(D, labels, **sentence)
    if task == "tag":
        return TaggerHead(D, labels, dropout=cfg.dropout)
    if task == "agreement":
        from .heads.agreement import AgreementHead
        return AgreementHead(D, len(labels), **sentence)
    if task in ("lm", "dyck", "crossserial") and (cfg.bidirectional or cfg.cell == "transformer"):
        raise RnnlensError(f"a language model ({task}: next-symbol prediction) needs a one-direction "
                           "recurrent encoder")
    if task in ("dyck", "crossserial"):
        from .heads.formal import CrossSerialHead, DyckHead
        head = DyckHead if task == "dyck" else CrossSerialHead
        return head(D, labels, dropout=cfg.dropout, bias=cfg.output_bias)
    if task == "lm":
        return LMHead(D, vocab_size, encoder.embedding, tie=cfg.tie_weights,
                      cutoffs=cfg.adaptive_softmax, dropout=cfg.dropout)
    raise RnnlensError(f"unknown task {task!r}")


class RNNModel(nn.Module):
    """tokens[B,T] -> encoder -> states[B,T,D] -> head.

    For language modelling the encoder state is carried from one batch to the next (truncated
    BPTT over consecutive segments); `reset_state()` starts a new stream. `linear_view(batch)`
    and `states(batch)` expose what the decomposition needs; both run without dropout.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int, task: str = "classify",
                 labels: list[str] | None = None):
        super().__init__()
        self.cfg = cfg
        self.task = task
        self.labels = labels
        self.encoder = build_encoder(cfg, vocab_size)
        self.head = build_head(cfg, task, self.encoder, labels, vocab_size)
        self._carry = None

    @property
    def embedding(self) -> nn.Embedding:
        return self.encoder.embedding

    def reset_state(self) -> None:
        self._carry = None

    def encode(self, batch: Batch) -> torch.Tensor:
        carry = self.task == "lm"
        if carry and self._carry is not None and self._carry[0].shape[0] != len(batch):
            self._carry = None
        out, state = self.encoder(batch.tokens, batch.mask, self._carry if carry else None)
        if carry:
            self._carry = [s.detach() for s in state]
        return out

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.head(self.encode(batch), batch)

    def loss(self, output, batch):
        return self.head.loss(output, batch)

    # --- analysis hooks -------------------------------------------------------------
    @torch.no_grad()
    def linear_view(self, batch: Batch) -> LinearView:
        return self.encoder.linear_view(batch.tokens, batch.mask)

    @torch.no_grad()
    def states(self, batch: Batch) -> torch.Tensor:
        """The first cell's full state [B,T,S] at every step (the LSTM's [c; h])."""
        return self.encoder.states(batch.tokens, batch.mask)

    @property
    def readout_weight(self) -> torch.Tensor:
        return self.head.readout_weight
