"""Sequence tagging: a projection of every state to tag scores, then a linear-chain CRF
(implicit-ngrams paper E.3, after Lample et al. 2016). Scored by entity-level F1 as
conlleval computes it."""
from __future__ import annotations

import torch
from torch import nn

from .base import Head
from .crf import LinearChainCRF


class TaggerHead(Head):
    """forward(states[B,T,D], batch) -> emissions[B,T,K]; loss = CRF negative log-likelihood
    per sentence, averaged over the batch."""

    select = ("f1", "max")
    train_metrics = False          # Viterbi decoding every training step is not worth it

    def __init__(self, input_size: int, tags: list[str], dropout: float = 0.0, constrain: bool = True):
        super().__init__()
        self.tags = tags
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(input_size, len(tags))
        constraints = None
        if constrain:
            from .crf import iobes_constraints

            if any(t[:2] in ("E-", "S-") for t in tags):
                constraints = iobes_constraints(tags)
        self.crf = LinearChainCRF(len(tags), constraints)

    def forward(self, states: torch.Tensor, batch) -> torch.Tensor:
        return self.proj(self.dropout(states))

    def loss(self, output: torch.Tensor, batch) -> torch.Tensor:
        return self.crf.nll(output, batch.targets, batch.mask).mean()

    def metrics(self, output: torch.Tensor, batch) -> dict:
        paths = self.crf.decode(output, batch.mask)
        gold = batch.targets.tolist()
        lengths = batch.lengths.tolist()
        return {"pred": [[self.tags[i] for i in p] for p in paths],
                "gold": [[self.tags[i] for i in g[:L]] for g, L in zip(gold, lengths)]}

    def finalize(self, m: dict) -> dict[str, float]:
        from ..metrics import conll_f1

        s = conll_f1(m["gold"], m["pred"])
        return {"precision": s["precision"], "recall": s["recall"], "f1": s["f1"]}

    def details(self, m: dict) -> dict:
        """Entity-level precision, recall and F1 per type, as conlleval prints them."""
        from ..metrics import conll_f1

        return {"per_type": conll_f1(m["gold"], m["pred"])["per_type"]}
