"""The memory block of recurrent memory networks (Tran, Bisazza & Monz 2016, Section 3.1).

At step t the block reads the LSTM state h_t and the N most recent words x_{t-N+1..t}
(N = the memory size, 15 in the paper; the current word x_t included). The paper's text lost
its equations; these are the ones ../shared/papers/NOTES.md reads from the authors' code:

    p_t = softmax(M_i h_t)               (eq. 1; M_i: the key rows of the words in memory)
    p_t = softmax((M_i + T_M) h_t)       (eq. 2, +tM: a learned N x H position table)
    s_t = C_i^T p_t                      (eq. 3; with +tM, C_i + T_C)
    h^m_t = W_c h_t + s_t                (linear composition)
    z = sig(W_z s + U_z h), r = sig(W_r s + U_r h),
    h~ = tanh(W s + U (r * h)), h^m = (1 - z) * h + z * h~     (gated, eq. 4-7)

M and C are |V| x H lookup tables of their own (not the input embedding). The equations omit
biases; here W_c and the W_* maps on s carry one (as a GRU's gates do), the U_* maps none.

Slot k of the memory (k = 0..N-1) holds the word at position t - k: row k of T_M and T_C
belongs to "k words back", so the newest word always meets the same row. Slots that do not
exist (before the sentence start, or on padding) get logit -inf before the softmax: at
t < N only t + 1 slots share the mass. The bidirectional block (sentence completion, Section
6) adds N slots after the word to predict: slot N + j holds x_{t+2+j}; x_{t+1} is never in
its memory. It is a sentence scorer, not a language model (its output at t reads later
words), and nothing recurrent may follow it: a layer after the block (RMR) would carry
x_{t+1}, which the block reads at t - 1, into the prediction at t (the config refuses it).

Shapes: B batch, T time, H hidden, N memory size, V vocabulary. `MemoryBlock.forward` is the
vectorised version (every window gathered at once, one batched product per attention and
context); `memory_block_ref` is the per-position loop written like the equations.
"""
from __future__ import annotations

import torch
from torch import nn

from ..config import register

COMPOSITIONS = ("linear", "gated")
register("composition", COMPOSITIONS)


def memory_offsets(size: int, bidirectional: bool, device=None) -> torch.Tensor:
    """[K] long: the position of slot k relative to t. K = N (0, -1, ..., -(N-1)) or 2N
    (then 2, 3, ..., N+1 after them: the words after the one to predict, in order)."""
    back = -torch.arange(size, device=device)
    if not bidirectional:
        return back
    return torch.cat([back, torch.arange(2, size + 2, device=device)])


class MemoryBlock(nn.Module):
    """forward(h[B,T,H], tokens[B,T], mask[B,T]) -> (h_m[B,T,H], attn[B,T,K], context[B,T,H]).

    K = N, or 2N when bidirectional. attn[b, t, k] is the weight on the word at t + offset[k]
    (see `memory_offsets`; k = 0 is the current word), exactly 0 for slots that do not exist
    and on every slot of a padded position t. At a padded t the context is 0 and h_m is the
    composition of h with s = 0; rows never mix.
    """

    def __init__(self, vocab_size: int, hidden_size: int, size: int = 15, temporal: bool = False,
                 composition: str = "gated", bidirectional: bool = False):
        super().__init__()
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition must be one of {COMPOSITIONS}, got {composition!r}")
        self.hidden_size = hidden_size
        self.size = size
        self.temporal = temporal
        self.composition = composition
        self.bidirectional = bidirectional
        H, K = hidden_size, size * (2 if bidirectional else 1)
        self.keys = nn.Embedding(vocab_size, H, padding_idx=0)       # M
        self.values = nn.Embedding(vocab_size, H, padding_idx=0)     # C
        if temporal:
            self.temporal_keys = nn.Parameter(torch.empty(K, H))      # T_M, row k = slot k
            self.temporal_values = nn.Parameter(torch.empty(K, H))    # T_C
        if composition == "linear":
            self.W_c = nn.Linear(H, H)
        else:
            self.W_s = nn.Linear(H, 3 * H)              # [W_z; W_r; W] s (+ biases)
            self.U_zr = nn.Linear(H, 2 * H, bias=False)  # [U_z; U_r] h
            self.U = nn.Linear(H, H, bias=False)         # U (r * h)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for p in self.parameters():
            nn.init.uniform_(p, -0.05, 0.05)            # the paper's init (Section 4.2)
        with torch.no_grad():
            self.keys.weight[0].zero_()
            self.values.weight[0].zero_()

    @property
    def slots(self) -> int:
        return self.size * (2 if self.bidirectional else 1)

    def compose(self, h: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """g(s, h) -> h^m, any leading shape [..., H]."""
        if self.composition == "linear":
            return self.W_c(h) + s
        sz, sr, sn = self.W_s(s).chunk(3, -1)
        hz, hr = self.U_zr(h).chunk(2, -1)
        z = torch.sigmoid(sz + hz)
        r = torch.sigmoid(sr + hr)
        cand = torch.tanh(sn + self.U(r * h))
        return h + z * (cand - h)

    def windows(self, mask: torch.Tensor):
        """(pos[B,T,K] clamped into range, valid[B,T,K]) for every position's memory."""
        B, T = mask.shape
        off = memory_offsets(self.size, self.bidirectional, mask.device)
        pos = torch.arange(T, device=mask.device)[:, None] + off[None]        # [T,K]
        inside = (pos >= 0) & (pos < T)
        K = off.shape[0]
        pos = pos.clamp(0, T - 1).expand(B, T, K)
        # sizes spelt out, not -1: an empty batch (B = 0) has no elements to infer them from
        valid = inside[None] & mask.gather(1, pos.reshape(B, T * K)).view(B, T, K) & mask[:, :, None]
        return pos, valid

    def forward(self, h: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None):
        B, T, H = h.shape
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=h.device)
        pos, valid = self.windows(mask)
        K = pos.shape[-1]
        ids = tokens.gather(1, pos.reshape(B, T * K))                          # [B,T*K]
        keys = self.keys(ids).view(B * T, K, H)
        values = self.values(ids).view(B * T, K, H)
        # One batched product per step's window: [B*T,K,H] @ [B*T,H,1].
        logits = (keys @ h.reshape(B * T, H, 1)).view(B, T, K)
        if self.temporal:           # (M_i + T_M) h = M_i h + T_M h: no [B,T,K,H] sum needed
            logits = logits + h @ self.temporal_keys.T
        logits = logits.masked_fill(~valid, float("-inf"))
        # A padded position has no slot at all: softmax it over zeros, then zero it, so no
        # NaN reaches the output or the gradients.
        has = valid.any(-1, keepdim=True)
        attn = torch.softmax(torch.where(has, logits, torch.zeros_like(logits)), -1)
        attn = attn.masked_fill(~valid, 0.0)
        context = (attn.view(B * T, 1, K) @ values).view(B, T, H)
        if self.temporal:
            context = context + attn @ self.temporal_values
        return self.compose(h, context), attn, context

    def extra_repr(self) -> str:
        return (f"size={self.size}, temporal={self.temporal}, composition={self.composition!r}, "
                f"bidirectional={self.bidirectional}")


def memory_block_ref(block: MemoryBlock, h: torch.Tensor, tokens: torch.Tensor,
                     mask: torch.Tensor | None = None):
    """The block at every (b, t) on its own, like eq. 1-7; never calls the fast path.
    Same inputs and outputs as MemoryBlock.forward."""
    B, T, H = h.shape
    N, K = block.size, block.slots
    if mask is None:
        mask = torch.ones(B, T, dtype=torch.bool, device=h.device)
    outs, attns, contexts = [], [], []
    for b in range(B):
        L = int(mask[b].sum())        # right-padded: positions 0..L-1 are the sentence
        for t in range(T):
            p_full = h.new_zeros(K)
            s = h.new_zeros(H)
            if t < L:
                back = [(k, t - k) for k in range(N) if t - k >= 0]
                ahead = [(N + j, t + 2 + j) for j in range(N) if t + 2 + j < L] if block.bidirectional else []
                slots = back + ahead
                rows = torch.tensor([k for k, _ in slots])
                words = tokens[b, torch.tensor([i for _, i in slots])]
                M_i = block.keys.weight[words]                    # [n, H]
                C_i = block.values.weight[words]
                if block.temporal:
                    M_i = M_i + block.temporal_keys[rows]
                    C_i = C_i + block.temporal_values[rows]
                p = torch.softmax(M_i @ h[b, t], 0)               # eq. 1 / 2
                s = C_i.T @ p                                     # eq. 3
                p_full = p_full.index_put((rows,), p)
            outs.append(_compose_ref(block, h[b, t], s))
            attns.append(p_full)
            contexts.append(s)
    if not outs:                      # an empty batch or no positions: nothing to stack
        return h.new_zeros(B, T, H), h.new_zeros(B, T, K), h.new_zeros(B, T, H)
    return tuple(torch.stack(xs).view(B, T, -1) for xs in (outs, attns, contexts))


def _compose_ref(block: MemoryBlock, h: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    if block.composition == "linear":
        return block.W_c.weight @ h + block.W_c.bias + s
    H = block.hidden_size
    W_z, W_r, W = block.W_s.weight.split(H)
    b_z, b_r, b = block.W_s.bias.split(H)
    U_z, U_r = block.U_zr.weight.split(H)
    z = torch.sigmoid(W_z @ s + b_z + U_z @ h)
    r = torch.sigmoid(W_r @ s + b_r + U_r @ h)
    h_tilde = torch.tanh(W @ s + b + block.U.weight @ (r * h))
    return (1 - z) * h + z * h_tilde
