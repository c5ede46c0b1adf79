"""Embedding -> recurrent cell -> head, built from a config."""
from __future__ import annotations

import torch
from torch import nn

from .cells import CELLS
from .cells.base import LinearView
from .data.batching import Batch
from .heads.classify import ClassificationHead
from .train.config import ModelConfig


class RNNClassifier(nn.Module):
    """tokens[B,T] -> embeddings[B,T,E] -> cell -> states[B,T,H] -> head.

    `linear_view(batch)` and `states(batch)` expose what the decomposition needs; both run
    without dropout so they describe the trained function itself.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int, num_classes: int):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(vocab_size, cfg.embedding_dim, padding_idx=0)
        self.cell = CELLS[cfg.cell](cfg.embedding_dim, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = ClassificationHead(cfg.hidden_size, num_classes, cfg.pooling,
                                       bias=cfg.output_bias, dropout=cfg.dropout)

    def encode(self, batch: Batch) -> torch.Tensor:
        x = self.dropout(self.embedding(batch.tokens))
        out, _ = self.cell(x, batch.mask)
        return out

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.head(self.encode(batch), batch)

    def loss(self, output, batch):
        return self.head.loss(output, batch)

    # --- analysis hooks -------------------------------------------------------------
    @torch.no_grad()
    def linear_view(self, batch: Batch) -> LinearView:
        return self.cell.linear_view(self.embedding(batch.tokens), batch.mask)

    @torch.no_grad()
    def states(self, batch: Batch) -> torch.Tensor:
        """The cell's full state [B,T,S] at every step (the LSTM's [c; h])."""
        return self.cell.scan(self.embedding(batch.tokens), batch.mask)[0]

    @property
    def readout_weight(self) -> torch.Tensor:
        return self.head.readout_weight
