"""Encoder + task head, built from a config: the one model class every task uses."""
from __future__ import annotations

import torch
from torch import nn

from .cells.base import LinearView
from .data.batching import Batch
from .encoder import RNNEncoder, build_encoder
from .errors import RnnlensError
from .config import NEXT_TOKEN_TASKS, ModelConfig, future_leak


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
    leak = future_leak(cfg) if task in NEXT_TOKEN_TASKS else None
    if leak is not None:
        raise RnnlensError(f"a language model ({task}: next-symbol prediction) needs a one-direction "
                           f"recurrent encoder; {leak}")
    if task in ("dyck", "crossserial"):
        from .heads.formal import CrossSerialHead, DyckHead
        head = DyckHead if task == "dyck" else CrossSerialHead
        return head(D, labels, dropout=cfg.dropout, bias=cfg.output_bias)
    if task == "lm":
        return LMHead(D, vocab_size, encoder.embedding, tie=cfg.tie_weights,
                      cutoffs=cfg.adaptive_softmax, dropout=cfg.dropout)
    raise RnnlensError(f"unknown task {task!r}")


def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    """cfg.init_range: every parameter uniform in (-r, r); cfg.forget_bias: the LSTM forget
    gates' bias (torch's layout has two bias vectors; their sum is set). Padding rows of the
    lookup tables stay zero. cfg.cell_bias false: every bias of every recurrent cell (each
    parameter whose own name starts with "bias") is zero and left out of training."""
    from .cells.classic import LSTM

    with torch.no_grad():
        if cfg.init_range is not None:
            for p in model.parameters():
                nn.init.uniform_(p, -cfg.init_range, cfg.init_range)
            for mod in model.modules():
                if isinstance(mod, nn.Embedding) and mod.padding_idx is not None:
                    mod.weight[mod.padding_idx].zero_()
        if cfg.forget_bias is not None:
            for mod in model.modules():
                if isinstance(mod, LSTM):
                    H = mod.hidden_size
                    mod.bias_ih[H: 2 * H] = cfg.forget_bias
                    mod.bias_hh[H: 2 * H] = 0.0
        if not cfg.cell_bias:
            for p in cell_biases(model).values():
                p.zero_()
                p.requires_grad_(False)


def cell_biases(model: nn.Module) -> dict[str, torch.Tensor]:
    """The bias terms of every recurrent cell in `model`, by their names in its state dict:
    each cell parameter whose own name starts with "bias" (model.cell_bias)."""
    from .cells.base import Cell

    out = {}
    for prefix, mod in model.named_modules():
        if isinstance(mod, Cell):
            for name, p in mod.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("bias"):
                    out[f"{prefix}.{name}" if prefix else name] = p
    return out


class RNNModel(nn.Module):
    """tokens[B,T] -> encoder -> states[B,T,D] -> head.

    For language modelling the encoder state is carried from one batch to the next (truncated
    BPTT over consecutive segments; model.carry_state: false starts every segment afresh);
    `reset_state()` starts a new stream. A sentence-level
    language model (`sentence_level`, and every memory network) starts each batch from zero.
    `linear_view(batch)` and `states(batch)` expose what the decomposition needs; both run
    without dropout. A memory network (cfg.memory) also gives `attention(batch)` and
    `memory_context(batch)`; its linear view explains the recurrent layer below the block.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int, task: str = "classify",
                 labels: list[str] | None = None, sentence_level: bool = False):
        super().__init__()
        self.cfg = cfg
        self.task = task
        self.labels = labels
        self.encoder = build_encoder(cfg, vocab_size)
        self.head = build_head(cfg, task, self.encoder, labels, vocab_size)
        init_weights(self, cfg)
        self.stream_lm = task == "lm" and not sentence_level and cfg.memory is None   # BPTT over a stream
        self.carries_state = self.stream_lm and cfg.carry_state
        self._carry = None

    @property
    def embedding(self) -> nn.Embedding:
        return self.encoder.embedding

    def reset_state(self) -> None:
        self._carry = None

    def encode(self, batch: Batch) -> torch.Tensor:
        carry = self.carries_state
        if carry and self._carry is not None and self._carry[0].shape[0] != len(batch):
            self._carry = None
        # a dense batch has no padding to hold: the recurrent layers run without the mask
        dense = getattr(batch, "dense", False) and isinstance(self.encoder, RNNEncoder)
        mask = None if dense else batch.mask
        out, state = self.encoder(batch.tokens, mask, self._carry if carry else None)
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

    # --- memory networks ------------------------------------------------------------
    @property
    def has_memory(self) -> bool:
        return self.cfg.memory is not None

    def _memory_run(self, batch: Batch) -> dict[str, torch.Tensor]:
        if not self.has_memory:
            raise RnnlensError("this model has no memory block (model.memory is null)")
        was_training = self.training
        self.eval()                   # dropout off, as the other analysis hooks run
        try:
            with torch.no_grad():
                self.encoder(batch.tokens, batch.mask)
        finally:
            self.train(was_training)
        return self.encoder.last

    def attention(self, batch: Batch) -> torch.Tensor:
        """The memory block's attention [B,T,K] (K = N, or 2N bidirectional) in eval mode:
        [b, t, k] is the weight on the word at t - k (k < N; k = 0 the current word) or at
        t + 2 + (k - N) (k >= N), exactly 0 where that word does not exist and at padding."""
        return self._memory_run(batch)["attention"]

    def memory_context(self, batch: Batch) -> torch.Tensor:
        """The block's context vectors s_t [B,T,H] (eq. 3), reported beside the linear view:
        the decomposition explains the recurrent state h_t the block attends from, not s_t."""
        return self._memory_run(batch)["context"]

    @property
    def last_attention(self) -> torch.Tensor | None:
        """The attention [B,T,K] of the most recent forward (training mode included), detached."""
        return getattr(self.encoder, "last", {}).get("attention")
