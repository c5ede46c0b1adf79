"""Sentence classification head: pool the states, then one linear layer.

A binary task gets a single logit (sigmoid + binary cross-entropy), as in the
sequence-level paper's "linear layer and sigmoid layer"; its weight row is the polarity
direction w of eq. 19-20. With bias=False the logit is exactly w^T h, so n-gram scores
add up to the logit.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

POOLINGS = ("final", "mean")


class ClassificationHead(nn.Module):
    """forward(states[B,T,H], batch) -> logits [B] (binary) or [B,C]."""

    def __init__(self, hidden_size: int, num_classes: int, pooling: str = "final",
                 bias: bool = False, dropout: float = 0.0):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}")
        if num_classes < 2:
            raise ValueError("a classifier needs at least 2 classes")
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, 1 if num_classes == 2 else num_classes, bias=bias)

    @property
    def readout_weight(self) -> torch.Tensor:
        """[C', H]: the rows that score a state (one row for a binary task)."""
        return self.out.weight

    def pool(self, states: torch.Tensor, batch) -> torch.Tensor:
        """[B,T,H] -> [B,H]: the state at each row's last real token, or the mean."""
        if self.pooling == "final":
            last = (batch.lengths - 1).clamp(min=0)
            return states[torch.arange(states.shape[0], device=states.device), last]
        m = batch.mask[..., None].to(states.dtype)
        return (states * m).sum(1) / m.sum(1).clamp(min=1)

    def forward(self, states: torch.Tensor, batch) -> torch.Tensor:
        logits = self.out(self.dropout(self.pool(states, batch)))
        return logits[:, 0] if self.num_classes == 2 else logits

    def loss(self, output: torch.Tensor, batch) -> torch.Tensor:
        if self.num_classes == 2:
            return F.binary_cross_entropy_with_logits(output, batch.targets.to(output.dtype))
        return F.cross_entropy(output, batch.targets)

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        return (output > 0).long() if self.num_classes == 2 else output.argmax(-1)

    def metrics(self, output: torch.Tensor, batch) -> dict[str, float]:
        """Sums over the batch; `finalize` turns summed dicts into metrics."""
        return {"correct": float((self.predict(output) == batch.targets).sum()), "n": float(len(batch))}

    @staticmethod
    def finalize(sums: dict[str, float]) -> dict[str, float]:
        return {"accuracy": sums["correct"] / max(sums["n"], 1.0)}
