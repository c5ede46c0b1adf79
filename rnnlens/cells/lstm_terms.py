"""The terms of the LSTM's first-order view (cells/classic.py, LSTM.linear_view) from its
pre-activations z = [z_i, z_f, z_g, z_o]: `lstm_view_terms_ref` as the equations read, and
`lstm_view_terms`, equal to it in values and gradients, whose hand-derived backward
(`_LSTMViewTerms`) keeps only the gate activations once inputs are long (LEAN_POSITIONS).
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .gru_terms import native


def lstm_view_terms_ref(z: torch.Tensor):
    """The LSTM view's terms from its pre-activations z = [z_i, z_f, z_g, z_o] [..., 4H], as
    the equations read (autograd differentiates them): i, f, o = s(z_*), g = tanh(z_g),
    c = i g, and
        g_view = [c; o tanh(c)],  f,  a_i = g i (1 - i),  a_g = i (1 - g^2),
        a_o = tanh(c) o (1 - o),  k = o (1 - tanh(c)^2)."""
    zi, zf, zg, zo = z.chunk(4, -1)
    i0, f0, g0, o0 = torch.sigmoid(zi), torch.sigmoid(zf), torch.tanh(zg), torch.sigmoid(zo)
    c0 = i0 * g0
    tc = torch.tanh(c0)
    return (torch.cat([c0, o0 * tc], -1), f0, g0 * i0 * (1 - i0), i0 * (1 - g0 * g0), tc * o0 * (1 - o0),
            o0 * (1 - tc * tc))


class _LSTMViewTerms(torch.autograd.Function):
    """lstm_view_terms_ref with a hand-derived backward that keeps only the four gate
    activations (i, f, g, o, as one [..., 4H] tensor, the size of z): autograd's graph of the
    same expressions keeps about eleven [..., H] tensors (at batch 32 x length 4096 x hidden
    256, 134 MB each)."""

    @staticmethod
    def forward(ctx, z):
        H = z.shape[-1] // 4
        act = torch.sigmoid(z)
        torch.tanh(z[..., 2 * H:3 * H], out=act[..., 2 * H:3 * H])
        i, f, gg, o = act.chunk(4, -1)
        c = i * gg
        tc = torch.tanh(c)
        one_tc2 = torch.mul(tc, tc).neg_().add_(1)
        g = torch.cat([c, o * tc], -1)
        out = (g, f.clone(), gg * i * (1 - i), i * (1 - gg * gg), tc * o * (1 - o), o * one_tc2)
        ctx.save_for_backward(act)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dg, df, dai, dag, dao, dk):
        (act,) = ctx.saved_tensors
        H = act.shape[-1] // 4
        a2 = act.reshape(-1, 4 * H)
        dz = torch.empty_like(a2)
        flat = [None if d is None else d.reshape(-1, d.shape[-1]) for d in (dg, df, dai, dag, dao, dk)]
        # elementwise, so block by block: the temporaries stay the size of a block
        for r in range(0, a2.shape[0], _TERMS_BLOCK_ROWS):
            rows = slice(r, r + _TERMS_BLOCK_ROWS)
            _lstm_terms_backward(a2[rows], dz[rows], *(None if d is None else d[rows] for d in flat))
        return dz.view_as(act)


_TERMS_BLOCK_ROWS = 4096


def _lstm_terms_backward(act, dz, dg, df, dai, dag, dao, dk):
    """dz [N,4H] (written) from the gate activations act = [i, f, g, o] [N,4H] and the terms'
    gradients (None: no gradient). In place wherever a buffer can be reused: each fresh [N,H]
    buffer costs more than the arithmetic on it."""
    i, f, gg, o = act.chunk(4, -1)
    dzi, dzf, dzg, dzo = dz.chunk(4, -1)
    H = i.shape[-1]
    # the f block stands alone: dz_f = df f (1 - f)
    if df is None:
        dzf.zero_()
    else:
        torch.mul(df, f, out=dzf).mul_(1 - f)
    tc = torch.tanh(i * gg)
    one_tc2 = torch.mul(tc, tc).neg_().add_(1)                       # 1 - tanh(c)^2
    so = o * (1 - o)                                                  # s'(z_o)
    # through g_view's h part o tanh(c), a_o = tanh(c) o (1 - o) and k = o (1 - tanh(c)^2)
    do = torch.zeros_like(o)
    dtc = torch.zeros_like(o)
    if dg is not None:
        dh_view = dg[:, H:]
        do.addcmul_(dh_view, tc)
        dtc.addcmul_(dh_view, o)
    if dao is not None:
        do.addcmul_(dao, o.mul(-2).add_(1).mul_(tc))                 # tanh(c) (1 - 2 o)
        dtc.addcmul_(dao, so)
    if dk is not None:
        do.addcmul_(dk, one_tc2)
        dtc.addcmul_(dk, o.mul(tc), value=-2)
    torch.mul(do, so, out=dzo)
    dc = dtc.mul_(one_tc2)                                            # dtc's buffer from here on
    if dg is not None:
        dc.add_(dg[:, :H])
    # through c = i g, a_i = g i (1 - i) and a_g = i (1 - g^2)
    si = i * (1 - i)                                                  # s'(z_i)
    di = torch.mul(dc, gg)
    dgg = torch.mul(dc, i)
    if dai is not None:
        di.addcmul_(dai, i.mul(-2).add_(1).mul_(gg))                 # g (1 - 2 i)
        dgg.addcmul_(dai, si)
    one_g2 = torch.mul(gg, gg).neg_().add_(1)                         # 1 - g^2
    if dag is not None:
        di.addcmul_(dag, one_g2)
        dgg.addcmul_(dag, i * gg, value=-2)
    torch.mul(di, si, out=dzi)
    torch.mul(dgg, one_g2, out=dzg)


class _LSTMViewTermsNative(torch.autograd.Function):
    """lstm_view_terms_ref in one fused C++ pass each way (rnnlens/ops/csrc/view_terms.cpp),
    keeping only z for the backward."""

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return tuple(torch.ops.rnnlens_view_terms.lstm_forward(z))

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        (z,) = ctx.saved_tensors
        empty = z.new_empty(0)
        return torch.ops.rnnlens_view_terms.lstm_backward(z, *(empty if d is None else d for d in grads))


def lstm_view_terms(z: torch.Tensor):
    """(g_view [..., 2H], f, a_i, a_g, a_o, k) of the LSTM's first-order view from its
    pre-activations z [..., 4H] (see lstm_view_terms_ref, which it equals, values and
    gradients). On the CPU in float32/float64 with the C++ kernels compiled, one fused pass
    each way (`_LSTMViewTermsNative`, keeping only z). Otherwise, under autograd, inputs of at
    least LEAN_POSITIONS positions go through the hand-derived backward that keeps only the
    gate activations (memory: 4 [..., H] tensors instead of about 11); shorter ones through
    autograd's graph, which is faster (4.0 against 6.1 ms forward + backward at 32 x 35 x 1024
    here)."""
    if native(z):
        return _LSTMViewTermsNative.apply(z)
    if torch.is_grad_enabled() and z.requires_grad and z.numel() // max(z.shape[-1], 1) >= LEAN_POSITIONS:
        return _LSTMViewTerms.apply(z)
    return lstm_view_terms_ref(z)


# positions (the product of z's leading sizes) from which lstm_view_terms keeps the lean
# backward: at batch 32, sequences of 1,024 steps and more
LEAN_POSITIONS = 32768
