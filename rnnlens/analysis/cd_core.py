"""The arithmetic of contextual decomposition (rnnlens.analysis.contextual explains it and
applies it to models): the rules (CDRules), the Shapley linearisation of a nonlinearity, the
split of a gated product into its nine parts, one step of the LSTM and of the GRU, and the
scan over time of one layer (cd_lstm, cd_gru)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import RnnlensError

TERMS = ("rel*bias", "bias*rel", "rel*irrel", "irrel*rel")
PRESETS = {"murdoch": ("rel*bias", "bias*rel"), "gcd": ("rel*bias", "bias*rel", "irrel*rel")}
_CHOICES = {"bias_bias": ("phrase", "irrel", "rel"), "shapley": ("bias-first", "full"), "init": ("irrel", "rel")}


@dataclass(frozen=True)
class CDRules:
    """How CD assigns the terms it cannot attribute by origin (see the module docstring).

    terms:       "murdoch", "gcd", or a tuple of gate*source names from TERMS that go to beta
    bias_bias:   "phrase" | "irrel" | "rel"
    shapley:     "bias-first" (the paper) | "full" (all orders of relevant, irrelevant, bias)
    decompose_o: split the LSTM's output gate too (the paper keeps it whole)
    init:        where a given start state goes, "irrel" | "rel"
    """

    terms: str | tuple = "murdoch"
    bias_bias: str = "phrase"
    shapley: str = "bias-first"
    decompose_o: bool = False
    init: str = "irrel"

    def __post_init__(self):
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise RnnlensError(f"CDRules.{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if isinstance(self.terms, str):
            if self.terms not in PRESETS:
                raise RnnlensError(f"CDRules.terms: unknown preset {self.terms!r} (presets: {', '.join(PRESETS)})")
        elif any(t not in TERMS for t in self.terms):
            raise RnnlensError(f"CDRules.terms: names must come from {', '.join(TERMS)}, not {tuple(self.terms)}")

    @property
    def rel_terms(self) -> frozenset:
        return frozenset(PRESETS[self.terms] if isinstance(self.terms, str) else self.terms)


@dataclass
class CDStates:
    """rel, irrel: beta and gamma of the hidden state, [B,T,H] (keep="all") or [B,H]
    (keep="final": after the last step; "mean": averaged over real positions).
    rel_c, irrel_c: the same for the LSTM's cell state (None for the GRU)."""

    rel: torch.Tensor
    irrel: torch.Tensor
    rel_c: torch.Tensor | None = None
    irrel_c: torch.Tensor | None = None


@dataclass
class CDScores:
    """rel, irrel [B]: the target score's parts (rel + irrel == output); output [B]: the
    model's own target score; target [B] long: the class explained (0 for one output)."""

    rel: torch.Tensor
    irrel: torch.Tensor
    output: torch.Tensor
    target: torch.Tensor


# --- linearising nonlinearities and splitting products ---------------------------------------
def linearize(f, rel: torch.Tensor, irrel: torch.Tensor, bias: torch.Tensor, shapley: str = "bias-first"):
    """f(rel + irrel + bias) as three parts (rel, irrel, bias) that add up to it exactly:
    Shapley values of the players rel and irrel, the bias first ("bias-first": the bias
    part is f(bias), as Murdoch et al.) or anywhere ("full": all six orders)."""
    total = f(rel + irrel + bias)
    if shapley == "bias-first":
        fb = f(bias)
        f_r, f_i = f(bias + rel), f(bias + irrel)
        r = 0.5 * (f_r - fb + total - f_i)
        i = 0.5 * (f_i - fb + total - f_r)
        return r, i, total - r - i
    f0 = f(torch.zeros_like(bias)).expand_as(total)
    f_r, f_i, fb = f(rel), f(irrel), f(bias).expand_as(total)
    f_ri, f_rb, f_ib = f(rel + irrel), f(rel + bias), f(irrel + bias)
    r = (f_r - f0 + total - f_ib) / 3 + (f_ri - f_i + f_rb - fb) / 6
    i = (f_i - f0 + total - f_rb) / 3 + (f_ri - f_r + f_ib - fb) / 6
    return r, i, total - r - i


def split_tanh(rel: torch.Tensor, irrel: torch.Tensor):
    """tanh(rel + irrel) = L(rel) + L(irrel), the two-term Shapley rule (tanh(0) = 0)."""
    total = torch.tanh(rel + irrel)
    r = 0.5 * (torch.tanh(rel) + total - torch.tanh(irrel))
    return r, total - r


def product(gate, source, rel_terms: frozenset):
    """gate (g_r, g_i, g_b) * source (s_r, s_i[, s_b]) -> (rel, irrel, bias*bias or None):
    g_r s_r in rel; g_i s_i, g_i s_b, g_b s_i in irrel; the rest where rel_terms says."""
    g_r, g_i, g_b = gate
    s_r, s_i = source[0], source[1]
    s_b = source[2] if len(source) > 2 else None
    rel, irrel = g_r * s_r, g_i * s_i + g_b * s_i
    optional = {"bias*rel": g_b * s_r, "rel*irrel": g_r * s_i, "irrel*rel": g_i * s_r}
    if s_b is not None:
        optional["rel*bias"] = g_r * s_b
        irrel = irrel + g_i * s_b
    for name, value in optional.items():
        if name in rel_terms:
            rel = rel + value
        else:
            irrel = irrel + value
    return rel, irrel, (g_b * s_b if s_b is not None else None)


def _bias_bias(rel, irrel, bb, here, rule: str):
    """Adds the bias*bias product bb to rel or irrel; here [R,1]: the position is relevant."""
    if rule == "rel":
        return rel + bb, irrel
    if rule == "irrel":
        return rel, irrel + bb
    zero = torch.zeros_like(bb)
    return rel + torch.where(here, bb, zero), irrel + torch.where(here, zero, bb)


# --- one step of each cell, on [R, ...] rows ------------------------------------------------
def _lstm_step(xr, xi, state, W, b, here, rules: CDRules):
    h_r, h_i, c_r, c_i = state
    rec = torch.cat([h_r, h_i]) @ W.T                                 # [2R, 4H]
    R = h_r.shape[0]
    pr, pi = (xr + rec[:R]).chunk(4, -1), (xi + rec[R:]).chunk(4, -1)
    bs = b.chunk(4)
    acts = (torch.sigmoid, torch.sigmoid, torch.tanh, torch.sigmoid)
    i, f, g, o = (linearize(act, pr[k], pi[k], bs[k], rules.shapley) for k, act in enumerate(acts))
    terms = rules.rel_terms
    ig_r, ig_i, bb = product(i, g, terms)
    fc_r, fc_i, _ = product(f, (c_r, c_i), terms)
    c_r, c_i = _bias_bias(ig_r + fc_r, ig_i + fc_i, bb, here, rules.bias_bias)
    t_r, t_i = split_tanh(c_r, c_i)
    if rules.decompose_o:
        h_r, h_i, _ = product(o, (t_r, t_i), terms)
    else:
        whole = o[0] + o[1] + o[2]
        h_r, h_i = whole * t_r, whole * t_i
    return h_r, h_i, c_r, c_i


def _gru_step(xr, xi, state, W, b, here, rules: CDRules):
    h_r, h_i = state
    b_ir, b_iz, b_in, b_hr, b_hz, b_hn = b
    R = h_r.shape[0]
    rec = torch.cat([h_r, h_i]) @ W.T                                 # [2R, 3H]
    ar, az, an = rec[:R].chunk(3, -1)
    air, aiz, ain = rec[R:].chunk(3, -1)
    xr_r, xr_z, xr_n = xr.chunk(3, -1)
    xi_r, xi_z, xi_n = xi.chunk(3, -1)
    terms, sh = rules.rel_terms, rules.shapley
    r = linearize(torch.sigmoid, xr_r + ar, xi_r + air, b_ir + b_hr, sh)
    z = linearize(torch.sigmoid, xr_z + az, xi_z + aiz, b_iz + b_hz, sh)
    ru_r, ru_i, ru_b = product(r, (an, ain, b_hn.expand_as(an)), terms)
    n = linearize(torch.tanh, xr_n + ru_r, xi_n + ru_i, b_in + ru_b, sh)
    keep = (-z[0], -z[1], 1 - z[2])
    n_r, n_i, bb = product(keep, n, terms)
    zh_r, zh_i, _ = product(z, (h_r, h_i), terms)
    return _bias_bias(n_r + zh_r, n_i + zh_i, bb, here, rules.bias_bias)


def _scan(step, x, weight_ih, weight_hh, bias, rel_mask, mask, state, rules, rows, keep):
    """Runs `step` over time on R rows: row k reads sentence rows[k] of x[B,T,E]; or, for a
    layer above another, x = (rel, irrel) [R,T,E], the parts of the layer below (rows and
    mask already per row)."""
    if keep not in ("all", "final", "mean"):
        raise RnnlensError(f"keep must be one of all, final, mean, not {keep!r}")
    R, T = rel_mask.shape
    parts = isinstance(x, tuple)
    like = x[0] if parts else x
    rows = torch.arange(R, device=like.device) if rows is None or parts else rows.to(like.device)
    if parts:
        proj_r, proj_i = (v @ weight_ih.T for v in x)               # [R,T,G*H] each, no bias
    else:
        proj = x @ weight_ih.T                                       # [B,T,G*H], no bias
    rel_mask = rel_mask.to(like.device).bool()
    real = (torch.ones(R, T, dtype=torch.bool, device=like.device) if mask is None
            else mask.to(like.device).bool()[rows])
    outs, total = [], None
    for t in range(T):
        here = rel_mask[:, t, None]
        if parts:
            xr, xi = proj_r[:, t], proj_i[:, t]
        else:
            p = proj[rows, t]
            zero = torch.zeros_like(p)
            xr, xi = torch.where(here, p, zero), torch.where(here, zero, p)
        new = step(xr, xi, state, weight_hh, bias, here, rules)
        state = tuple(torch.where(real[:, t, None], n, s) for n, s in zip(new, state))
        if keep == "all":
            outs.append(state)
        elif keep == "mean":
            m = real[:, t, None].to(like.dtype)
            total = [s * m for s in state] if total is None else [a + s * m for a, s in zip(total, state)]
    if keep == "all":
        return tuple(torch.stack(s, 1) for s in zip(*outs)) if outs else tuple(s[:, None][:, :0] for s in state)
    if keep == "mean":
        n = real.sum(1, keepdim=True).clamp(min=1).to(like.dtype)
        return tuple(a / n for a in total) if total is not None else state
    return state


def _start(h, R, H, like, rows, init):
    h = like.new_zeros(R, H) if h is None else h.to(like)[rows] if rows is not None else h.to(like)
    zero = torch.zeros_like(h)
    return (h, zero) if init == "rel" else (zero, h)


def cd_lstm(x, weight_ih, weight_hh, bias_ih, bias_hh, rel_mask, mask=None, h0=None, c0=None,
            rules: CDRules | None = None, rows=None, keep: str = "all") -> CDStates:
    """CD of an LSTM in torch's layout (gates i, f, g, o) over x[B,T,E].

    x may also be (rel, irrel) [R,T,E], the parts of a layer below (then mask is [R,T] and
    rows None). rel_mask [R,T] bool: the phrase of each row; mask [B,T] bool: real tokens (None: all);
    h0, c0 [B,H] start state (None: zeros); rows [R] long: the sentence of x each row reads
    (None: row k reads x[k], R = B), so many phrases of one sentence run in one pass;
    keep: "all" ([R,T,H] per step), "final" or "mean" ([R,H]). Returns CDStates whose parts
    add up to the LSTM's h and c."""
    rules = rules or CDRules()
    H = weight_hh.shape[1]
    R = rel_mask.shape[0]
    like = x[0] if isinstance(x, tuple) else x
    bias = (bias_ih + bias_hh).to(like)
    hr, hi = _start(h0, R, H, like, rows, rules.init)
    cr, ci = _start(c0, R, H, like, rows, rules.init)
    out = _scan(_lstm_step, x, weight_ih.to(like), weight_hh.to(like), bias, rel_mask, mask,
                (hr, hi, cr, ci), rules, rows, keep)
    return CDStates(*out)


def cd_gru(x, weight_ih, weight_hh, bias_ih, bias_hh, rel_mask, mask=None, h0=None,
           rules: CDRules | None = None, rows=None, keep: str = "all") -> CDStates:
    """CD of a GRU in torch's layout (gates r, z, n) over x[B,T,E]; arguments as `cd_lstm`.
    Returns CDStates whose parts add up to the GRU's h."""
    rules = rules or CDRules()
    H = weight_hh.shape[1]
    like = x[0] if isinstance(x, tuple) else x
    bias = tuple(bias_ih.to(like).chunk(3)) + tuple(bias_hh.to(like).chunk(3))
    start = _start(h0, rel_mask.shape[0], H, like, rows, rules.init)
    out = _scan(_gru_step, x, weight_ih.to(like), weight_hh.to(like), bias, rel_mask, mask, start, rules, rows,
                keep)
    return CDStates(*out)
