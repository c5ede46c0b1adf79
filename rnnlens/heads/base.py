"""The contract of a task head (rnnlens.models.build_head picks one per task).

A head maps the encoder's states to the task's output and scores it. What a head may
declare is declared here, with its default, so that the trainer and the analyses read it as
an attribute rather than probe for it:

    select         (metric, "min"|"max"): the dev metric that picks the best epoch
    train_metrics  whether metrics are computed on training batches too
    adaptive       the adaptive softmax of a language-model head, else None
"""
from __future__ import annotations

import torch
from torch import nn


class Head(nn.Module):
    select: tuple[str, str] = ("accuracy", "max")
    train_metrics: bool = True

    # A property, not a class attribute: a plain `adaptive = None` on the class would hide
    # the submodule an LM head registers under that name (nn.Module keeps it in _modules).
    @property
    def adaptive(self) -> nn.Module | None:
        return self._modules.get("adaptive")

    @adaptive.setter
    def adaptive(self, value) -> None:          # a module is registered by nn.Module itself
        if value is not None:
            raise TypeError("Head.adaptive takes an nn.Module (registered as a submodule) or None")
        self._modules.pop("adaptive", None)

    def forward(self, states: torch.Tensor, batch) -> torch.Tensor:        # pragma: no cover - abstract
        raise NotImplementedError

    def loss(self, output: torch.Tensor, batch) -> torch.Tensor:            # pragma: no cover - abstract
        raise NotImplementedError

    def metrics(self, output: torch.Tensor, batch) -> dict:                 # pragma: no cover - abstract
        """Sums over the batch (numbers add up across batches, lists concatenate)."""
        raise NotImplementedError

    def finalize(self, m: dict) -> dict:
        """The epoch's metrics from the summed batch metrics."""
        return m

    def details(self, m: dict) -> dict:
        """What an evaluation report shows beyond finalize's numbers, from the same summed
        batch metrics (a tagger's scores per entity type); nothing by default."""
        return {}

    def loss_and_metrics(self, output: torch.Tensor, batch) -> tuple[torch.Tensor, dict]:
        """Both at once (a head that can share work between them overrides this)."""
        return self.loss(output, batch), self.metrics(output, batch)
