"""Encoders: embedding -> stacked, optionally bidirectional recurrent cells (or a
Transformer baseline), with embedding, vertical and variational recurrent dropout; and the
recurrent memory network (recurrent cells -> memory block -> optional second cell)."""
from __future__ import annotations

import math

import torch
from torch import nn

from .cells import CELLS
from .cells.base import Cell, LinearView, end_positions, hold_at_pads, reversal_index
from .errors import RnnlensError
from .config import ModelConfig


def run_cell(cell: Cell, x: torch.Tensor, mask: torch.Tensor | None, state=None,
             chunk: int | None = None):
    """cell(x[B,T,E], mask[B,T], state[B,S]) -> (out[B,T,H], final[B,S]); with `chunk` = L,
    in training (grad enabled, T > L), the same values through gradient checkpointing over
    time: the cell runs on chunks of L steps, each under torch.utils.checkpoint, the state
    carried from one to the next. Backward then keeps only the chunks' inputs, outputs and
    boundary states and recomputes one chunk's activations at a time, so the memory a cell's
    steps hold drops from T steps' worth to L (plus a [B,S] state per chunk), for one more
    forward pass in backward (benchmarks/RESULTS.md has a length-4096 step with and without). Padding needs nothing: a masked step keeps the state, across
    a chunk boundary too; a pad repeats its row's last real output (the cell contract), which
    a chunk holding no real token of that row cannot see when the output reads x_t (the
    rational cells' output gate), so the outputs are held once more after the chunks. Any
    mask works: pads on the left and inside a row too.
    Recurrent dropout draws one mask per sequence, before the time loop: the generator is
    set back to where it was before each chunk, so every chunk draws that same mask (as one
    call would) and the generator ends where one call leaves it. Cells that are not a
    state carried forward (MVM, VM, MM: g enters only at each call's first token) refuse."""
    T = x.shape[1]
    if not chunk or T <= chunk or not cell.training or not torch.is_grad_enabled():
        return cell(x, mask, state)
    if not cell.additive:
        raise RnnlensError(f"model.checkpoint_chunk: {type(cell).__name__} keeps only the n-gram that "
                           "starts at each call's first token, so it cannot run in chunks of time")
    from torch.utils.checkpoint import checkpoint

    redraw = cell.recurrent_dropout > 0
    if redraw:
        cuda = x.device.type == "cuda"
        rng = torch.cuda.get_rng_state(x.device) if cuda else torch.get_rng_state()
    outs = []
    for a in range(0, T, chunk):
        if redraw:
            if cuda:
                torch.cuda.set_rng_state(rng, x.device)
            else:
                torch.set_rng_state(rng)
        m = None if mask is None else mask[:, a:a + chunk]
        out, state = checkpoint(cell, x[:, a:a + chunk], m, state, use_reentrant=False)
        outs.append(out)
    # every pad takes its row's last real output, from whichever chunk holds it (before the
    # first real token each chunk already gives the start state's output)
    return hold_at_pads(torch.cat(outs, 1), mask), state


def reverse_padded(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reverse the real tokens of each row of x[B,T,...] (mask[B,T], any padding); pad
    positions stay where they are. Applying it twice gives x back."""
    B, T = x.shape[:2]
    idx = reversal_index(mask.to(x.device))
    return x.gather(1, idx.view(B, T, *([1] * (x.dim() - 2))).expand_as(x))


class RNNEncoder(nn.Module):
    """tokens[B,T] -> out[B,T,D], D = hidden_size * directions.

    forward(tokens, mask, state) takes and returns `state`: a list with one [B,S] tensor per
    (layer, direction), so a language model can carry it across BPTT segments.
    Backward directions run on each sequence reversed within its length, and their outputs
    are put back in reading order.
    """

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding):
        super().__init__()
        self.cfg = cfg
        self.embedding = embedding
        self.directions = 2 if cfg.bidirectional else 1
        self.output_size = cfg.hidden_size * self.directions
        cells = []
        for layer in range(cfg.layers):
            size = embedding.embedding_dim if layer == 0 else self.output_size
            for _ in range(self.directions):
                cells.append(build_cell(cfg, size))
        self.cells = nn.ModuleList(cells)
        if cfg.checkpoint_chunk is not None and not cells[0].additive:
            raise RnnlensError(f"model.checkpoint_chunk does not apply to {cfg.cell}: it keeps only the "
                               "n-gram from each call's first token, so its time steps cannot be split")
        cells[0].init_embedding(embedding)
        self.embedding_dropout = nn.Dropout(cfg.embedding_dropout)
        self.layer_dropout = nn.Dropout(cfg.layer_dropout)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, state: list | None = None):
        x = self.embedding_dropout(self.embedding(tokens))
        new_state = []
        for layer in range(self.cfg.layers):
            if layer:
                x = self.layer_dropout(x)
            outs = []
            for d in range(self.directions):
                k = layer * self.directions + d
                cell = self.cells[k]
                s0 = state[k] if state is not None else None
                chunk = self.cfg.checkpoint_chunk
                if d == 0:
                    out, fin = run_cell(cell, x, mask, s0, chunk)
                else:
                    out, fin = run_cell(cell, reverse_padded(x, mask), mask, s0, chunk)
                    out = reverse_padded(out, mask)
                outs.append(out)
                new_state.append(fin)
            x = torch.cat(outs, -1) if self.directions > 1 else outs[0]
        return x, new_state

    def final(self, out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The summary state [B,D]: the forward direction at the last real token and the
        backward direction at the first (mask[B,T], any padding)."""
        B = out.shape[0]
        rows = torch.arange(B, device=out.device)
        first, last = end_positions(mask.to(out.device))
        if self.directions == 1:
            return out[rows, last]
        H = self.cfg.hidden_size
        return torch.cat([out[rows, last, :H], out[rows, first, H:]], -1)

    def linear_view(self, tokens: torch.Tensor, mask: torch.Tensor) -> LinearView:
        if self.cfg.layers != 1 or self.directions != 1:
            raise RnnlensError("the n-gram decomposition here explains single-layer, one-direction models")
        return self.cells[0].linear_view(self.embedding(tokens), mask)

    def states(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.cfg.layers != 1 or self.directions != 1:
            raise RnnlensError("the n-gram decomposition here explains single-layer, one-direction models")
        return self.cells[0].scan(self.embedding(tokens), mask)[0]


class TransformerEncoder(nn.Module):
    """torch's TransformerEncoder with learned positions; the baseline of the implicit-ngrams
    paper's Table 8 (its "final" summary is the mean of the outputs, as the paper trains it)."""

    max_len = 4096

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding):
        super().__init__()
        self.cfg = cfg
        self.embedding = embedding
        self.directions = 1
        self.output_size = cfg.hidden_size
        self.inp = nn.Linear(embedding.embedding_dim, cfg.hidden_size)
        self.pos = nn.Embedding(self.max_len, cfg.hidden_size)
        layer = nn.TransformerEncoderLayer(cfg.hidden_size, cfg.heads, 4 * cfg.hidden_size,
                                           dropout=cfg.layer_dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.embedding_dropout = nn.Dropout(cfg.embedding_dropout)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, state=None):
        T = tokens.shape[1]
        if T > self.max_len:
            raise RnnlensError(f"the transformer baseline takes at most {self.max_len} tokens, got {T}")
        x = self.inp(self.embedding_dropout(self.embedding(tokens))) * math.sqrt(self.cfg.hidden_size)
        x = x + self.pos(torch.arange(T, device=tokens.device))[None]
        out = self.encoder(x, src_key_padding_mask=~mask)
        return out, None

    def final(self, out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.to(out.device, out.dtype)[..., None]
        return (out * m).sum(1) / m.sum(1).clamp(min=1)

    def linear_view(self, tokens, mask):
        raise RnnlensError("a transformer has no linear view: the n-gram decomposition explains recurrent cells")

    states = linear_view


def build_cell(cfg: ModelConfig, input_size: int):
    """The model's cell (cfg.cell) for one layer and direction: built with cfg.truncation where
    set, given the model's settings (`Cell.configure`), its recurrent weights spectrally
    normalised with cfg.spectral_norm (each gate's block apart with cfg.spectral_norm_per_gate,
    rnnlens.ops.spectral). Every recurrent layer of every encoder is built here."""
    extra = {"truncation": cfg.truncation} if cfg.truncation is not None else {}
    try:
        cell = CELLS[cfg.cell](input_size, cfg.hidden_size, **extra)
        cell.configure(cfg)
    except ValueError as e:           # a setting the cell cannot take (mm's hidden size d*d, ...)
        raise RnnlensError(f"model.cell {cfg.cell}: {e}") from None
    if cfg.spectral_norm:
        from torch.nn.utils.parametrizations import spectral_norm

        from .ops.spectral import per_gate_spectral_norm
        for module, name in cell.recurrent_weights():
            (per_gate_spectral_norm if cfg.spectral_norm_per_gate else spectral_norm)(module, name)
    return cell


class MemoryEncoder(nn.Module):
    """A recurrent memory network (Tran, Bisazza & Monz 2016, Section 3.2): tokens[B,T] ->
    LSTM layers -> memory block -> (RMR: a second LSTM) -> out[B,T,H].

    RM = cfg.layers recurrent layers then the block; RMR adds one more recurrent layer on
    the block's output. The block's window never crosses a sentence, so this encoder takes
    no carried state: forward returns the final states of its recurrent layers only for
    symmetry with RNNEncoder. The last forward's attention [B,T,K], context [B,T,H] and
    the states the block attended from [B,T,H] stay in `last` (detached) for analysis.
    """

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding):
        super().__init__()
        from .cells.memory import MemoryBlock

        self.cfg = cfg
        self.directions = 1
        self.output_size = cfg.hidden_size
        self.lower = RNNEncoder(cfg, embedding)      # owns the embedding (one copy in the weights)
        self.block = MemoryBlock(embedding.num_embeddings, cfg.hidden_size, cfg.memory_size,
                                 cfg.memory_temporal, cfg.memory_composition, cfg.memory_bidirectional)
        self.upper = build_cell(cfg, cfg.hidden_size) if cfg.memory == "rmr" else None
        self.layer_dropout = nn.Dropout(cfg.layer_dropout)
        self.last: dict[str, torch.Tensor] = {}

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, state: list | None = None):
        if state is not None:
            raise RnnlensError("a memory network reads one sentence at a time: it takes no carried state")
        h, final = self.lower(tokens, mask)
        out, attn, context = self.block(self.layer_dropout(h), tokens, mask)
        self.last = {"attention": attn.detach(), "context": context.detach(), "states": h.detach()}
        if self.upper is not None:
            out, fin = run_cell(self.upper, self.layer_dropout(out), mask, None, self.cfg.checkpoint_chunk)
            final = [*final, fin]
        return out, final

    final = RNNEncoder.final

    @property
    def embedding(self) -> nn.Embedding:
        return self.lower.embedding

    def linear_view(self, tokens: torch.Tensor, mask: torch.Tensor) -> LinearView:
        """The view of the LSTM below the block (the state the block attends from); the block
        itself is reported beside it, as attention and context, not decomposed."""
        return self.lower.linear_view(tokens, mask)

    def states(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.lower.states(tokens, mask)


def build_encoder(cfg: ModelConfig, vocab_size: int) -> nn.Module:
    embedding = nn.Embedding(vocab_size, cfg.embedding_dim, padding_idx=0)
    if cfg.memory is not None:
        return MemoryEncoder(cfg, embedding)
    cls = TransformerEncoder if cfg.cell == "transformer" else RNNEncoder
    return cls(cfg, embedding)
