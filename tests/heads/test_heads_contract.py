"""Every task's head is a rnnlens.heads.base.Head: its optional members are declared, with
their defaults, so nothing probes for them."""
from __future__ import annotations

import pytest
import torch

from rnnlens.config import TASKS, ModelConfig
from rnnlens.encoder import build_encoder
from rnnlens.heads.base import Head
from rnnlens.models import build_head

LABELS = {"classify": ["neg", "pos"], "regress": None, "relation": ["Other", "Cause-Effect(e1,e2)"],
          "tag": ["O", "B-PER", "I-PER"], "agreement": ["sg", "pl"], "dyck": ["(", ")", "<s>", "</s>"],
          "crossserial": ["a", "b", "c", "d", "<s>", "</s>"], "lm": None}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_head_declares_the_contract(task):
    cfg = ModelConfig(cell="gru", hidden_size=4, embedding_dim=4)
    encoder = build_encoder(cfg, 10)
    head = build_head(cfg, task, encoder, LABELS[task], 10)
    assert isinstance(head, Head)
    metric, direction = head.select
    assert isinstance(metric, str) and direction in ("min", "max")
    assert isinstance(head.train_metrics, bool)
    assert head.adaptive is None or task == "lm"
    assert callable(head.loss_and_metrics) and callable(head.finalize)


def test_an_adaptive_softmax_is_the_heads_submodule():
    cfg = ModelConfig(cell="gru", hidden_size=4, embedding_dim=4, adaptive_softmax=[3])
    head = build_head(cfg, "lm", build_encoder(cfg, 10), None, 10)
    assert isinstance(head.adaptive, torch.nn.AdaptiveLogSoftmaxWithLoss)
    assert any(k.startswith("adaptive.") for k in head.state_dict())
