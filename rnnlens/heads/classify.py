"""Sentence-level heads: classification, regression and relation classification.

Each pools the encoder's states into one vector per sentence (the final state, or the mean
of the states), optionally passes it through a 2-layer tanh MLP (as in the
rational-recurrences paper), and applies one linear layer. A binary task gets a single
logit (sigmoid + binary cross-entropy), as in the sequence-level paper's "linear layer and
sigmoid layer"; its weight row is the polarity direction w of eq. 19-20. With bias=False and
no MLP the logit is exactly w^T h, so n-gram scores add up to it.

Head protocol: forward(states, batch) -> output; loss(output, batch); metrics(output, batch)
-> dict whose numbers the trainer sums and whose lists it concatenates; finalize(merged) ->
metrics; `select` = (metric name, "max" | "min") for early stopping.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import register
from .base import Head

POOLINGS = ("final", "mean")
register("pooling", POOLINGS)


def mean_pool(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask[..., None].to(states.dtype)
    return (states * m).sum(1) / m.sum(1).clamp(min=1)


def last_pool(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """states[B,T,D] at each row's last real position (mask[B,T], any padding): [B,D]."""
    from ..cells.base import end_positions

    return states[torch.arange(states.shape[0], device=states.device), end_positions(mask.to(states.device))[1]]


class ClassificationHead(Head):
    """forward(states[B,T,D], batch) -> logits [B] (binary) or [B,C]."""

    select = ("accuracy", "max")

    def __init__(self, input_size: int, num_classes: int, pooling: str = "final", bias: bool = False,
                 dropout: float = 0.0, mlp_hidden: int | None = None,
                 final: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}")
        self.num_classes = num_classes
        self.pooling = pooling
        self.final = final or last_pool
        self.dropout = nn.Dropout(dropout)
        self.mlp = None
        if mlp_hidden:
            self.mlp = nn.Sequential(nn.Linear(input_size, mlp_hidden), nn.Tanh(), nn.Dropout(dropout))
            input_size = mlp_hidden
        self.out = nn.Linear(input_size, self.output_size(num_classes), bias=bias)

    @staticmethod
    def output_size(num_classes: int) -> int:
        if num_classes < 2:
            raise ValueError("a classifier needs at least 2 classes")
        return 1 if num_classes == 2 else num_classes

    @property
    def readout_weight(self) -> torch.Tensor:
        """[C', H]: the rows that score a state (one row for a binary task)."""
        if self.mlp is not None:
            from ..errors import RnnlensError
            raise RnnlensError("an MLP head has no linear readout: n-gram scores need a linear output layer")
        return self.out.weight

    def pool(self, states: torch.Tensor, batch) -> torch.Tensor:
        """[B,T,D] -> [B,D]."""
        if self.pooling == "final":
            return self.final(states, batch.mask)
        return mean_pool(states, batch.mask)

    def forward(self, states: torch.Tensor, batch) -> torch.Tensor:
        h = self.dropout(self.pool(states, batch))
        if self.mlp is not None:
            h = self.mlp(h)
        logits = self.out(h)
        return logits[:, 0] if logits.shape[-1] == 1 and self.num_classes == 2 else logits

    def loss(self, output: torch.Tensor, batch) -> torch.Tensor:
        if output.dim() == 1:
            return F.binary_cross_entropy_with_logits(output, batch.targets.to(output.dtype))
        return F.cross_entropy(output, batch.targets)

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        return (output > 0).long() if output.dim() == 1 else output.argmax(-1)

    def metrics(self, output: torch.Tensor, batch) -> dict:
        return {"correct": float((self.predict(output) == batch.targets).sum()), "n": float(len(batch))}

    def finalize(self, m: dict) -> dict[str, float]:
        return {"accuracy": m["correct"] / max(m["n"], 1.0)}


class RegressionHead(ClassificationHead):
    """One real output trained with mean squared error (SST-5 as {-2..2}, implicit-ngrams E.1)."""

    select = ("mse", "min")

    def __init__(self, input_size: int, **kw):
        super().__init__(input_size, 2, **kw)

    def loss(self, output, batch):
        return F.mse_loss(output, batch.targets.to(output.dtype))

    def metrics(self, output, batch) -> dict:
        err = output - batch.targets.to(output.dtype)
        return {"sse": float((err * err).sum()), "n": float(len(batch)),
                # neutral targets (0) have no sign: left out of the sign accuracy's count and total
                "sign_ok": float((((output > 0) == (batch.targets > 0)) & (batch.targets != 0)).sum()),
                "nonzero": float((batch.targets != 0).sum())}

    def finalize(self, m: dict) -> dict[str, float]:
        # sign accuracy over non-neutral targets: the binary view of a regression model
        return {"mse": m["sse"] / max(m["n"], 1.0), "sign_accuracy": m["sign_ok"] / max(m["nonzero"], 1.0)}

    def predict(self, output):
        return output


class RelationHead(ClassificationHead):
    """Relation classification scored by the official SemEval-2010 Task 8 macro-F1."""

    select = ("macro_f1", "max")

    def __init__(self, input_size: int, labels: list[str], **kw):
        super().__init__(input_size, len(labels), **kw)
        self.labels = labels

    def metrics(self, output, batch) -> dict:
        return {**super().metrics(output, batch), "pred": self.predict(output).tolist(),
                "gold": batch.targets.tolist()}

    def finalize(self, m: dict) -> dict[str, float]:
        from ..metrics import label_macro_f1, semeval_macro_f1

        gold, pred = [self.labels[i] for i in m["gold"]], [self.labels[i] for i in m["pred"]]
        scores = semeval_macro_f1(gold, pred)
        # beside the official score, the plain macro-F1 over all directed labels (Other
        # included), which papers that do not name their F1 often report
        return {"accuracy": m["correct"] / max(m["n"], 1.0), "macro_f1": scores["macro_f1"],
                "label_macro_f1": label_macro_f1(gold, pred)}
