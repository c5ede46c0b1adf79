"""N-gram attribution of any recurrent classifier, in the style of captum.

    attr = NGramAttribution(model).attribute(tokens, target=1)
    attr.ngrams[b, d, end, start]    # contribution of one n-gram to the target output
    attr.tokens[b, t]                # per token: the n-grams that start at t, summed

`model` is an rnnlens RNNModel or any nn.Module whose forward runs one torch.nn.RNN, GRU or
LSTM (multi-layer and bidirectional included) and returns scores [B, C] or [B]. The first
recurrent layer is decomposed (implicit-ngrams paper, eq. 10-14); everything after it is
read through the gradient of the target output with respect to that layer's states:

    f = offset + sum_{n-grams} contribution + remainder
    contribution(i..t, direction d) = w_{d,t} . v_{d,i:t},   w_{d,t} = df/dh_{d,t}
    offset    = f - sum_t w_t . h_t    (the bias, plus whatever the layers above are
                                        not linear in; zero-free for a linear head)
    remainder = sum_t w_t . (h_t - sum_i v_{i:t})   (the first-order error of the first
                                        layer's view; zero for exact cells such as MVMA,
                                        and for every cell in the exact view)

For a linear head on the final state, w is the head's row at the last position and zero
elsewhere, so the contributions are the paper's scores s_{i:T} = w^T v_{i:T} of the
n-grams ending at the last token; with mean pooling every position has w/T.

Two views of the first layer (`view=`):

- "first-order" (the default; the implicit-ngrams paper's view): each step linearised at
  the zero state, A(x_t) the Jacobian at s = 0 and g(x_t) = f(x_t, 0). A and g depend on
  the token alone, so an n-gram's vector v_{i:t} is the same wherever the n-gram occurs
  and can be read on its own. For Elman, GRU and LSTM cells the view is approximate and
  the remainder says by how much; cells that are affine recurrences (MVMA, the rational
  and unitary cells, ...) have no remainder.
- "exact": each step linearised at the true previous state (rnnlens.cells.local),
  A_t = d s_t / d s_{t-1} there and g_t = s_t - A_t s_{t-1}. The n-grams add up to the
  states exactly, so the remainder is 0 for every cell. But A_t and g_t are taken along
  this sentence's trajectory: an n-gram's vector depends on its context (what came before
  it and what follows up to t), and the same n-gram in another sentence has another
  vector. For cells that are affine recurrences the two views are the same.

`tokens[b, i]` gives each n-gram's contribution to the token it starts at: v_{i:t} is what
remains of that token's input term g(x_i) after the tokens up to t act on it, so the token
attributions sum to the n-gram total (captum's completeness, with offset and remainder
reported beside it). `shared()` gives the alternative that splits each n-gram evenly over
its tokens.

A torch LSTM's final cell state c_n is read through the cell's full state [c; h]: when the
model uses c_n, the gradient reaches the c half of the state, and the n-grams carry that
path too (it is not left in the offset). A cell whose output is a nonlinear function of
the state its view explains (the rational cells' h = tanh(o * c)) is read through its
`output_gain` (first order at 0), and the nonlinearity's part is in the remainder: such a
view is not reported as exact. The exact view reads it through the exact ratio h / c
(`exact.secant_gain`), with no remainder.

`attribute_tokens` gives `tokens` alone, without the n-gram matrix: one reverse sweep of
vector-Jacobian products r_{t-1} = A_t^T r_t (rnnlens.analysis.exact), O(T S^2).

`attribute_positions` explains a model whose output is one score vector per position (a
tagger, a language model): one forward, one backward per position.

Backward directions read right to left: their n-grams are stored at [end, start] in
reading-order positions of the original sequence, so end <= start there.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn

from ..cells.base import LinearView
from ..cells.local import exact_view
from ..errors import RnnlensError
from .capture import TORCH_RNNS, _Captured, _eval, _find_rnn, _SplitRNN  # noqa: F401 (re-exported)
from .exact import TokenAttributions, attribute_tokens, secant_gain
from .ngrams import initial_part, require_real

VIEWS = ("first-order", "exact")

# --- the decomposition against per-position readouts ---------------------------------------
def ngram_contributions(view: LinearView, w: torch.Tensor, full_state: bool = False) -> torch.Tensor:
    """w[B,T,C,H]: a readout per position on the view's output coordinates (full_state:
    w[B,T,C,S] on every coordinate of the state, e.g. both halves of the LSTM's [c; h]).
    Returns c[B, T(end t), T(start i), C] = w_t . v_{i:t} (zero for i > t and at pads).

    Ends whose readout is zero are skipped: with only the last position read (final
    pooling) this is the reverse recursion r <- r A(x_k) per end, O(T S^2 C); otherwise the
    forward recursion over all n-grams, O(T^2 S^2)."""
    require_real(view, "n-gram contributions")
    B, T, S = view.g.shape
    C = w.shape[2]
    if full_state:
        W = w.to(view.g.dtype)
    else:
        W = w.new_zeros(B, T, C, S).to(view.g.dtype)
        W[..., view.readout] = w.to(view.g.dtype)
    out = view.g.new_zeros(B, T, T, C)
    ends = [t for t in range(T) if bool(W[:, t].ne(0).any())]
    if len(ends) * 4 <= T:                     # few ends read: reverse recursion per end
        for t in ends:
            R = W[:, t]                                           # [B,C,S]
            for i in range(t, -1, -1):
                out[:, t, i] = torch.einsum("bcs,bs->bc", R, view.g[:, i])
                if i:
                    R = view.rapply(i, R)
    else:
        V = view.g[:, :0]
        for t in range(T):
            V = torch.cat([view.apply(t, V), view.g[:, t, None]], 1) if t else view.g[:, :1]
            out[:, t, : t + 1] = torch.einsum("bis,bcs->bic", V, W[:, t])
    if view.mask is not None:
        m = view.mask
        tri = torch.ones(T, T, dtype=torch.bool, device=m.device).tril()
        out = out * (tri[None] & m[:, :, None] & m[:, None, :])[..., None].to(out.dtype)
    return out


# --- results ---------------------------------------------------------------------------------
@dataclass
class NGramAttributions:
    """ngrams:    [B, D, T(end), T(start)] contribution of each n-gram (D directions)
    tokens:    [B, T] per-token attribution (n-grams summed at the token they start at)
    output:    [B] the model's target output f
    offset:    [B] f - sum_t w_t . h_t
    remainder: [B] first-order error of the first layer's view (0 for exact cells)
    mask:      [B, T] bool, real tokens
    exact:     the first layer's view is exact
    words:     the tokens as text, when the model has a vocabulary or text was given
    view:      "first-order" or "exact", the view asked for (see the module docstring)
    """

    ngrams: torch.Tensor
    tokens: torch.Tensor
    output: torch.Tensor
    offset: torch.Tensor
    remainder: torch.Tensor
    mask: torch.Tensor
    exact: bool
    words: list[list[str]] | None = None
    view: str = "first-order"
    directions: int = field(init=False)

    def __post_init__(self):
        self.directions = self.ngrams.shape[1]

    @property
    def total(self) -> torch.Tensor:
        """[B] sum of all n-gram contributions."""
        return self.ngrams.sum((1, 2, 3))

    def shared(self) -> torch.Tensor:
        """[B, T] each n-gram's contribution split evenly over the tokens it spans."""
        B, D, T, _ = self.ngrams.shape
        pos = torch.arange(T, device=self.ngrams.device)
        end, start = pos[:, None], pos[None, :]
        lo, hi = torch.minimum(end, start), torch.maximum(end, start)
        per = (self.ngrams.sum(1) / (hi - lo + 1).to(self.ngrams.dtype)).double()   # [B,T,T]
        # each n-gram's share enters at its first token and leaves after its last: a running
        # sum over positions (memory [B,T,T], where a [T,T,T] cover table is cubic in length)
        steps = per.new_zeros(B, T + 1)
        steps.scatter_add_(1, lo.reshape(1, -1).expand(B, -1), per.reshape(B, -1))
        steps.scatter_add_(1, (hi + 1).reshape(1, -1).expand(B, -1), -per.reshape(B, -1))
        return steps.cumsum(1)[:, :T].to(self.ngrams.dtype)

    def top(self, k: int = 10, b: int = 0) -> list[dict]:
        """The k n-grams of row b with the largest |contribution|."""
        flat = self.ngrams[b].reshape(-1)
        order = flat.abs().argsort(descending=True)[:k]
        T = self.ngrams.shape[-1]
        out = []
        for idx in order.tolist():
            if flat[idx] == 0:
                break
            d, rest = divmod(idx, T * T)
            end, start = divmod(rest, T)
            lo, hi = min(start, end), max(start, end)
            text = " ".join(self.words[b][lo: hi + 1]) if self.words else None
            out.append({"direction": "backward" if d else "forward", "start": start, "end": end,
                        "text": text, "score": float(flat[idx])})
        return out


class NGramAttribution:
    """n-gram attributions of a recurrent model's target output (see the module docstring).

    model: an rnnlens RNNModel, or an nn.Module that runs one torch.nn.RNN/GRU/LSTM and
           returns scores [B,C] (or [B] / [B,1] for a single score).
    rnn:   the recurrent module to decompose, when the model holds several.
    vocab: an rnnlens Vocab (taken from the model when it has one), for the n-grams as text.
    view:  "first-order" (the papers' view: linearised at the zero state, the same vector for
           an n-gram wherever it occurs, a remainder for nonlinear cells) or "exact"
           (linearised at the true states: no remainder, but each n-gram's vector depends
           on its context). See the module docstring.
    """

    def __init__(self, model: nn.Module, rnn: nn.Module | None = None, vocab=None, view: str = "first-order"):
        if view not in VIEWS:
            raise RnnlensError(f"view must be one of {', '.join(VIEWS)}, not {view!r}")
        self.model = model
        self.vocab = vocab
        self.view = view
        # A memory network's recurrent layers sit under its block (encoder.lower): they are
        # decomposed, and the block above is read through the gradient like any upper layer.
        enc = getattr(model, "encoder", None)
        self._first = getattr(enc, "lower", enc)
        self.native = self._first is not None and hasattr(self._first, "cells")
        if self.native:
            if not hasattr(self._first, "directions"):
                raise RnnlensError("NGramAttribution explains recurrent encoders, not the transformer baseline")
            self.rnn = None
        elif rnn is not None:
            if type(rnn) not in TORCH_RNNS:
                raise RnnlensError(f"rnn must be a torch.nn.RNN, GRU or LSTM, not {type(rnn).__name__}")
            parents = [(p, n) for p in model.modules() for n, c in p.named_children() if c is rnn]
            if not parents:
                raise RnnlensError("rnn is not a submodule of the model")
            self.parent, self.name = parents[0]
            self.rnn = rnn
        else:
            self.parent, self.name, self.rnn = _find_rnn(model)

    # ---------------------------------------------------------------------------------------
    def _forward_native(self, inputs, record):
        from ..data.batching import Batch

        model = self.model
        if isinstance(inputs, Batch):
            batch = inputs
        else:
            tokens = torch.as_tensor(inputs)
            if tokens.dim() == 1:
                tokens = tokens[None]
            mask = tokens.ne(0)
            batch = Batch(tokens, mask, mask.sum(1))
        enc = self._first
        lengths = batch.mask.sum(1)
        hooks = []
        for d in range(enc.directions):
            def hook(module, args, output, d=d):
                x, mask = args[0], args[1] if len(args) > 1 else None
                record.append(_Captured(module, x.detach(), mask, output[0], bool(d), lengths))
            hooks.append(enc.cells[d].register_forward_hook(hook))
        try:
            out = model(batch)
        finally:
            for h in hooks:
                h.remove()
        return out, batch.tokens, batch.mask

    def _forward_torch(self, inputs, additional_forward_args, record):
        split = _SplitRNN(self.rnn, record)
        setattr(self.parent, self.name, split)
        try:
            args = inputs if isinstance(inputs, tuple) else (inputs,)
            out = self.model(*args, *(additional_forward_args or ()))
        finally:
            setattr(self.parent, self.name, self.rnn)
        tokens = args[0] if torch.is_tensor(args[0]) and not args[0].is_floating_point() else None
        T = record[0].x.shape[1]
        B = record[0].x.shape[0]
        mask = torch.ones(B, T, dtype=torch.bool, device=record[0].x.device)
        return out, tokens, mask

    @staticmethod
    def _select(out: torch.Tensor, target) -> torch.Tensor:
        if isinstance(out, tuple):
            out = out[0]
        if out.dim() == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.dim() == 1:
            if target not in (None, 0):
                raise RnnlensError(f"the model gives one score per row; target must be None or 0, not {target}")
            return out
        if out.dim() != 2:
            raise RnnlensError(f"the model's output has shape {tuple(out.shape)}; expected [B, C] or [B]")
        if target is None:
            target = out.argmax(1)
        target = torch.as_tensor(target, device=out.device).long()
        if target.dim() == 0:
            target = target.expand(out.shape[0])
        if bool((target < 0).any()) or bool((target >= out.shape[1]).any()):
            raise RnnlensError(f"target out of range for {out.shape[1]} outputs")
        return out.gather(1, target[:, None])[:, 0]

    def attribute(self, inputs, target=None, additional_forward_args=None) -> NGramAttributions:
        """inputs: token ids [B,T] (or an rnnlens Batch) for an RNNModel; for a plain module,
        whatever its forward takes first (a tuple for several), with additional_forward_args
        after it. target: class index (int or [B]) or None for the predicted class; ignored
        for single-score models. Returns NGramAttributions on the model's device."""
        with self._running(inputs, additional_forward_args) as (out, tokens, mask, record, views):
            return self._decompose(record, views, self._select(out, target), tokens, mask, retain=False)

    def attribute_tokens(self, inputs, target=None, additional_forward_args=None,
                         deletion: bool = False) -> TokenAttributions:
        """The token attributions of `attribute` (each n-gram credited to the token it starts
        at) without the n-gram matrix: one reverse sweep r_i = w_i + A_{i+1}^T r_{i+1},
        tokens_i = r_i . g_i (rnnlens.analysis.exact), O(T S^2) per direction instead of
        O(T^2 S^2). Same arguments as `attribute`; returns TokenAttributions (tokens [B,T],
        output, offset, remainder and start [B]). deletion=True gives instead, from the same
        sweep, each token's effect on the output when its step is removed, r_i . (s_i - s_{i-1})
        (rnnlens.analysis.exact.token_shares); those do not sum to the output."""
        with self._running(inputs, additional_forward_args) as (out, _, mask, record, views):
            return attribute_tokens(record, views, self._select(out, target), mask, self.view, deletion=deletion)

    def attribute_positions(self, inputs, targets, additional_forward_args=None) -> list[NGramAttributions]:
        """For a model whose output is one score vector per position, [B,T,C]: the attribution
        of out[b, t, targets[t]] at every position t (targets: T class indices, or a [B,T]
        tensor; -1 skips a position, which then gets None). One forward, one backward per
        position. Each result's n-grams end at or before its position (a causal model) or
        anywhere (a bidirectional tagger)."""
        with self._running(inputs, additional_forward_args) as (out, tokens, mask, record, views):
            if isinstance(out, tuple):
                out = out[0]
            if out.dim() != 3:
                raise RnnlensError(f"attribute_positions needs an output of shape [B, T, C], got {tuple(out.shape)}")
            B, T, C = out.shape
            tg = torch.as_tensor(targets, device=out.device).long()
            tg = tg.expand(B, T) if tg.dim() == 1 else tg
            if tg.shape != (B, T) or bool((tg >= C).any()):
                raise RnnlensError(f"targets must be {T} class indices below {C} (or [B, T])")
            todo = (tg >= 0).any(0).tolist()
            last = max((t for t in range(T) if todo[t]), default=-1)
            results = []
            for t in range(T):
                f = out[:, t].gather(1, tg[:, t, None].clamp(min=0))[:, 0]
                results.append(self._decompose(record, views, f, tokens, mask, retain=t != last) if todo[t] else None)
            return results

    @contextlib.contextmanager
    def _running(self, inputs, additional_forward_args):
        """The model's forward in eval mode under autograd, the first layer captured: yields
        (out, tokens, mask, record, views), views[d] = (linear view, output gain) of record d,
        built once for every output decomposed."""
        record: list[_Captured] = []
        # cuDNN's RNN backward refuses eval mode, and the gradient through the layers above the
        # first is what reads them: on a GPU those layers run torch's native kernels instead.
        with _eval(self.model), torch.enable_grad(), torch.backends.cudnn.flags(enabled=False):
            if self.native:
                out, tokens, mask = self._forward_native(inputs, record)
            else:
                out, tokens, mask = self._forward_torch(inputs, additional_forward_args, record)
            if not record:
                raise RnnlensError("the model's forward did not run its recurrent layer")
            views = [self._view_of(rec) for rec in record]
            yield out, tokens, mask, record, views

    def _view_of(self, rec: _Captured) -> tuple[LinearView, torch.Tensor | None, bool]:
        """(view, output gain, exact) of a captured layer: the first-order view and the gain at
        0, or the exact view and the exact ratio h / c (`secant_gain`)."""
        with torch.no_grad():
            if self.view == "exact":
                view = exact_view(rec.cell, rec.x, rec.mask)
                require_real(view, "n-gram contributions")
                return view, secant_gain(rec.cell, rec.x, rec.mask, view), True
            view = rec.cell.linear_view(rec.x, rec.mask)
            require_real(view, "n-gram contributions")
            gain = rec.cell.output_gain(rec.x, rec.mask)
            # the output is the view's readout (or its full state) exactly, or only to first order
            return view, gain, view.exact and gain is None

    def _decompose(self, record, views, f, tokens, mask, retain: bool) -> NGramAttributions:
        """f[B] = offset + n-grams + remainder, through the gradient of f at the first layer."""
        grads = torch.autograd.grad(f.sum(), [r.out for r in record], allow_unused=True, retain_graph=retain)
        f = f.detach()
        B, T = mask.shape
        D = len(record)
        ngrams = f.new_zeros(B, D, T, T)
        linear = f.new_zeros(B)
        explained = f.new_zeros(B)
        exact = True
        with torch.no_grad():
            for d, (rec, w, (view, gain, is_exact)) in enumerate(zip(record, grads, views)):
                exact = exact and is_exact
                if w is None:
                    continue
                linear += (w * rec.out.detach()).sum((1, 2)).to(f.dtype)
                if gain is not None:         # output h = gain * c: to first order, or exactly (h / c)
                    w = w * gain
                c = ngram_contributions(view, w[:, :, None, :], full_state=rec.full_state)[..., 0].to(f.dtype)
                init = _start_part(view, w, rec.full_state)
                explained += c.sum((1, 2)) + init
                if rec.reverse:
                    c = _to_reading_order(c, mask)
                ngrams[:, d] = c
        tokens_attr = ngrams.sum((1, 2))                                                # by start
        words = None
        vocab = self.vocab
        if tokens is not None and vocab is not None:
            words = [[vocab.itos[i] for i in row[: int(m.sum())].tolist()] for row, m in zip(tokens, mask)]
        return NGramAttributions(ngrams=ngrams, tokens=tokens_attr, output=f, offset=f - linear,
                                 remainder=linear - explained, mask=mask, exact=exact, words=words,
                                 view=self.view)


def _start_part(view: LinearView, w: torch.Tensor, full_state: bool) -> torch.Tensor:
    """[B]: sum_t w_t . (A(x_t)...A(x_1) s_0), the part of the state that a non-zero start
    state s_0 of the view carries (a cell that starts from a state of its own, e.g. the
    URN's e_0); zero when the view starts at zero."""
    init = initial_part(view)
    if init is None:
        return w.new_zeros(w.shape[0])
    part = init if full_state else init[..., view.readout]
    return (w.to(part.dtype) * part).sum((1, 2)).to(w.dtype)


def _to_reading_order(c: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """c[B,T,T] indexed by positions of the reversed sequence -> original positions (the
    reversal of the encoder's backward directions, any padding)."""
    from ..cells.base import reversal_index

    B, T, _ = c.shape
    orig = reversal_index(mask.to(c.device))                            # reversed index -> original
    out = torch.zeros_like(c)
    bi = torch.arange(B, device=c.device)[:, None, None]
    out[bi, orig[:, :, None], orig[:, None, :]] = c
    return out
