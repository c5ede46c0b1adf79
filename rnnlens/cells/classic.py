"""Elman, GRU and LSTM cells with biases, in torch's parameter layout, and their
first-order linear views (implicit-ngrams paper, Table 2 and Appendix F, with biases).

Parameters are stored exactly as torch.nn.RNN/GRU/LSTM store them (weight_ih [G*H, E],
weight_hh [G*H, H], bias_ih, bias_hh; gate order r,z,n for GRU and i,f,g,o for LSTM), so
`from_torch` is a copy and outputs agree with torch's fused kernels.

Under torch.autocast (bfloat16, float16) the state stays float32 (ops/precision.py): the
Python loop runs its matrix products in the autocast dtype and forms gates and state from
them in float32; torch's fused kernels run in float32 with autocast off, because under
autocast they would carry the state in the lower precision (on the CPU the LSTM's cell
state: at 1.0 it no longer takes increments of 1e-3).
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from ..errors import RnnlensError
from ..ops.affine import lstm_adjoints, lstm_scan
from ..ops import gated_loops
from ..ops.fused_rnn import rnn_by_length
from ..ops.linear import linear
from ..ops.precision import autocast_dtype, full_precision, no_autocast
from .base import Cell, LinearView, StructuredView, hold_at_pads
from .gru_terms import gru_view_terms
from .local import previous_states, with_true_inputs
from .lstm_terms import lstm_view_terms


# Right-padded rows longer than this run as segments between their distinct lengths, each
# through the unpacked fused kernel (ops.fused_rnn.rnn_by_length), not as one packed
# sequence: ATen's packed RNN slices its input at every step, and each slice's backward fills
# a tensor of the whole input, so a packed backward costs O(T^2) (benchmarks/RESULTS-padded.md:
# 3.5-9.5x the unmasked pass at T = 300 and 10-87x at T = 1000, where by length takes
# 1.06-1.22x and 1.02-1.03x). Under about 32 steps with many distinct lengths, packing's one
# call is a little faster than one call per length.
PACKED_MAX_LENGTH = 32


class _Classic(Cell):
    settings = frozenset({"spectral_norm", "recurrent_dropout"})
    gates = 1
    # False for a cell copied by `from_torch` from a time-major module (torch's default):
    # then x, mask and the outputs are [T,B,...] as that module takes and gives them, and
    # the linear view (an analysis object) is batch-major [B,T,S] as always.
    batch_first = True

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        # Variational recurrent dropout (Gal & Ghahramani): in training, one mask per
        # sequence on h_{t-1} where it enters W_hh. Off in eval, so analysis is unaffected.
        self.recurrent_dropout = 0.0
        G = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(G, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(G))
        self.bias_hh = nn.Parameter(torch.empty(G))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torch's default: U(-1/sqrt(H), 1/sqrt(H)) for every parameter.
        k = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -k, k)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """All input projections in one matrix product: [B,T,E] -> [B,T,G*H]."""
        return linear(x, self.weight_ih, self.bias_ih)

    def _scan(self, x, mask, s):
        # under autocast the products are bfloat16/float16; gates and state are float32
        s = full_precision(s)
        P = full_precision(self._project(x))
        Wt = self.weight_hh.T
        # Under autocast b_hh is added in float32 after the product: inside addmm autocast
        # would cast it once (it caches a leaf's cast) and sum its T per-step gradients in
        # bfloat16, up to 13% off over 512 steps. (W_hh.T is a view: cast, and its gradient
        # taken back to float32, at every step.)
        autocast = autocast_dtype(x.device.type) is not None
        drop = None
        if self.training and self.recurrent_dropout > 0:
            keep = 1.0 - self.recurrent_dropout
            drop = torch.bernoulli(x.new_full((x.shape[0], self.hidden_size), keep)) / keep
        outs = []
        steps = P.unbind(1)         # not P[:, t]: T selects' backward is T zero-filled [B,T,G*H]
        for t in range(x.shape[1]):
            r = self._recurrent_input(s)
            if drop is not None:
                r = r * drop
            if autocast:
                p_h = full_precision(torch.mm(r, Wt)) + self.bias_hh
            else:
                p_h = torch.addmm(self.bias_hh, r, Wt)
            new = self._update(steps[t], p_h, s)
            s = new if mask is None else torch.where(mask[:, t, None], new, s)
            outs.append(s)
        return torch.stack(outs, 1), s

    def _recurrent_input(self, s):
        return s

    # --- torch's fused kernels ----------------------------------------------------------
    # forward runs torch's own RNN kernels (oneDNN or ATen's loop on the CPU, cuDNN on a
    # GPU) on the cell's parameters, which are in torch's layout; `scan` (every step's full
    # state, the LSTM's c included) and `forward_ref` stay the Python references. Recurrent
    # dropout (a mask on h_{t-1} that torch's kernels cannot apply) and masks that are not
    # right padding take the reference path.
    fused = True

    def _fused_kernel(self):
        raise NotImplementedError

    def _cudnn_mode(self) -> str:
        raise NotImplementedError

    def _flatten_for_cudnn(self, weights) -> None:
        """Lay the four weights out in one block of GPU memory as cuDNN reads them (what
        torch.nn.LSTM's flatten_parameters does; the Parameters stay the same objects, now
        views of that block): otherwise cuDNN copies them into such a block at every call,
        and their gradients back out of one. Done again whenever the weights have moved
        (`.cuda()`, `.to()`, a load), checked by their addresses."""
        ptrs = tuple(w.data_ptr() for w in weights)
        if getattr(self, "_cudnn_flat", None) == ptrs:
            return
        first = weights[0]
        if len(set(ptrs)) != len(ptrs) or not all(       # a parametrised weight (spectral norm) is
                isinstance(w, nn.Parameter) and w.is_cuda and w.dtype == first.dtype  # computed anew
                and w.device == first.device for w in weights):                       # at each call
            return
        import torch.backends.cudnn.rnn as cudnn_rnn

        with torch.no_grad(), torch.cuda.device_of(first):
            torch._cudnn_rnn_flatten_weight(weights, 4, self.input_size, cudnn_rnn.get_cudnn_mode(self._cudnn_mode()),
                                            self.hidden_size, 0, 1, True, False)
        self._cudnn_flat = tuple(w.data_ptr() for w in weights)

    def forward(self, x, mask=None, state=None):
        if not self.batch_first:
            out, final = self._batch_major_forward(*self._to_batch_major(x, mask), state)
            return out.transpose(0, 1), final
        return self._batch_major_forward(x, mask, state)

    def _can_fuse(self, x, mask) -> bool:
        """Whether the fused kernel takes x[B,T,E] and mask (batch-major): no recurrent
        dropout in training, and a mask that is None or right padding without empty rows
        (packing refuses them)."""
        if not self.fused or (self.training and self.recurrent_dropout > 0) or x.dim() != 3 or x.shape[1] == 0:
            return False
        if mask is None:
            return True
        lengths = mask.sum(1, keepdim=True)
        return bool((lengths > 0).all() and (mask == (torch.arange(mask.shape[1], device=mask.device) < lengths)).all())

    def _gated_loop(self, x, mask):
        """The C++ loop of ops.gated_loops this cell runs on x (a CPU input it takes), or None."""
        return None

    def _batch_major_forward(self, x, mask, s):
        """x[B,T,E], mask[B,T] batch-major -> (out[B,T,H], final[B,S]): rnnlens's C++ loop where
        the cell runs one (`_gated_loop`: the GRU and the LSTM on the CPU, recurrent dropout and
        any mask included), else the fused kernel where it applies (`_can_fuse`), else the
        Python loop."""
        from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

        if (self.fused and x.dim() == 3 and x.shape[1] > 0 and x.shape[-1] == self.input_size
                and gated_loops.available(x)):
            loop = self._gated_loop(x, mask)
            if loop is not None:
                P = self._project(x)
                drop = None                  # drawn as the Python loop (_scan) draws it
                if self.training and self.recurrent_dropout > 0:
                    keep = 1.0 - self.recurrent_dropout
                    drop = torch.bernoulli(x.new_full((x.shape[0], self.hidden_size), keep)) / keep
                return loop(P, self.weight_hh, self.bias_hh, s, mask, drop)
        if not self._can_fuse(x, mask):
            states, final = Cell.scan(self, x, mask, s)
            return self.output(states), final
        if x.shape[-1] != self.input_size:
            raise ValueError(f"expected x of shape [B, T, {self.input_size}], got {tuple(x.shape)}")
        B, T, _ = x.shape
        H = self.hidden_size
        # autocast: the kernel in float32 with autocast off (it would keep its state in bf16)
        autocast = autocast_dtype(x.device.type) is not None
        if autocast:
            x, s = full_precision(x), full_precision(s)
        lstm = self.state_size == 2 * H
        if s is None:               # the zero start: one block of zeros for h (and c), no slicing
            zero = x.new_zeros(1, B, H)
            hx = (zero, zero) if lstm else zero
        else:
            hx = (s[None, :, H:].contiguous(), s[None, :, :H].contiguous()) if lstm else s[None].contiguous()
        weights = [self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh]
        kernel = self._fused_kernel()
        lengths = None if mask is None else mask.sum(1).cpu()
        if lengths is not None and bool((lengths == T).all()):
            lengths = None         # nothing to pack
        # cuDNN's backward refuses eval mode (captum attributes through eval-mode models):
        # there ATen's own CUDA loop runs instead
        no_cudnn = x.is_cuda and not self.training and torch.is_grad_enabled()
        if x.is_cuda and not no_cudnn and torch.backends.cudnn.is_acceptable(x):
            self._flatten_for_cudnn(weights)
        with torch.backends.cudnn.flags(enabled=False) if no_cudnn else contextlib.nullcontext(), \
                no_autocast(x.device.type) if autocast else contextlib.nullcontext():
            if lengths is None:
                res = kernel(x, hx, weights, True, 1, 0.0, self.training, False, True)
                out = res[0]
            elif T > PACKED_MAX_LENGTH:
                out, res = rnn_by_length(kernel, x, hx, weights, lengths, self.training, lstm)
                out = hold_at_pads(out, mask)
            else:
                packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
                order, back = packed.sorted_indices, packed.unsorted_indices
                hx = tuple(h.index_select(1, order) for h in hx) if lstm else hx.index_select(1, order)
                res = kernel(packed.data, packed.batch_sizes, hx, weights, True, 1, 0.0, self.training, False)
                out, _ = pad_packed_sequence(PackedSequence(res[0], packed.batch_sizes, order, back),
                                             batch_first=True, total_length=T)
                out = hold_at_pads(out, mask)
                res = (res[0], *(r.index_select(1, back) for r in res[1:]))
        final = torch.cat([res[2][0], res[1][0]], -1) if lstm else res[1][0]
        return out, final

    @staticmethod
    def _to_batch_major(x, mask):
        return x.transpose(0, 1), None if mask is None else mask.transpose(0, 1)

    def scan(self, x, mask=None, state=None):
        """The states [B,T,S], batch-major whatever the cell's layout (a time-major cell takes
        x [T,B,E] and mask [T,B]), as its views are, so `remainder(cell.linear_view(x),
        cell.scan(x)[0])` pairs them in either layout."""
        if self.batch_first:
            return super().scan(x, mask, state)
        return super().scan(*self._to_batch_major(x, mask), state)

    def forward_ref(self, x, mask=None, state=None):
        if self.batch_first:
            return super().forward_ref(x, mask, state)
        out, final = super().forward_ref(*self._to_batch_major(x, mask), state)
        return out.transpose(0, 1), final

    def linear_view(self, x, mask=None, state=None) -> LinearView:
        """The first-order view (see each cell's `_linear_view`), batch-major [B,T,S] whatever
        the cell's layout, unrolled from `state` [B,S] (None: zero)."""
        if not self.batch_first:
            x, mask = self._to_batch_major(x, mask)
        return self._linear_view(x, mask).starting_from(state)

    def local_view(self, x, mask=None, state=None) -> LinearView:
        """The exact view (cells/local.py), batch-major [B,T,S] whatever the cell's layout:
        the first-order view's structured form with its coefficients taken at the true
        pre-activations (W_hh h_{t-1} included), A_t = d s_t / d s_{t-1} at the true s_{t-1},
        and g_t = s_t - A_t s_{t-1}, from one pass of the cell from `state` (None: zero). Its
        n-gram vectors depend on the trajectory (their context), not only on their tokens."""
        if not self.batch_first:
            x, mask = self._to_batch_major(x, mask)
        s0 = full_precision(state if state is not None else self.initial_state(x.shape[0], x.dtype, x.device))
        states, _ = Cell.scan(self, x, mask, s0)
        prev = previous_states(states, s0)
        P = full_precision(self._project(x))
        Ph = prev[..., self.state_size - self.hidden_size:] @ self.weight_hh.T + self.bias_hh
        return with_true_inputs(self._local_view(P, Ph, prev, mask), states, prev).starting_from(state)


class Elman(_Classic):
    """h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), act = tanh (or relu)."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh"):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError("nonlinearity must be 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size)
        self.state_size = hidden_size

    def _act(self, p):
        return torch.tanh(p) if self.nonlinearity == "tanh" else torch.relu(p)

    def _fused_kernel(self):
        return torch._VF.rnn_tanh if self.nonlinearity == "tanh" else torch._VF.rnn_relu

    def _cudnn_mode(self) -> str:
        return "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"

    def step(self, x_t, h):
        return self._act(x_t @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh)

    def _update(self, p_x, p_h, s):
        return self._act(p_x + p_h)

    def _linear_view(self, x, mask=None) -> LinearView:
        """g = act(p), A = diag(act'(p)) W_hh with p = W_ih x + b_ih + b_hh."""
        p = full_precision(self._project(x)) + self.bias_hh
        g = self._act(p)
        d = 1 - g * g if self.nonlinearity == "tanh" else (p > 0).to(p.dtype)
        return StructuredView(g, mask, self.weight_hh, d)

    def _local_view(self, P, Ph, prev, mask) -> LinearView:
        """A_t = diag(act'(p_t)) W_hh at the true p_t = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh
        (g is set by local_view)."""
        p = P + Ph
        h = self._act(p)
        d = 1 - h * h if self.nonlinearity == "tanh" else (p > 0).to(p.dtype)
        return StructuredView(torch.zeros_like(prev), mask, self.weight_hh, d, exact=True)


class GRU(_Classic):
    """torch's GRU: r = s(xr + W_hr h + b_hr), z = s(xz + W_hz h + b_hz),
    n = tanh(xn + r * (W_hn h + b_hn)), h' = (1 - z) n + z h  (x* include b_i*)."""

    gates = 3

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.state_size = hidden_size

    def step(self, x_t, h):
        W_ir, W_iz, W_in = self.weight_ih.chunk(3)
        W_hr, W_hz, W_hn = self.weight_hh.chunk(3)
        b_ir, b_iz, b_in = self.bias_ih.chunk(3)
        b_hr, b_hz, b_hn = self.bias_hh.chunk(3)
        r = torch.sigmoid(x_t @ W_ir.T + b_ir + h @ W_hr.T + b_hr)
        z = torch.sigmoid(x_t @ W_iz.T + b_iz + h @ W_hz.T + b_hz)
        n = torch.tanh(x_t @ W_in.T + b_in + r * (h @ W_hn.T + b_hn))
        return (1 - z) * n + z * h

    def _fused_kernel(self):
        return torch._VF.gru

    def _gated_loop(self, x, mask):
        """On the CPU always (rnnlens's loop is faster than torch's GRU there)."""
        return gated_loops.gru_loop

    def _cudnn_mode(self) -> str:
        return "GRU"

    def _update(self, p_x, p_h, h):
        xr, xz, xn = p_x.chunk(3, -1)
        hr, hz, hn = p_h.chunk(3, -1)
        r = torch.sigmoid(xr + hr)
        z = torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return n + z * (h - n)

    def _linear_view(self, x, mask=None) -> LinearView:
        """First order at h = 0, biases included (Table 2 of the implicit-ngrams paper
        gains a W_hr term through b_hn):
          g = (1 - z0) n0
          A = diag(a_r) W_hr + diag(a_z) W_hz + diag(a_n) W_hn + diag(z0)
          a_n = (1 - z0)(1 - n0^2) r0,  a_r = (1 - z0)(1 - n0^2) b_hn r0 (1 - r0),
          a_z = -n0 z0 (1 - z0)."""
        P = full_precision(self._project(x))
        g, coef, z0 = gru_view_terms(P, self.bias_hh.to(P.dtype))      # cells/gru_terms.py
        return StructuredView(g, mask, self.weight_hh, coef, diag=z0)

    def _local_view(self, P, Ph, prev, mask) -> LinearView:
        """The first-order form at the true gates r, z, n and hn = W_hn h_{t-1} + b_hn:
          A = diag(a_r) W_hr + diag(a_z) W_hz + diag(a_n) W_hn + diag(z),
          a_r = (1 - z)(1 - n^2) hn r (1 - r),  a_z = (h_{t-1} - n) z (1 - z),
          a_n = (1 - z)(1 - n^2) r  (g is set by local_view)."""
        xr, xz, xn = P.chunk(3, -1)
        hr, hz, hn = Ph.chunk(3, -1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        dn = (1 - z) * (1 - n * n)
        coef = torch.cat([dn * hn * r * (1 - r), (prev - n) * z * (1 - z), dn * r], -1)
        return StructuredView(torch.zeros_like(prev), mask, self.weight_hh, coef, diag=z, exact=True)


class LSTM(_Classic):
    """torch's LSTM on the extended state s = [c; h] (size 2H):
    i, f, g, o = s(.), s(.), tanh(.), s(.) of W_ih x + b_ih + W_hh h + b_hh,
    c' = f c + i g, h' = o tanh(c')."""

    gates = 4

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.state_size = 2 * hidden_size

    def _recurrent_input(self, s):
        return s[:, self.hidden_size:]

    def _fused_kernel(self):
        return torch._VF.lstm

    def _gated_loop(self, x, mask):
        """Only where torch's kernel (oneDNN on the CPU, faster) cannot go: recurrent dropout in
        training, and masks that are not right padding."""
        return None if self._can_fuse(x, mask) else gated_loops.lstm_loop

    def _cudnn_mode(self) -> str:
        return "LSTM"

    def step(self, x_t, s):
        c, h = s.split(self.hidden_size, -1)
        z = x_t @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh
        i, f, g, o = z.chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return torch.cat([c, h], -1)

    def _update(self, p_x, p_h, s):
        i, f, g, o = (p_x + p_h).chunk(4, -1)
        c = torch.sigmoid(f) * s[:, : self.hidden_size] + torch.sigmoid(i) * torch.tanh(g)
        return torch.cat([c, torch.sigmoid(o) * torch.tanh(c)], -1)

    def _linear_view(self, x, mask=None) -> LinearView:
        """First order at (c, h) = 0 (implicit-ngrams Appendix F, with biases): the terms of
        `lstm_view_terms` from z = W_ih x + b_ih + b_hh."""
        g, f0, a_i, a_g, a_o, k = lstm_view_terms(linear(x, self.weight_ih, self.bias_ih + self.bias_hh))
        return LSTMView(g=g, mask=mask, W=self.weight_hh, f=f0, a_i=a_i, a_g=a_g, a_o=a_o, k=k,
                        readout=slice(self.hidden_size, None))

    def _local_view(self, P, Ph, prev, mask) -> LinearView:
        """The block form of LSTMView at the true gates and c_{t-1}, with the W_hf term that
        the first-order view drops (it multiplies c_{t-1}): a_f = c_{t-1} f (1 - f), and
        a_i, a_g, a_o, k as in lstm_view_terms with c = f c_{t-1} + i g (g is set by local_view)."""
        zi, zf, zg, zo = (P + Ph).chunk(4, -1)
        i, f, o, gg = torch.sigmoid(zi), torch.sigmoid(zf), torch.sigmoid(zo), torch.tanh(zg)
        c_prev = prev[..., : self.hidden_size]
        tc = torch.tanh(f * c_prev + i * gg)
        return LSTMView(g=torch.zeros_like(prev), mask=mask, W=self.weight_hh, f=f, a_i=gg * i * (1 - i),
                        a_g=i * (1 - gg * gg), a_o=tc * o * (1 - o), k=o * (1 - tc * tc),
                        readout=slice(self.hidden_size, None), a_f=c_prev * f * (1 - f), exact=True)


class LSTMView(LinearView):
    """A(x) = [[B, D], [E, F]] on [c; h] with
      B = diag(f0),  D = diag(a_i) W_hi + diag(a_g) W_hg,
      E = diag(k) B,  F = diag(k) D + diag(a_o) W_ho,
    so A [vc; vh] = [u, k*u + a_o*(W_ho vh)] with u = f0*vc + D vh. W_hf drops out
    because it multiplies c = 0."""

    def __init__(self, g, mask, W, f, a_i, a_g, a_o, k, readout, a_f=None, exact=False):
        super().__init__(g, mask, readout, exact=exact)
        self.W, self.f, self.a_i, self.a_g, self.a_o, self.k = W, f, a_i, a_g, a_o, k
        self.a_f = a_f          # a W_hf term in D: zero in the first-order view, used by variants
        self.H = W.shape[1]
        self._w3 = self._rgates = None

    @property
    def w3(self) -> torch.Tensor:
        """[3H, H]: W_hi, W_hg, W_ho stacked, the blocks that act when a_f is None (W_hf
        multiplies only c = 0); built once per view, and again if it was built without
        autograd and is now needed with it (gradients must reach W)."""
        stale = self._w3 is not None and torch.is_grad_enabled() and self.W.requires_grad \
            and not self._w3.requires_grad
        if self._w3 is None or stale:
            H = self.H
            self._w3 = torch.cat([self.W[:H], self.W[2 * H:]])
        return self._w3

    @property
    def rgates(self) -> torch.Tensor:
        """[B,T,3H]: a_i, a_g, a_o side by side, the coefficients of `_rapply`'s product when
        a_f is None; built once per view, and again if built without autograd and now needed
        with it."""
        parts = (self.a_i, self.a_g, self.a_o)
        stale = self._rgates is not None and torch.is_grad_enabled() and self._rgates.grad_fn is None \
            and any(p.requires_grad for p in parts)
        if self._rgates is None or stale:
            self._rgates = torch.cat(parts, -1)
        return self._rgates

    # prefers_dense stays False: the block form costs as much per vector as the dense
    # [2H,2H] matrix, so building it gains nothing

    def fused_scan(self):
        # without a_f, W_hf multiplies nothing: a [B,H] x [H,3H] product per step, not 4H
        W = self.w3 if self.a_f is None else self.W
        return lstm_scan, (self.g, W, self.f, self.a_i, self.a_g, self.a_o, self.k, self.a_f)

    def reverse_rows(self, t, R):
        """In one fused reverse scan (ops.affine.lstm_adjoints: the C++ backward pass on the
        CPU) where no gradient is wanted through it. A subclass that changes `_rapply` must
        override this too."""
        W = self.w3 if self.a_f is None else self.W
        return self._adjoint_rows(t, R, lstm_adjoints, W, self.f, self.a_i, self.a_g, self.a_o, self.k, self.a_f)

    def in_place_apply(self):
        """Without the W_hf term: A(x_t) applied to V[B,K,2H] in place, one [K,H] x [H,3H]
        product, then the block form written into V's halves."""
        if self.a_f is not None:
            return None
        H = self.H
        W3t = self.w3.T.contiguous()

        def apply(t, V):
            vc, vh = V[..., :H], V[..., H:]
            ui, ug, uo = (vh @ W3t).split(H, -1)
            col = lambda a: a[:, t, None]                       # noqa: E731
            vc.mul_(col(self.f)).addcmul_(ui, col(self.a_i)).addcmul_(ug, col(self.a_g))      # u
            vh.copy_(uo).mul_(col(self.a_o)).addcmul_(vc, col(self.k))
        return apply

    def _gates(self, t):
        """f, a_i, a_g, a_o, k, a_f at step t, each [B,1,H] (a_f None when absent)."""
        names = ("f", "a_i", "a_g", "a_o", "k", "a_f")
        return tuple(None if getattr(self, n) is None else self.at(n, t)[:, None] for n in names)

    def _apply(self, t, V):
        vc, vh = V.split(self.H, -1)
        if self.a_f is None:        # W_hf multiplies nothing: 3 of the 4 blocks
            ui, ug, uo = (vh @ self.w3.T).chunk(3, -1)
        else:
            ui, uf, ug, uo = (vh @ self.W.T).chunk(4, -1)
        f, a_i, a_g, a_o, k, a_f = self._gates(t)
        u = f * vc + a_i * ui + a_g * ug
        if a_f is not None:
            u = u + a_f * uf
        return torch.cat([u, k * u + a_o * uo], -1)

    def matrix(self, t: int) -> torch.Tensor:
        """A(x_t) dense [B,2H,2H] from the block form, O(H^2) to build."""
        H = self.H
        Wi, Wf, Wg, Wo = self.W.view(4, H, H)
        col = lambda v: v[:, t, :, None]                                   # noqa: E731
        D = col(self.a_i) * Wi + col(self.a_g) * Wg
        if self.a_f is not None:
            D = D + col(self.a_f) * Wf
        Bm = torch.diag_embed(self.f[:, t])
        A = torch.cat([torch.cat([Bm, D], 2),
                       torch.cat([col(self.k) * Bm, col(self.k) * D + col(self.a_o) * Wo], 2)], 1)
        if self.mask is not None:
            eye = torch.eye(2 * H, dtype=A.dtype, device=A.device)
            A = torch.where(self.mask[:, t, None, None], A, eye)
        return A

    def _rapply(self, t, R):
        rc, rh = R.split(self.H, -1)
        if self.a_f is None:        # 3 blocks: no zero W_hf block in the product; few small ops
            q = torch.addcmul(rc, rh, self.at("k", t)[:, None])
            coef = torch.cat([q, q, rh], -1) * self.at("rgates", t)[:, None]
            return torch.cat([q * self.at("f", t)[:, None], coef @ self.w3], -1)
        f, a_i, a_g, a_o, k, a_f = self._gates(t)
        q = rc + rh * k
        coef = torch.cat([q * a_i, q * a_f, q * a_g, rh * a_o], -1)
        return torch.cat([q * f, coef @ self.W], -1)


CLASSIC = {"elman": Elman, "gru": GRU, "lstm": LSTM}


def from_torch(module: nn.Module, layer: int | None = None, direction: int = 0) -> Cell:
    """An rnnlens cell with the weights of a trained torch.nn.RNN, GRU or LSTM: same outputs
    as the module, in the module's layout (`batch_first` is copied: a time-major module's
    cell takes [T,B,...] and its forward gives [T,B,...]); its states (`scan`) and views
    (`linear_view`, `local_view`) are batch-major [B,T,S] in either layout.

    A cell is one layer in one direction. For a stacked or bidirectional module pass
    `layer` (0 = the first) and `direction` (1 = the reverse one, which reads its input
    right to left: feed it the sequence reversed); the cell of layer k > 0 takes the layer
    below's outputs. To explain a whole stacked or bidirectional model, use
    `rnnlens.analysis.attribution.NGramAttribution(model)`: it decomposes the first layer
    and reads the layers above through their gradients.
    """
    kinds = {nn.RNN: "elman", nn.GRU: "gru", nn.LSTM: "lstm"}
    kind = kinds.get(type(module))
    if kind is None:
        raise RnnlensError(f"from_torch takes torch.nn.RNN, GRU or LSTM, not {type(module).__name__}")
    if getattr(module, "proj_size", 0):
        raise RnnlensError("from_torch does not take an LSTM with proj_size > 0 (its projected state is "
                           "not an rnnlens cell's state)")
    dirs = 2 if module.bidirectional else 1
    if layer is None:
        if module.num_layers != 1 or dirs != 1:
            raise RnnlensError(
                f"from_torch returns one cell, one layer in one direction, and this module has "
                f"num_layers={module.num_layers}, bidirectional={module.bidirectional}: pass layer= and "
                "direction= to take one of them, or explain the whole model with "
                "NGramAttribution(model), which decomposes the first layer and reads the rest through gradients")
        layer = 0
    if not 0 <= layer < module.num_layers:
        raise RnnlensError(f"layer {layer} out of range: the module has {module.num_layers} layer(s)")
    if direction not in range(dirs):
        raise RnnlensError(f"direction {direction} out of range: the module has {dirs} direction(s)")
    suffix = f"_l{layer}" + ("_reverse" if direction else "")
    kwargs = {"nonlinearity": module.nonlinearity} if kind == "elman" else {}
    w = getattr(module, "weight_ih" + suffix)
    cell = CLASSIC[kind](w.shape[1], module.hidden_size, **kwargs)
    cell.batch_first = module.batch_first
    cell.to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        cell.weight_ih.copy_(w)
        cell.weight_hh.copy_(getattr(module, "weight_hh" + suffix))
        if module.bias:
            cell.bias_ih.copy_(getattr(module, "bias_ih" + suffix))
            cell.bias_hh.copy_(getattr(module, "bias_hh" + suffix))
        else:
            cell.bias_ih.zero_()
            cell.bias_hh.zero_()
    cell.train(module.training)
    return cell
