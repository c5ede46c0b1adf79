// The rational cells' recurrences (rnnlens/cells/rational.py) as one pass over time on the CPU,
// forward and backward, for the real and max-plus semirings. See rnnlens/ops/rational_fused.py
// for the contract; the Python scan in rnnlens/cells/rational.py is the reference.
//
// Layout. P [B,T,R*H] is the input projection, rows (u_0, f_0, u_1, f_1, ..., [o]) of H each;
// f [B,T,n,H] the forget gates already activated (max-plus: logsigmoid; real: sigmoid, or an
// empty tensor, and the kernel takes the sigmoid of P's f rows itself, step by step, forward and
// again backward, so no [B,T,n,H] gate tensor is written, saved or read back);
// c0 [B,n,H] the start of the n scanned blocks; Sck [B,ceil(T/K),n,H] the state before every
// K-th step (the backward recomputes the states between two of them, K steps at a time, so no
// [B,T,n,H] state tensor is written or kept); Rd [B,T,H] the read-out (the last block, or
// p1*c_0 + p2*c_1 for RRNN(F)). At a pad (mask false) every block keeps its state and its
// gates get no gradient.
//
//   real      u_j = pu_j - f_j*pu_j,  e_0 = u_0,  e_j = c_{j-1,t-1} * u_j  ((c_0 + r) * u_1 in F)
//             c_j = e_j + f_j * c_{j,t-1}
//   max-plus  u_j = pu_j,  e_0 = u_0,  e_j = c_{j-1,t-1} + u_j
//             c_j = max(f_j + c_{j,t-1}, e_j), a tie going to the carried branch
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "vecmath.h"

// `#pragma GCC ivdep` on a loop over H whose rows never overlap: GCC does not take restrict on
// block-scope pointers, and without it such a loop versions itself for aliasing past its limit of
// run-time checks and stays scalar (view_terms.cpp measures what that cost).

namespace {

using rnnlens_vec::sigmoid_of;
using rnnlens_vec::tanh_of;

template <typename scalar_t>
struct Ptrs {
  const scalar_t* P;
  const scalar_t* f;    // null: sigmoid of P's f rows, computed here (real semiring only)
  const scalar_t* fg;   // backward, max-plus: sigmoid(-pf) = d logsigmoid / d pf
  const scalar_t* c0;
  const bool* mask;
  const scalar_t* r;
  const scalar_t* p1;
  const scalar_t* p2;
  int64_t B, T, n, H, RH;
};

template <typename scalar_t>
const scalar_t* ptr_or_null(const at::Tensor& t) {
  return t.defined() && t.numel() ? t.data_ptr<scalar_t>() : nullptr;
}

// The n forget gates of step bt, [n,H]: read from f, or the sigmoid of P's f rows put in buf.
template <typename scalar_t>
const scalar_t* gates_at(const Ptrs<scalar_t>& a, int64_t bt, scalar_t* buf) {
  if (a.f) return a.f + bt * a.n * a.H;
  const scalar_t* Pt = a.P + bt * a.RH;
  for (int64_t j = 0; j < a.n; ++j) sigmoid_of(Pt + (2 * j + 1) * a.H, buf + j * a.H, a.H);
  return buf;
}

// One step of the n blocks: St from the state before, Sp, the projection row Pt and the gates ft.
template <typename scalar_t, bool MAXPLUS, bool PATF>
inline void step_blocks(const Ptrs<scalar_t>& a, const scalar_t* __restrict__ Pt, const scalar_t* __restrict__ ft,
                        const scalar_t* __restrict__ Sp, scalar_t* __restrict__ St) {
  const int64_t n = a.n, H = a.H;
  for (int64_t j = 0; j < n; ++j) {
    const scalar_t* __restrict__ pu = Pt + 2 * j * H;
    const scalar_t* __restrict__ fj = ft + j * H;
    const scalar_t* __restrict__ cp = Sp + j * H;
    scalar_t* __restrict__ c = St + j * H;
    if (j == 0) {
#pragma GCC ivdep
      for (int64_t h = 0; h < H; ++h) {
        const scalar_t u = MAXPLUS ? pu[h] : pu[h] - fj[h] * pu[h];
        if (MAXPLUS) {
          const scalar_t s = fj[h] + cp[h];
          c[h] = s >= u ? s : u;
        } else {
          c[h] = u + fj[h] * cp[h];
        }
      }
    } else {
      const scalar_t* __restrict__ bef = Sp + (j - 1) * H;
      const bool eps = PATF && j == 1;
#pragma GCC ivdep
      for (int64_t h = 0; h < H; ++h) {
        if (MAXPLUS) {
          const scalar_t e = bef[h] + pu[h];
          const scalar_t s = fj[h] + cp[h];
          c[h] = s >= e ? s : e;
        } else {
          const scalar_t u = pu[h] - fj[h] * pu[h];
          const scalar_t e = (eps ? bef[h] + a.r[h] : bef[h]) * u;
          c[h] = e + fj[h] * cp[h];
        }
      }
    }
  }
}

// Step bt of one row: St from Sp, or Sp held at a pad; the gates, where the kernel takes their
// sigmoid, go to gbuf (gates_at).
template <typename scalar_t, bool MAXPLUS, bool PATF>
inline void advance(const Ptrs<scalar_t>& a, int64_t bt, const scalar_t* Sp, scalar_t* St, scalar_t* gbuf) {
  if (a.mask && !a.mask[bt]) {
    std::copy(Sp, Sp + a.n * a.H, St);
  } else {
    step_blocks<scalar_t, MAXPLUS, PATF>(a, a.P + bt * a.RH, gates_at(a, bt, gbuf), Sp, St);
  }
}

// The forward pass over rows b0..b1: the read-out Rd (tanh of it if tanh_out), the final state
// fin [B,n,H], and the state before every K-th step in Sck [B,ceil(T/K),n,H], from which the
// backward recomputes the states of K steps at a time (no [B,T,n,H] state tensor is kept).
template <typename scalar_t, bool MAXPLUS, bool PATF>
void forward_rows(const Ptrs<scalar_t>& a, scalar_t* Sck, scalar_t* fin, scalar_t* Rd, bool tanh_out, int64_t K,
                  int64_t b0, int64_t b1) {
  const int64_t T = a.T, n = a.n, H = a.H, nH = n * H, nck = (T + K - 1) / K;
  std::vector<scalar_t> fbuf(a.f ? 0 : nH), sbuf(2 * nH);
  for (int64_t b = b0; b < b1; ++b) {
    const scalar_t* Sp = a.c0 + b * nH;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t bt = b * T + t;
      if (t % K == 0) std::copy(Sp, Sp + nH, Sck + (b * nck + t / K) * nH);
      scalar_t* __restrict__ St = sbuf.data() + (t & 1) * nH;
      advance<scalar_t, MAXPLUS, PATF>(a, bt, Sp, St, fbuf.data());
      scalar_t* __restrict__ Rt = Rd + bt * H;
      if (PATF) {
        for (int64_t h = 0; h < H; ++h) Rt[h] = a.p1[h] * St[h] + a.p2[h] * St[H + h];
      } else {
        const scalar_t* __restrict__ last = St + (n - 1) * H;
        for (int64_t h = 0; h < H; ++h) Rt[h] = last[h];
      }
      if (tanh_out) tanh_of(Rt, Rt, H, scalar_t(1));
      Sp = St;
    }
    std::copy(Sp, Sp + nH, fin + b * nH);
  }
}

// The backward of one block at one step, over its H columns: g = dL/dc_t in, gn (dL/dc_{t-1},
// this block's and the block before's) accumulated, dP's u and f rows written. Separate
// functions with restrict pointers and no branches in the loop, so that each vectorises.
template <typename T>
void bwd_real_first(int64_t H, const T* __restrict__ f, const T* __restrict__ p, const T* __restrict__ g,
                    const T* __restrict__ cp, T* __restrict__ gn, T* __restrict__ dpu, T* __restrict__ dpf) {
  for (int64_t h = 0; h < H; ++h) {
    gn[h] += f[h] * g[h];                                  // u = p - f p, c = u + f c_prev
    dpu[h] = g[h] * (T(1) - f[h]);
    dpf[h] = (g[h] * cp[h] - g[h] * p[h]) * f[h] * (T(1) - f[h]);
  }
}

template <typename T>
void bwd_real_next(int64_t H, const T* __restrict__ f, const T* __restrict__ p, const T* __restrict__ g,
                   const T* __restrict__ cp, const T* __restrict__ bef, const T* __restrict__ r, T* __restrict__ dr,
                   T* __restrict__ gn, T* __restrict__ gnb, T* __restrict__ dpu, T* __restrict__ dpf) {
  if (r) {                                                 // RRNN(F): enter from (c_0 + r)
    for (int64_t h = 0; h < H; ++h) {
      const T u = p[h] - f[h] * p[h];
      const T du = g[h] * (bef[h] + r[h]);
      gnb[h] += g[h] * u;
      dr[h] += g[h] * u;
      gn[h] += f[h] * g[h];
      dpu[h] = du * (T(1) - f[h]);
      dpf[h] = (g[h] * cp[h] - du * p[h]) * f[h] * (T(1) - f[h]);
    }
    return;
  }
  for (int64_t h = 0; h < H; ++h) {                        // e = c_{j-1,t-1} u
    const T u = p[h] - f[h] * p[h];
    const T du = g[h] * bef[h];
    gnb[h] += g[h] * u;
    gn[h] += f[h] * g[h];
    dpu[h] = du * (T(1) - f[h]);
    dpf[h] = (g[h] * cp[h] - du * p[h]) * f[h] * (T(1) - f[h]);
  }
}

template <typename T, bool ENTER>
void bwd_maxplus(int64_t H, const T* __restrict__ f, const T* __restrict__ p, const T* __restrict__ g,
                 const T* __restrict__ cp, const T* __restrict__ bef, const T* __restrict__ fg, T* __restrict__ gn,
                 T* __restrict__ gnb, T* __restrict__ dpu, T* __restrict__ dpf) {
  for (int64_t h = 0; h < H; ++h) {
    const T e = ENTER ? bef[h] + p[h] : p[h];
    const T df = f[h] + cp[h] >= e ? g[h] : T(0);          // a tie goes to the carried branch
    const T de = g[h] - df;
    gn[h] += df;
    if (ENTER) gnb[h] += de;
    dpu[h] = de;
    dpf[h] = df * fg[h];
  }
}

// dRd [B,T,H] (read at its own strides sd[3]: an expanded gradient, such as the ones of a
// sum's backward, is never materialised) and dS_last [B,n,H] (the final state's gradient; PATF:
// its read-out block in dRd_last [B,H]) in; dP's u and f rows (the o row zeroed), dc0 [B,n,H] and, for RRNN(F),
// per-row partial sums dr, dp1, dp2 [B,H] out. Each row runs its K-step chunks last to first:
// the chunk's states (and, in the real semiring, its forget gates) recomputed forward from the
// checkpoint Sck into buffers of K steps that stay in cache, then the chunk's steps in reverse.
template <typename scalar_t, bool MAXPLUS, bool PATF>
void backward_rows(const Ptrs<scalar_t>& a, const scalar_t* Sck, int64_t K, const scalar_t* Rd, const scalar_t* dRd,
                   const int64_t* sd, const scalar_t* dS_last,
                   const scalar_t* dRd_last, scalar_t* dP, scalar_t* dc0, scalar_t* dr, scalar_t* dp1,
                   scalar_t* dp2, int64_t b0, int64_t b1) {
  const int64_t T = a.T, n = a.n, H = a.H, RH = a.RH, nH = n * H, nck = (T + K - 1) / K;
  std::vector<scalar_t> gbuf(nH), gnbuf(nH), dread(H), sbuf(K * nH), fbuf(a.f ? 0 : K * nH);
  for (int64_t b = b0; b < b1; ++b) {
    scalar_t* g = gbuf.data();
    scalar_t* gn = gnbuf.data();
    for (int64_t i = 0; i < nH; ++i) g[i] = dS_last ? dS_last[b * nH + i] : scalar_t(0);
    if (PATF) {
      for (int64_t h = 0; h < H; ++h) dr[b * H + h] = dp1[b * H + h] = dp2[b * H + h] = 0;
    }
    for (int64_t ck = nck - 1; ck >= 0; --ck) {
      const int64_t t0 = ck * K, t1 = std::min(T, t0 + K);
      const scalar_t* s0 = Sck + (b * nck + ck) * nH;
      for (int64_t t = t0; t < t1; ++t) {                     // the chunk's states, forward again
        const scalar_t* Sp = t > t0 ? sbuf.data() + (t - t0 - 1) * nH : s0;
        advance<scalar_t, MAXPLUS, PATF>(a, b * T + t, Sp, sbuf.data() + (t - t0) * nH,
                                         fbuf.data() + (t - t0) * nH);
      }
      for (int64_t t = t1 - 1; t >= t0; --t) {
        const int64_t bt = b * T + t;
        const scalar_t* __restrict__ St = sbuf.data() + (t - t0) * nH;
        if (dRd) {
          const scalar_t* __restrict__ dRt = dRd + b * sd[0] + t * sd[1];
          scalar_t* __restrict__ dt = dread.data();
          if (sd[2] == 0) {                                     // a broadcast value (a sum's backward)
            std::fill(dt, dt + H, dRt[0]);
            dRt = dt;
          } else if (sd[2] != 1) {                              // gathered
            for (int64_t h = 0; h < H; ++h) dt[h] = dRt[h * sd[2]];
            dRt = dt;
          }
          if (Rd) {                                             // through h = tanh(read-out)
            const scalar_t* __restrict__ ht = Rd + bt * H;
            for (int64_t h = 0; h < H; ++h) dt[h] = dRt[h] * (scalar_t(1) - ht[h] * ht[h]);
            dRt = dt;
          }
          if (PATF) {
#pragma GCC ivdep
            for (int64_t h = 0; h < H; ++h) {
              const scalar_t d = dRt[h] + (t == T - 1 && dRd_last ? dRd_last[b * H + h] : scalar_t(0));
              g[h] += a.p1[h] * d;
              g[H + h] += a.p2[h] * d;
              dp1[b * H + h] += d * St[h];
              dp2[b * H + h] += d * St[H + h];
            }
          } else {
            scalar_t* __restrict__ gl = g + (n - 1) * H;
            for (int64_t h = 0; h < H; ++h) gl[h] += dRt[h];
          }
        } else if (PATF && t == T - 1 && dRd_last) {
          for (int64_t h = 0; h < H; ++h) {
            const scalar_t d = dRd_last[b * H + h];
            g[h] += a.p1[h] * d;
            g[H + h] += a.p2[h] * d;
            dp1[b * H + h] += d * St[h];
            dp2[b * H + h] += d * St[H + h];
          }
        }
        scalar_t* __restrict__ dPt = dP + bt * RH;
        for (int64_t i = 2 * nH; i < RH; ++i) dPt[i] = 0;      // the output gate's row: not ours
        if (a.mask && !a.mask[bt]) {                            // the state is held: g passes on
          for (int64_t i = 0; i < 2 * nH; ++i) dPt[i] = 0;
          continue;
        }
        const scalar_t* __restrict__ Sp = t > t0 ? St - nH : s0;
        const scalar_t* __restrict__ Pt = a.P + bt * RH;
        const scalar_t* __restrict__ ft = a.f ? a.f + bt * nH : fbuf.data() + (t - t0) * nH;
        const scalar_t* __restrict__ fgt = MAXPLUS ? a.fg + bt * nH : nullptr;
        for (int64_t i = 0; i < nH; ++i) gn[i] = 0;
        for (int64_t j = 0; j < n; ++j) {
          const scalar_t* __restrict__ pu = Pt + 2 * j * H;
          const scalar_t* __restrict__ fj = ft + j * H;
          const scalar_t* __restrict__ cp = Sp + j * H;
          const scalar_t* __restrict__ gj = g + j * H;
          scalar_t* __restrict__ gnj = gn + j * H;
          scalar_t* __restrict__ dpu = dPt + 2 * j * H;
          scalar_t* __restrict__ dpf = dPt + (2 * j + 1) * H;
          const scalar_t* __restrict__ bef = j ? Sp + (j - 1) * H : nullptr;
          scalar_t* __restrict__ gnb = j ? gn + (j - 1) * H : nullptr;
          const bool eps = PATF && j == 1;
          if (MAXPLUS) {
            const scalar_t* fgj = fgt + j * H;
            if (j) bwd_maxplus<scalar_t, true>(H, fj, pu, gj, cp, bef, fgj, gnj, gnb, dpu, dpf);
            else bwd_maxplus<scalar_t, false>(H, fj, pu, gj, cp, bef, fgj, gnj, gnb, dpu, dpf);
          } else if (j == 0) {
            bwd_real_first<scalar_t>(H, fj, pu, gj, cp, gnj, dpu, dpf);
          } else {
            bwd_real_next<scalar_t>(H, fj, pu, gj, cp, bef, eps ? a.r : nullptr, eps ? dr + b * H : nullptr, gnj,
                                    gnb, dpu, dpf);
          }
        }
        std::swap(g, gn);
      }
    }
    for (int64_t i = 0; i < nH; ++i) dc0[b * nH + i] = g[i];
  }
}

template <typename scalar_t>
Ptrs<scalar_t> pointers(const at::Tensor& P, const at::Tensor& f, const at::Tensor& fg, const at::Tensor& c0,
                        const at::Tensor& mask, const at::Tensor& r, const at::Tensor& p1, const at::Tensor& p2) {
  Ptrs<scalar_t> a;
  a.P = P.data_ptr<scalar_t>();
  a.f = ptr_or_null<scalar_t>(f);
  a.fg = ptr_or_null<scalar_t>(fg);
  a.c0 = c0.data_ptr<scalar_t>();
  a.mask = mask.defined() && mask.numel() ? mask.data_ptr<bool>() : nullptr;
  a.r = ptr_or_null<scalar_t>(r);
  a.p1 = ptr_or_null<scalar_t>(p1);
  a.p2 = ptr_or_null<scalar_t>(p2);
  a.B = P.size(0);
  a.T = P.size(1);
  a.n = c0.size(1);
  a.H = c0.size(2);
  a.RH = P.size(2);
  return a;
}

void check(const at::Tensor& P, const at::Tensor& f, const at::Tensor& c0, bool maxplus) {
  TORCH_CHECK(P.device().is_cpu() && P.is_contiguous() && P.dim() == 3, "P must be a contiguous CPU [B,T,R*H]");
  TORCH_CHECK(c0.is_contiguous() && c0.dim() == 3 && c0.scalar_type() == P.scalar_type() && c0.size(0) == P.size(0),
              "c0 must be a contiguous [B,n,H]");
  if (f.numel() || maxplus) {
    TORCH_CHECK(f.is_contiguous() && f.dim() == 4 && f.scalar_type() == P.scalar_type(), "f must be [B,T,n,H]");
    TORCH_CHECK(f.size(0) == P.size(0) && f.size(1) == P.size(1) && f.size(2) == c0.size(1) && f.size(3) == c0.size(2),
                "f must be [B,T,n,H] as P and c0 say");
  }
  TORCH_CHECK(P.size(2) >= 2 * c0.size(1) * c0.size(2), "P has too few rows");
}

int64_t grain(int64_t B) {
  const int64_t threads = at::get_num_threads();
  return std::max<int64_t>(1, (B + threads - 1) / threads);
}

// -> (Sck [B,ceil(T/K),n,H], Rd [B,T,H], final [B,n,H])
std::tuple<at::Tensor, at::Tensor, at::Tensor> rational_forward(
    const at::Tensor& P, const at::Tensor& f, const at::Tensor& c0, const at::Tensor& mask, const at::Tensor& r,
    const at::Tensor& p1, const at::Tensor& p2, bool maxplus, bool pattern_f, bool tanh_out, int64_t K) {
  check(P, f, c0, maxplus);
  TORCH_CHECK(!(maxplus && pattern_f), "RRNN(F) runs here in the real semiring only");
  TORCH_CHECK(K >= 1, "the checkpoint interval K must be at least 1");
  const int64_t nck = (P.size(1) + K - 1) / K;
  auto Sck = at::empty({P.size(0), nck, c0.size(1), c0.size(2)}, P.options());
  auto fin = at::empty({P.size(0), c0.size(1), c0.size(2)}, P.options());
  auto Rd = at::empty({P.size(0), P.size(1), c0.size(2)}, P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "rational_forward", [&] {
    const auto a = pointers<scalar_t>(P, f, at::Tensor(), c0, mask, r, p1, p2);
    scalar_t* s = Sck.data_ptr<scalar_t>();
    scalar_t* fn = fin.data_ptr<scalar_t>();
    scalar_t* rd = Rd.data_ptr<scalar_t>();
    at::parallel_for(0, a.B, grain(a.B), [&](int64_t b0, int64_t b1) {
      if (maxplus) forward_rows<scalar_t, true, false>(a, s, fn, rd, tanh_out, K, b0, b1);
      else if (pattern_f) forward_rows<scalar_t, false, true>(a, s, fn, rd, tanh_out, K, b0, b1);
      else forward_rows<scalar_t, false, false>(a, s, fn, rd, tanh_out, K, b0, b1);
    });
  });
  return {Sck, Rd, fin};
}

// -> (dP [B,T,R*H], dc0 [B,n,H], dr, dp1, dp2 [B,H] per row; empty unless pattern_f)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rational_backward(
    const at::Tensor& P, const at::Tensor& f, const at::Tensor& fg, const at::Tensor& c0, const at::Tensor& mask,
    const at::Tensor& r, const at::Tensor& p1, const at::Tensor& p2, const at::Tensor& Sck, int64_t K,
    const at::Tensor& dRd, const at::Tensor& dS_last, const at::Tensor& dRd_last, const at::Tensor& Rd_tanh,
    bool maxplus, bool pattern_f) {
  check(P, f, c0, maxplus);
  TORCH_CHECK(!maxplus || (fg.defined() && fg.is_contiguous()), "max-plus needs fg");
  TORCH_CHECK(K >= 1 && Sck.is_contiguous() && Sck.dim() == 4 && Sck.size(0) == P.size(0) &&
                  Sck.size(1) == (P.size(1) + K - 1) / K && Sck.size(2) == c0.size(1) && Sck.size(3) == c0.size(2) &&
                  Sck.scalar_type() == P.scalar_type(),
              "Sck must be the forward's [B,ceil(T/K),n,H] checkpoints");
  TORCH_CHECK(!dRd.defined() || dRd.numel() == 0 ||
                  (dRd.dim() == 3 && dRd.size(0) == P.size(0) && dRd.size(1) == P.size(1) &&
                   dRd.size(2) == c0.size(2) && dRd.scalar_type() == P.scalar_type()),
              "dRd must be [B,T,H] of P's dtype");
  auto dP = at::empty(P.sizes(), P.options());
  auto dc0 = at::empty(c0.sizes(), c0.options());
  const int64_t B = P.size(0), H = c0.size(2);
  auto dr = pattern_f ? at::empty({B, H}, P.options()) : at::empty({0}, P.options());
  auto dp1 = pattern_f ? at::empty({B, H}, P.options()) : at::empty({0}, P.options());
  auto dp2 = pattern_f ? at::empty({B, H}, P.options()) : at::empty({0}, P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "rational_backward", [&] {
    const auto a = pointers<scalar_t>(P, f, fg, c0, mask, r, p1, p2);
    const scalar_t* s = Sck.data_ptr<scalar_t>();
    const scalar_t* drd = ptr_or_null<scalar_t>(dRd);
    const int64_t sd[3] = {drd ? dRd.stride(0) : 0, drd ? dRd.stride(1) : 0, drd ? dRd.stride(2) : 1};
    const scalar_t* rdt = ptr_or_null<scalar_t>(Rd_tanh);
    const scalar_t* dsl = ptr_or_null<scalar_t>(dS_last);
    const scalar_t* drl = ptr_or_null<scalar_t>(dRd_last);
    scalar_t *dp = dP.data_ptr<scalar_t>(), *dc = dc0.data_ptr<scalar_t>();
    scalar_t *drp = ptr_or_null<scalar_t>(dr) ? dr.data_ptr<scalar_t>() : nullptr;
    scalar_t *d1 = pattern_f ? dp1.data_ptr<scalar_t>() : nullptr, *d2 = pattern_f ? dp2.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, a.B, grain(a.B), [&](int64_t b0, int64_t b1) {
      if (maxplus)
        backward_rows<scalar_t, true, false>(a, s, K, rdt, drd, sd, dsl, drl, dp, dc, drp, d1, d2, b0, b1);
      else if (pattern_f)
        backward_rows<scalar_t, false, true>(a, s, K, rdt, drd, sd, dsl, drl, dp, dc, drp, d1, d2, b0, b1);
      else
        backward_rows<scalar_t, false, false>(a, s, K, rdt, drd, sd, dsl, drl, dp, dc, drp, d1, d2, b0, b1);
    });
  });
  return {dP, dc0, dr, dp1, dp2};
}

}  // namespace

TORCH_LIBRARY(rnnlens_rational, m) {
  m.def("forward(Tensor P, Tensor f, Tensor c0, Tensor mask, Tensor r, Tensor p1, Tensor p2, bool maxplus, "
        "bool pattern_f, bool tanh_out, int K) -> (Tensor, Tensor, Tensor)");
  m.def("backward(Tensor P, Tensor f, Tensor fg, Tensor c0, Tensor mask, Tensor r, Tensor p1, Tensor p2, "
        "Tensor Sck, int K, Tensor dRd, Tensor dS_last, Tensor dRd_last, Tensor Rd_tanh, bool maxplus, "
        "bool pattern_f) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(rnnlens_rational, CPU, m) {
  m.impl("forward", &rational_forward);
  m.impl("backward", &rational_backward);
}
