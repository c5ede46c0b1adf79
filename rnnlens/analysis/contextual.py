"""Contextual decomposition (CD) of LSTM and GRU classifiers.

    cd = ContextualDecomposition(model)
    s = cd.attribute(tokens, span=(2, 4))         # tokens 2 and 3 are the phrase
    s.rel + s.irrel == s.output                   # the target logit, exactly

CD (Murdoch, Liu & Yu, ICLR 2018) runs the recurrence once more carrying every state as a
sum of two parts, h_t = beta_t + gamma_t (and c_t = beta^c_t + gamma^c_t for the LSTM):
beta is what the phrase (the positions in `rel_mask`) contributes, gamma everything else.
The sum is the model's true state at every step. At each step:

- the gate pre-activations split into a relevant part (W_h beta_{t-1}, plus W_x x_t when
  t is in the phrase), an irrelevant part (W_h gamma_{t-1}, plus W_x x_t otherwise) and
  the bias b;
- each sigmoid/tanh is linearised by Shapley values (the paper's Sec. 3.2): with the
  default shapley="bias-first" the bias enters first and keeps f(b), and the relevant
  part y_r gets the average of its two marginal contributions
  L(y_r) = [f(b + y_r) - f(b) + f(b + y_r + y_i) - f(b + y_i)] / 2 (likewise y_i);
  shapley="full" averages over all six orders of (y_r, y_i, b) and gives the bias the rest;
- a product of a gate with a source (f * c_{t-1}, i * g, the LSTM's o * tanh(c) with
  decompose_o) expands into the nine products of their parts. Relevant*relevant goes to
  beta; irrelevant*irrelevant and the irrelevant*bias terms go to gamma. The others go
  where `CDRules.terms` says: "murdoch" (the paper's rule) puts relevant*bias and
  bias*relevant in beta and relevant*irrelevant in gamma; "gcd" (Jumelet, Zuidema &
  Hupkes 2019) also puts an irrelevant gate acting on a relevant source ("irrel*rel") in
  beta, as LRP does; any subset of TERMS can be passed;
- bias*bias products: `bias_bias="phrase"` (the authors' code) puts them in beta at
  positions of the phrase and in gamma elsewhere; "irrel" (as the paper's equations write
  it) always in gamma; "rel" always in beta (with an empty phrase: the model's default,
  bias-driven reasoning of Jumelet et al.);
- the LSTM's h_t = o_t tanh(c_t): tanh(c_t) is split by the two-term Shapley rule and o_t
  is kept whole (the paper's choice); decompose_o=True splits it as a third product.

With the phrase = every token and bias_bias="phrase", gamma stays exactly 0 (from a zero
start state); with bias_bias="irrel", gamma is what the bias*bias products start and the
recurrence carries, and it vanishes when they do (an LSTM with b_g = 0).

GRU (no paper gives a rule; this one follows the LSTM's): with z the update gate and
u = W_hn h_{t-1} + b_hn (parts: W_hn beta, W_hn gamma, b_hn),

    n_t = tanh(W_in x_t + b_in + r_t * u),   h_t = (1 - z_t) n_t + z_t h_{t-1}

r * u is a product (its bias*bias term r_b b_hn joins b_in as the bias of n's
pre-activation); (1 - z) is a gate with parts (-z_r, -z_i, 1 - z_b) acting on n like the
LSTM's i on g, and z acts on h_{t-1} like f on c_{t-1}.

The start state (h0, c0) goes to gamma (init="irrel") or to beta (init="rel"). Masks:
a position with mask False keeps both parts of the state and contributes nothing.

Stacked layers: a layer above another reads that layer's two parts as its input, so its
gate pre-activations split as W_x beta_below + W_h beta (relevant) and W_x gamma_below +
W_h gamma (irrelevant); the phrase positions still decide where bias*bias terms go.

Bidirectional models: the backward direction runs the same decomposition on each row's real
tokens in reverse (the phrase reversed with them), as the encoder runs it, and its parts are
put back in reading order; a layer's parts are the two directions' side by side, and the head
reads the forward direction at the last real token and the backward one at the first (or the
mean of both over the real positions), as the model does.

Models: an rnnlens RNNModel with cell "gru" or "lstm" (one or more layers, one or two
directions, a linear sentence head on the final state or the mean of the states), or a plain
nn.Module
holding one nn.Embedding, one batch-first nn.LSTM/nn.GRU (any num_layers, one direction) and
an nn.Linear on its last hidden state.
The target score splits as rel = w . beta_T and irrel = w . gamma_T + bias (beta and gamma
averaged over real positions for mean pooling).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.nn.utils.parametrize import type_before_parametrizations

from ..cells.classic import GRU, LSTM
from ..data.batching import Batch
from ..cells.base import end_positions
from ..encoder import RNNEncoder, reverse_padded
from ..errors import RnnlensError
from ..heads.classify import ClassificationHead
from .attribution import _eval, _find_rnn
from .token_attributions import METHODS, _embedding, _signed, is_native, prepare
from .cd_core import (PRESETS, TERMS, CDRules, CDScores, CDStates, cd_gru, cd_lstm,  # noqa: F401 (the public API)
                      linearize, product, split_tanh)


# --- models ------------------------------------------------------------------------------------
@dataclass
class _Parts:
    kind: str                      # "lstm" | "gru"
    layers: list                   # per layer, bottom first, per direction: (weight_ih, weight_hh, bias_ih, bias_hh)
    embedding: nn.Module
    readout: nn.Linear
    pooling: str
    single: bool                   # the model returns one score per row, [B]


def _native_parts(model) -> _Parts:
    cfg, enc, head = model.cfg, model.encoder, model.head
    if not isinstance(enc, RNNEncoder):
        raise RnnlensError("contextual decomposition explains recurrent encoders, not the transformer or memory networks")
    cell = enc.cells[0]
    kind = type_before_parametrizations(cell)     # a spectrally normalised cell is a subclass
    if kind not in (GRU, LSTM):
        raise RnnlensError(f"contextual decomposition takes the gru and lstm cells, not {cfg.cell!r}")
    if not isinstance(head, ClassificationHead) or head.mlp is not None:
        raise RnnlensError("contextual decomposition needs a sentence head with one linear layer (no MLP)")
    cells = [(c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh) for c in enc.cells]
    D = enc.directions
    layers = [cells[k: k + D] for k in range(0, len(cells), D)]
    single = head.out.out_features == 1
    return _Parts("lstm" if kind is LSTM else "gru", layers, enc.embedding, head.out, head.pooling, single)


def _torch_parts(model) -> _Parts:
    _, _, rnn = _find_rnn(model)
    if not isinstance(rnn, (nn.LSTM, nn.GRU)):
        raise RnnlensError(f"contextual decomposition takes nn.LSTM and nn.GRU, not {type(rnn).__name__}")
    if rnn.bidirectional or not rnn.batch_first or rnn.proj_size:
        raise RnnlensError("contextual decomposition takes a one-direction, batch_first recurrent module "
                           "without projections")
    H = rnn.hidden_size
    linears = [m for m in model.modules() if isinstance(m, nn.Linear) and m.in_features == H]
    if len(linears) != 1:
        raise RnnlensError(f"contextual decomposition needs one nn.Linear on the hidden state; the model has {len(linears)}")
    zero = rnn.weight_ih_l0.new_zeros(rnn.weight_ih_l0.shape[0])
    layers = []
    for k in range(rnn.num_layers):
        w = [getattr(rnn, f"{name}_l{k}") for name in ("weight_ih", "weight_hh")]
        b = [getattr(rnn, f"{name}_l{k}") for name in ("bias_ih", "bias_hh")] if rnn.bias else [zero, zero]
        layers.append([(*w, *b)])
    kind = "lstm" if isinstance(rnn, nn.LSTM) else "gru"
    return _Parts(kind, layers, _embedding(model), linears[0], "final", linears[0].out_features == 1)


class ContextualDecomposition:
    """Contextual decomposition of a classifier's target score (see the module docstring).

    model: an rnnlens RNNModel (cell "gru" or "lstm") or a plain nn.Module with one
           nn.Embedding, one batch-first nn.LSTM/nn.GRU and an nn.Linear on its last state.
    rules: a CDRules, or its fields as keywords (terms=, bias_bias=, shapley=, ...).
    """

    def __init__(self, model: nn.Module, rules: CDRules | None = None, **rule_kw):
        self.model = model
        self.rules = rules if rules is not None else CDRules(**rule_kw)
        self.native = is_native(model)
        self.parts = _native_parts(model) if self.native else _torch_parts(model)

    def _inputs(self, tokens, mask):
        if isinstance(tokens, Batch):
            tokens, mask = tokens.tokens, tokens.mask if mask is None else mask
        tokens = torch.as_tensor(tokens)
        tokens = tokens[None] if tokens.dim() == 1 else tokens
        device = self.parts.layers[0][0][0].device
        if self.native:
            mask = tokens.ne(0) if mask is None else torch.as_tensor(mask).bool()
        elif mask is not None and not bool(torch.as_tensor(mask).all()):
            raise RnnlensError("a plain module reads every position: give rows of equal length, without a mask")
        return tokens.to(device), None if mask is None else mask.to(device)

    @torch.no_grad()
    def states(self, tokens, rel_mask, mask=None, rows=None, keep: str = "all") -> CDStates:
        """CDStates of the top recurrent layer for tokens [B,T] (or a Batch) and the phrases
        rel_mask [R,T] (rows [R]: each phrase's sentence, None for one phrase per row). A
        layer above another reads the parts of the one below: its input splits as they do."""
        tokens, mask = self._inputs(tokens, mask)
        p = self.parts
        with _eval(self.model):
            x = p.embedding(tokens)
        fn = cd_lstm if p.kind == "lstm" else cd_gru
        rel_mask = torch.as_tensor(rel_mask).bool().to(x.device)
        for k, directions in enumerate(p.layers):
            top = k == len(p.layers) - 1
            if len(directions) == 1:
                st = fn(x, *directions[0], rel_mask, mask, rules=self.rules, rows=rows, keep=keep if top else "all")
            else:
                st = self._both_directions(fn, x, directions, rel_mask, mask, rows)
                if top:
                    return _pool_directions(st, self._real(mask, rows, rel_mask), keep)
            if top:
                return st
            if mask is not None:        # the layers above read rows of the phrases, not sentences
                mask = mask[rows] if rows is not None else mask
            x, rows = (st.rel, st.irrel), None

    @staticmethod
    def _real(mask, rows, rel_mask) -> torch.Tensor:
        """[R,T] bool: the real positions of each row of the phrases."""
        if mask is None:
            return torch.ones_like(rel_mask)
        return mask[rows] if rows is not None else mask

    def _both_directions(self, fn, x, directions, rel_mask, mask, rows) -> CDStates:
        """One bidirectional layer: CDStates [R,T,2H] (forward parts, then backward parts in
        reading order). x: the embeddings [B,T,E] (rows picks each phrase's sentence) or the
        parts of the layer below [R,T,D]."""
        real = self._real(mask, rows, rel_mask)
        fwd = fn(x, *directions[0], rel_mask, mask, rules=self.rules, rows=rows, keep="all")
        if isinstance(x, tuple):
            back_x = tuple(reverse_padded(v, real) for v in x)
        else:
            back_x = reverse_padded(x, mask if mask is not None else torch.ones(x.shape[:2], dtype=torch.bool,
                                                                               device=x.device))
        bwd = fn(back_x, *directions[1], reverse_padded(rel_mask, real), mask, rules=self.rules, rows=rows,
                 keep="all")
        both = [None if getattr(fwd, f.name) is None else
                torch.cat([getattr(fwd, f.name), reverse_padded(getattr(bwd, f.name), real)], -1)
                for f in fields(CDStates)]
        return CDStates(*both)

    def _scores(self, tokens, rel_mask, mask, rows):
        """([R,C], [R,C]): the readout's rel and irrel parts for every output."""
        keep = "mean" if self.parts.pooling == "mean" else "final"
        st = self.states(tokens, rel_mask, mask, rows, keep)
        W, b = self.parts.readout.weight, self.parts.readout.bias
        irrel = st.irrel @ W.T.to(st.irrel)
        return st.rel @ W.T.to(st.rel), irrel + b.to(irrel) if b is not None else irrel

    def _target(self, full, target):
        """[R] long class index from target (int, [R] or None for the argmax of full [R,C])."""
        R, C = full.shape
        if self.parts.single:
            if target is not None and bool(torch.as_tensor(target).ne(0).any()):
                raise RnnlensError(f"the model gives one score per row; target must be None or 0, not {target}")
            return torch.zeros(R, dtype=torch.long, device=full.device)
        if target is None:
            return full.argmax(1)
        t = torch.as_tensor(target, device=full.device).long()
        t = t.expand(R) if t.dim() == 0 else t
        if bool((t < 0).any()) or bool((t >= C).any()):
            raise RnnlensError(f"target out of range for {C} classes")
        return t

    def _output(self, tokens, mask, full):
        """The model's own scores [B,C], checked against the decomposition's total full [B,C]:
        a plain module whose output is not its linear layer on the last state is refused."""
        if mask is None:
            mask = torch.ones_like(tokens, dtype=torch.bool)
        with _eval(self.model), torch.no_grad():
            out = self.model(Batch(tokens, mask, mask.sum(1)) if self.native else tokens)
        out = out[0] if isinstance(out, tuple) else out
        out = out[:, None] if out.dim() == 1 else out
        tol = 1e-4 if full.dtype == torch.float64 else 1e-2
        if out.shape != full.shape or not torch.allclose(full, out.to(full), rtol=tol, atol=tol):
            raise RnnlensError("the model's output is not its nn.Linear on the recurrent layer's final state, "
                               "so contextual decomposition cannot explain it")
        return out.to(full)

    def attribute(self, tokens, target=None, mask=None, span=None, rel_mask=None) -> CDScores:
        """The CD of the target score for tokens [B,T] (or a Batch). The phrase: span=(i, j),
        the positions i..j-1 of every row (half-open, as a slice), or rel_mask [B,T] bool.
        target: class index (int or [B]), None for the predicted class; 0 or None for a
        model with one output."""
        tokens, mask = self._inputs(tokens, mask)
        B, T = tokens.shape
        if (span is None) == (rel_mask is None):
            raise RnnlensError("give the phrase as span=(start, stop) or rel_mask=[B, T], one of them")
        if span is not None:
            rel_mask = _span_mask(span, T, tokens.device).expand(B, T)
        rel, irrel = self._scores(tokens, rel_mask, mask, None)
        out = self._output(tokens, mask, rel + irrel)
        t = self._target(out, target)
        rel, irrel, out = (v.gather(1, t[:, None])[:, 0] for v in (rel, irrel, out))
        return CDScores(rel, irrel, out, t)

    def phrase_scores(self, tokens, spans, target=None, mask=None) -> torch.Tensor:
        """[B,K]: the CD (relevant) score of each of K spans (start, stop), half-open, in
        every row, toward the target; one pass over time for all B*K rows."""
        tokens, mask = self._inputs(tokens, mask)
        B, T = tokens.shape
        K = len(spans)
        if not K:
            raise RnnlensError("phrase_scores needs at least one span")
        rel_mask = torch.stack([_span_mask(s, T, tokens.device) for s in spans]).repeat(B, 1)    # [B*K, T]
        rows = torch.arange(B, device=tokens.device).repeat_interleave(K)
        rel, irrel = self._scores(tokens, rel_mask, mask, rows)
        full = (rel + irrel)[::K]                                 # the same for every span of a sentence
        if not self.native:
            self._output(tokens, mask, full)
        t = self._target(full, target)
        return rel.gather(1, t[rows][:, None])[:, 0].view(B, K)

    def token_scores(self, tokens, target=None, mask=None) -> torch.Tensor:
        """[B,T]: the CD score of each real token alone (a one-token phrase), 0 at pads;
        the B*L one-token phrases run as rows of one pass over time."""
        tokens, mask = self._inputs(tokens, mask)
        B, T = tokens.shape
        real = mask if mask is not None else torch.ones_like(tokens, dtype=torch.bool)
        rows, pos = real.nonzero(as_tuple=True)
        rel_mask = torch.zeros(len(rows), T, dtype=torch.bool, device=tokens.device)
        rel_mask[torch.arange(len(rows), device=tokens.device), pos] = True
        rel, irrel = self._scores(tokens, rel_mask, mask, rows)
        full = rel.new_zeros(B, rel.shape[1])
        full[rows] = rel + irrel                                  # the same for every row of a sentence
        if not self.native:
            self._output(tokens, mask, full)
        t = self._target(full, target)
        out = rel.new_zeros(B, T)
        out[rows, pos] = rel.gather(1, t[rows][:, None])[:, 0]
        return out


def _pool_directions(st: CDStates, real: torch.Tensor, keep: str) -> CDStates:
    """A bidirectional top layer's parts [R,T,2H] read as the head reads its states: "final"
    takes the forward half at each row's last real token and the backward half at its first
    (RNNEncoder.final), "mean" averages both over the real positions, "all" keeps them."""
    if keep == "all":
        return st
    if keep not in ("final", "mean"):
        raise RnnlensError(f"keep must be one of all, final, mean, not {keep!r}")
    out = []
    for f in fields(CDStates):
        v = getattr(st, f.name)
        if v is None:
            out.append(None)
        elif keep == "mean":
            m = real[..., None].to(v.dtype)
            out.append((v * m).sum(1) / m.sum(1).clamp(min=1))
        else:
            first, last = end_positions(real)
            rows, H = torch.arange(v.shape[0], device=v.device), v.shape[-1] // 2
            out.append(torch.cat([v[rows, last, :H], v[rows, first, H:]], -1))
    return CDStates(*out)


def _span_mask(span, T: int, device) -> torch.Tensor:
    start, stop = span
    if not 0 <= start < stop <= T:
        raise RnnlensError(f"span {tuple(span)} is not a non-empty (start, stop) within {T} positions")
    pos = torch.arange(T, device=device)
    return (pos >= start) & (pos < stop)


def phrase_scores(model, tokens, spans, target=None, mask=None, rules: CDRules | None = None) -> torch.Tensor:
    """[B,K]: the CD score of each span (start, stop) of tokens [B,T] toward the target."""
    return ContextualDecomposition(model, rules).phrase_scores(tokens, spans, target, mask)


def cd_tokens(model, batch: Batch, target=None, output=None, rules: CDRules | None = None, **_) -> torch.Tensor:
    """[B,T] CD score of each token alone toward the target (signed like the other token
    methods: toward the predicted class, or a single output read in its predicted
    direction), 0 at pads."""
    _, kind, t = prepare(model, batch, target, output)
    cd = ContextualDecomposition(model, rules)
    a = cd.token_scores(batch.tokens, target=t if kind == "softmax" else None,
                        mask=batch.mask if is_native(model) else None)
    return _signed(a, kind, t.to(a.device)) * batch.mask.to(a)


METHODS.setdefault("cd", cd_tokens)
