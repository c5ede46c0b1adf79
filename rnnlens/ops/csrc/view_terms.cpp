// The terms of the GRU's and the LSTM's first-order views (rnnlens/cells/classic.py) from their
// pre-activations, and those of the sequence-level paper's approximate forms (further down),
// forward and backward, one fused pass over the positions each. The activations are
// vecmath.h's (vectorised approximations within a few ulp in float32; SLEEF's in float64). The
// Python forms in rnnlens/cells/gru_terms.py, lstm_terms.py and ngram.py are the reference the
// tests compare with this path.
//
// GRU, from P = [x_r, x_z, x_n] (x_* = W_i* x + b_i*) and b_hh = [b_hr, b_hz, b_hn]:
//   r = s(x_r + b_hr), z = s(x_z + b_hz), n = tanh(x_n + r b_hn), g = (1 - z) n, diag = z,
//   coef = [a_r, a_z, a_n] = [(1 - z)(1 - n^2) b_hn r (1 - r), -n z (1 - z), (1 - z)(1 - n^2) r]
// LSTM, from z = [z_i, z_f, z_g, z_o] = W_ih x + b_ih + b_hh:
//   i, f, o = s(z_*), g = tanh(z_g), c = i g, and the terms
//   g_view = [c, o tanh(c)], f, a_i = g i (1 - i), a_g = i (1 - g^2), a_o = tanh(c) o (1 - o),
//   k = o (1 - tanh(c)^2)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "gru_view.h"
#include "lstm_approx.h"
#include "lstm_view.h"
#include "vecmath.h"

// The loops over a position's H values carry `#pragma GCC ivdep`: their rows never overlap, but
// GCC does not take restrict on block-scope pointers, so without it each loop versions itself
// for aliasing past its limit of run-time checks and stays scalar (measured: the LSTM view
// terms' backward 2.2 -> 1.3 ms at 32 x 35 x 256 on 2 threads).

namespace {

using rnnlens_vec::sigmoid_of;
using rnnlens_vec::tanh_of;

constexpr int64_t kGrain = 16;   // positions per task

// ---------------------------------------------------------------------------------------------
template <typename T>
void gru_fwd(const T* P, const T* bhh, T* g, T* coef, T* diag, int64_t N, int64_t H) {
  const T* bhn = bhh + 2 * H;
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    std::vector<T> r(H), v(H), nn(H);
    for (int64_t p = n0; p < n1; ++p) {
      T* __restrict__ z = diag + p * H;
      rnnlens_gru_view::gates(P + p * 3 * H, bhh, r.data(), z, nn.data(), v.data(), H);
      T* __restrict__ ar = coef + p * 3 * H;
      T* __restrict__ az = ar + H;
      T* __restrict__ an = ar + 2 * H;
      T* __restrict__ gp = g + p * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const T n = nn[j], zz = z[j], rr = r[j];
        const T dn = (T(1) - zz) * (T(1) - n * n);
        gp[j] = (T(1) - zz) * n;
        an[j] = dn * rr;
        az[j] = -n * zz * (T(1) - zz);
        ar[j] = dn * bhn[j] * rr * (T(1) - rr);
      }
    }
  });
}

// dP [N,3H] written; dbhh [3H] accumulated (summed over the positions; per-task partial sums)
template <typename T>
void gru_bwd(const T* P, const T* bhh, const T* G, const T* C, const T* D, T* dP, T* dbhh, int64_t N, int64_t H) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), (N + kGrain - 1) / kGrain));
  std::vector<T> partial(nt * 3 * H, T(0));
  const int64_t chunk = (N + nt - 1) / nt;
  at::parallel_for(0, nt, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> r(H), z(H), v(H), nn(H);
    for (int64_t task = t0; task < t1; ++task) {
      T* db = partial.data() + task * 3 * H;
      for (int64_t p = task * chunk; p < std::min(N, (task + 1) * chunk); ++p) {
        rnnlens_gru_view::gates(P + p * 3 * H, bhh, r.data(), z.data(), nn.data(), v.data(), H);
        rnnlens_gru_view::backward(r.data(), z.data(), nn.data(), bhh, G + p * H, C + p * 3 * H, D + p * H,
                                   dP + p * 3 * H, db, H);
      }
    }
  });
  for (int64_t task = 0; task < nt; ++task)
    for (int64_t j = 0; j < 3 * H; ++j) dbhh[j] += partial[task * 3 * H + j];
}

std::vector<at::Tensor> gru_view_forward(const at::Tensor& P_, const at::Tensor& bhh_) {
  const at::Tensor P = P_.contiguous(), bhh = bhh_.contiguous();
  const int64_t H = P.size(-1) / 3, N = P.numel() / (3 * H);
  auto lead = P.sizes().vec();
  lead.pop_back();
  auto shape = [&](int64_t last) { auto s = lead; s.push_back(last); return s; };
  at::Tensor g = at::empty(shape(H), P.options()), coef = at::empty(shape(3 * H), P.options()),
             diag = at::empty(shape(H), P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "gru_view_forward", [&] {
    gru_fwd<scalar_t>(P.data_ptr<scalar_t>(), bhh.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                      coef.data_ptr<scalar_t>(), diag.data_ptr<scalar_t>(), N, H);
  });
  return {g, coef, diag};
}

std::vector<at::Tensor> gru_view_backward(const at::Tensor& P_, const at::Tensor& bhh_, const at::Tensor& dg,
                                          const at::Tensor& dcoef, const at::Tensor& ddiag) {
  const at::Tensor P = P_.contiguous(), bhh = bhh_.contiguous();
  const int64_t H = P.size(-1) / 3, N = P.numel() / (3 * H);
  // a missing gradient is a zero one: the loop below then has no branches and vectorises
  auto given = [&](const at::Tensor& d, int64_t last) {
    return d.numel() ? d.contiguous() : at::zeros({N, last}, P.options());
  };
  const at::Tensor G = given(dg, H), C = given(dcoef, 3 * H), D = given(ddiag, H);
  at::Tensor dP = at::empty_like(P), db = at::zeros({3 * H}, P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "gru_view_backward", [&] {
    auto ptr = [](const at::Tensor& t) -> const scalar_t* { return t.numel() ? t.data_ptr<scalar_t>() : nullptr; };
    gru_bwd<scalar_t>(P.data_ptr<scalar_t>(), bhh.data_ptr<scalar_t>(), ptr(G), ptr(C), ptr(D),
                      dP.data_ptr<scalar_t>(), db.data_ptr<scalar_t>(), N, H);
  });
  return {dP, db};
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void lstm_fwd(const T* Z, T* gv, T* f, T* ai, T* ag, T* ao, T* k, int64_t N, int64_t H) {
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    std::vector<T> i(H), gg(H), o(H), c(H), tc(H);
    for (int64_t p = n0; p < n1; ++p) {
      const int64_t o1 = p * H;
      rnnlens_lstm_view::gates(Z + p * 4 * H, i.data(), f + o1, gg.data(), o.data(), tc.data(), c.data(), H);
      T* __restrict__ g2 = gv + p * 2 * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        g2[j] = c[j];
        g2[H + j] = o[j] * tc[j];
        ai[o1 + j] = gg[j] * i[j] * (T(1) - i[j]);
        ag[o1 + j] = i[j] * (T(1) - gg[j] * gg[j]);
        ao[o1 + j] = tc[j] * o[j] * (T(1) - o[j]);
        k[o1 + j] = o[j] * (T(1) - tc[j] * tc[j]);
      }
    }
  });
}

template <typename T>
struct LstmGrads {
  const T *dg, *df, *dai, *dag, *dao, *dk;
};

template <typename T>
void lstm_bwd(const T* Z, const LstmGrads<T>& d, T* dZ, int64_t N, int64_t H) {
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    std::vector<T> i(H), f(H), gg(H), o(H), c(H), tc(H);
    for (int64_t p = n0; p < n1; ++p) {
      rnnlens_lstm_view::gates(Z + p * 4 * H, i.data(), f.data(), gg.data(), o.data(), tc.data(), c.data(), H);
      const int64_t o1 = p * H;
      T* __restrict__ out = dZ + p * 4 * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j)
        rnnlens_lstm_view::backward(i[j], f[j], gg[j], o[j], tc[j], d.dg[p * 2 * H + j], d.dg[p * 2 * H + H + j],
                                    d.df[o1 + j], d.dai[o1 + j], d.dag[o1 + j], d.dao[o1 + j], d.dk[o1 + j], out[j],
                                    out[H + j], out[2 * H + j], out[3 * H + j]);
    }
  });
}

std::vector<at::Tensor> lstm_view_forward(const at::Tensor& Z_) {
  const at::Tensor Z = Z_.contiguous();
  const int64_t H = Z.size(-1) / 4, N = Z.numel() / (4 * H);
  auto lead = Z.sizes().vec();
  lead.pop_back();
  auto shape = [&](int64_t last) { auto s = lead; s.push_back(last); return s; };
  at::Tensor gv = at::empty(shape(2 * H), Z.options());
  std::vector<at::Tensor> outs = {gv};
  for (int q = 0; q < 5; ++q) outs.push_back(at::empty(shape(H), Z.options()));
  AT_DISPATCH_FLOATING_TYPES(Z.scalar_type(), "lstm_view_forward", [&] {
    lstm_fwd<scalar_t>(Z.data_ptr<scalar_t>(), outs[0].data_ptr<scalar_t>(), outs[1].data_ptr<scalar_t>(),
                       outs[2].data_ptr<scalar_t>(), outs[3].data_ptr<scalar_t>(), outs[4].data_ptr<scalar_t>(),
                       outs[5].data_ptr<scalar_t>(), N, H);
  });
  return outs;
}

at::Tensor lstm_view_backward(const at::Tensor& Z_, const at::Tensor& dg, const at::Tensor& df, const at::Tensor& dai,
                              const at::Tensor& dag, const at::Tensor& dao, const at::Tensor& dk) {
  const at::Tensor Z = Z_.contiguous();
  const int64_t H = Z.size(-1) / 4, N = Z.numel() / (4 * H);
  at::Tensor dZ = at::empty_like(Z);
  auto given = [&](const at::Tensor& d, int64_t last) {     // a missing gradient is a zero one
    return d.numel() ? d.contiguous() : at::zeros({N, last}, Z.options());
  };
  std::vector<at::Tensor> ds = {given(dg, 2 * H), given(df, H), given(dai, H), given(dag, H), given(dao, H),
                                given(dk, H)};
  AT_DISPATCH_FLOATING_TYPES(Z.scalar_type(), "lstm_view_backward", [&] {
    auto ptr = [](const at::Tensor& t) -> const scalar_t* { return t.numel() ? t.data_ptr<scalar_t>() : nullptr; };
    LstmGrads<scalar_t> d{ptr(ds[0]), ptr(ds[1]), ptr(ds[2]), ptr(ds[3]), ptr(ds[4]), ptr(ds[5])};
    lstm_bwd<scalar_t>(Z.data_ptr<scalar_t>(), d, dZ.data_ptr<scalar_t>(), N, H);
  });
  return dZ;
}

// ---------------------------------------------------------------------------------------------
// The sequence-level paper's approximate GRU and LSTM forms (rnnlens/cells/ngram.py, GRUApprox
// and LSTMApprox), whose terms are polynomials in the x-projections: one pass each way, every
// kind (approx, simplified, variant) through the constants k (ngram.py names them).
//
// GRU, from P = [x_r, x_z, x_n], k = (kr, nz, s, beta, d0, dz):
//   g = x_n (1/2 - x_z/4),  coef = [kr x_z, -nz x_n/4, 1/4 + s (x_r - x_z - beta x_z x_r)/8],
//   diag = d0 + dz x_z; coef's blocks from b0 on only (the approx form reads no W_hr: b0 = 1;
//   the simplified one only W_hn: b0 = 2)
// LSTM, from z = [z_i, z_f, z_c, z_o], k = (ff, f0, fi, fc, ai, ag, ko, aog, aov):
//   g_c = (z_i + 2) z_c/4,  g_h = (z_o + 2) g_c/4,  f = (ff z_f + f0 + fi z_i + fc z_c)/4,
//   a_i = ai z_c/4,  a_g = (ag z_i + 2)/4,  a_f = z_f/10,  k = (ko z_o + 2)/4,
//   a_o = (aog g_c + aov (z_f + z_o)/10)/4;  g_view = [g_c, g_h]
template <typename T>
void gru_approx_fwd(const T* P, const double* k, int64_t b0, T* g, T* coef, T* diag, int64_t N, int64_t H) {
  const T kr = T(k[0]), nz = T(k[1]), s = T(k[2]), beta = T(k[3]), d0 = T(k[4]), dz = T(k[5]);
  const int64_t KW = (3 - b0) * H;
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t p = n0; p < n1; ++p) {
      const T* __restrict__ x = P + p * 3 * H;       // [x_r, x_z, x_n]
      T* __restrict__ cr = coef + p * KW;           // the blocks from b0 on: c_r (b0 = 0), c_z (b0 <= 1), c_n
      T* __restrict__ cz = cr + (b0 == 0 ? H : 0);
      T* __restrict__ cn = coef + p * KW + (2 - b0) * H;
      T* __restrict__ gp = g + p * H;
      T* __restrict__ dp = diag + p * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const T r = x[j], z = x[H + j], n = x[2 * H + j];
        gp[j] = n * (T(0.5) - T(0.25) * z);
        cn[j] = T(0.25) + T(0.125) * s * (r - z - beta * z * r);
        dp[j] = d0 + dz * z;
      }
      if (b0 <= 1) {
#pragma GCC ivdep
        for (int64_t j = 0; j < H; ++j) cz[j] = T(-0.25) * nz * x[2 * H + j];
      }
      if (b0 == 0) {
#pragma GCC ivdep
        for (int64_t j = 0; j < H; ++j) cr[j] = kr * x[H + j];
      }
    }
  });
}

template <typename T>
void gru_approx_bwd(const T* P, const double* k, int64_t b0, const T* G, const T* C, const T* D, T* dP, int64_t N,
                    int64_t H) {
  const T kr = T(k[0]), nz = T(k[1]), s = T(k[2]), beta = T(k[3]), dz = T(k[5]);
  const int64_t KW = (3 - b0) * H;
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t p = n0; p < n1; ++p) {
      const T* __restrict__ x = P + p * 3 * H;       // [x_r, x_z, x_n]
      const T* __restrict__ gg = G + p * H;
      const T* __restrict__ cr = C + p * KW;
      const T* __restrict__ cz = cr + (b0 == 0 ? H : 0);
      const T* __restrict__ cn = C + p * KW + (2 - b0) * H;
      const T* __restrict__ dd = D + p * H;
      T* __restrict__ out = dP + p * 3 * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const T r = x[j], z = x[H + j], n = x[2 * H + j], Gj = gg[j], Cn = T(0.125) * s * cn[j];
        out[j] = Cn * (T(1) - beta * z);
        out[H + j] = T(-0.25) * Gj * n - Cn * (T(1) + beta * r) + dz * dd[j];
        out[2 * H + j] = Gj * (T(0.5) - T(0.25) * z);
      }
      if (b0 <= 1) {
#pragma GCC ivdep
        for (int64_t j = 0; j < H; ++j) out[2 * H + j] -= T(0.25) * nz * cz[j];
      }
      if (b0 == 0) {
#pragma GCC ivdep
        for (int64_t j = 0; j < H; ++j) out[H + j] += kr * cr[j];
      }
    }
  });
}

template <typename T>
struct ApproxLstmOut {
  T *g, *f, *ai, *ag, *af, *k, *ao;     // af may be null (no a_f term)
};

template <typename T>
void lstm_approx_fwd(const T* Z, const double* kk, const ApproxLstmOut<T>& o, int64_t N, int64_t H) {
  const rnnlens_lstm_approx::Consts<T> q(kk);
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t p = n0; p < n1; ++p) {
      const T* __restrict__ zi = Z + p * 4 * H;
      const T* __restrict__ zf = zi + H;
      const T* __restrict__ zc = zi + 2 * H;
      const T* __restrict__ zo = zi + 3 * H;
      T* __restrict__ g2 = o.g + p * 2 * H;
      T* __restrict__ f = o.f + p * H;
      T* __restrict__ a_i = o.ai + p * H;
      T* __restrict__ a_g = o.ag + p * H;
      T* __restrict__ k = o.k + p * H;
      T* __restrict__ a_o = o.ao + p * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const auto m = rnnlens_lstm_approx::terms(q, zi[j], zf[j], zc[j], zo[j]);
        g2[j] = m.gc;
        g2[H + j] = m.gh;
        f[j] = m.f;
        a_i[j] = m.ai;
        a_g[j] = m.ag;
        k[j] = m.k;
        a_o[j] = m.ao;
      }
      if (o.af) {
        T* __restrict__ a_f = o.af + p * H;
        for (int64_t j = 0; j < H; ++j) a_f[j] = rnnlens_lstm_approx::terms(q, zi[j], zf[j], zc[j], zo[j]).af;
      }
    }
  });
}

template <typename T>
struct ApproxLstmGrads {
  const T *dg, *df, *dai, *dag, *daf, *dk, *dao;     // daf may be null
};

template <typename T>
void lstm_approx_bwd(const T* Z, const double* kk, const ApproxLstmGrads<T>& d, T* dZ, int64_t N, int64_t H) {
  const rnnlens_lstm_approx::Consts<T> q(kk);
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t p = n0; p < n1; ++p) {
      const T* __restrict__ zi = Z + p * 4 * H;
      const T* __restrict__ zc = zi + 2 * H;
      const T* __restrict__ zo = zi + 3 * H;
      const T* __restrict__ dg = d.dg + p * 2 * H;
      const int64_t o1 = p * H;
      T* __restrict__ out = dZ + p * 4 * H;
      const T* __restrict__ Df = d.df + o1;
      const T* __restrict__ Dao = d.dao + o1;
      const T* __restrict__ Dag = d.dag + o1;
      const T* __restrict__ Dai = d.dai + o1;
      const T* __restrict__ Dk = d.dk + o1;
      // a_f's gradient where the kind has the term, else zero: one loop each, no test per value
      const auto values = [&](const auto& daf) {
#pragma GCC ivdep
        for (int64_t j = 0; j < H; ++j)
          rnnlens_lstm_approx::backward(q, zi[j], zc[j], zo[j], dg[j], dg[H + j], Df[j], Dai[j], Dag[j], daf(j),
                                        Dk[j], Dao[j], out[j], out[H + j], out[2 * H + j], out[3 * H + j]);
      };
      if (d.daf) {
        const T* __restrict__ Daf = d.daf + o1;
        values([&](int64_t j) { return Daf[j]; });
      } else {
        values([](int64_t) { return T(0); });
      }
    }
  });
}

// coef holds the blocks from b0 on (those of the recurrent matrices the kind reads: the others' are zero)
std::vector<at::Tensor> gru_approx_forward(const at::Tensor& P_, c10::ArrayRef<double> k, int64_t b0) {
  TORCH_CHECK(k.size() == 6 && b0 >= 0 && b0 <= 2, "gru_approx_forward: 6 constants, a first block 0-2");
  const at::Tensor P = P_.contiguous();
  const int64_t H = P.size(-1) / 3, N = P.numel() / (3 * H);
  auto lead = P.sizes().vec();
  lead.pop_back();
  auto shape = [&](int64_t last) { auto s = lead; s.push_back(last); return s; };
  at::Tensor g = at::empty(shape(H), P.options()), coef = at::empty(shape((3 - b0) * H), P.options()),
             diag = at::empty(shape(H), P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "gru_approx_forward", [&] {
    gru_approx_fwd<scalar_t>(P.data_ptr<scalar_t>(), k.data(), b0, g.data_ptr<scalar_t>(), coef.data_ptr<scalar_t>(),
                             diag.data_ptr<scalar_t>(), N, H);
  });
  return {g, coef, diag};
}

at::Tensor gru_approx_backward(const at::Tensor& P_, c10::ArrayRef<double> k, int64_t b0, const at::Tensor& dg,
                               const at::Tensor& dcoef, const at::Tensor& ddiag) {
  TORCH_CHECK(k.size() == 6 && b0 >= 0 && b0 <= 2, "gru_approx_backward: 6 constants, a first block 0-2");
  const at::Tensor P = P_.contiguous();
  const int64_t H = P.size(-1) / 3, N = P.numel() / (3 * H);
  auto given = [&](const at::Tensor& d, int64_t last) {     // a missing gradient is a zero one
    return d.numel() ? d.contiguous() : at::zeros({N, last}, P.options());
  };
  const at::Tensor G = given(dg, H), C = given(dcoef, (3 - b0) * H), D = given(ddiag, H);
  at::Tensor dP = at::empty_like(P);
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "gru_approx_backward", [&] {
    gru_approx_bwd<scalar_t>(P.data_ptr<scalar_t>(), k.data(), b0, G.data_ptr<scalar_t>(), C.data_ptr<scalar_t>(),
                             D.data_ptr<scalar_t>(), dP.data_ptr<scalar_t>(), N, H);
  });
  return dP;
}

// -> [g_view, f, a_i, a_g, a_f (empty without the term), k, a_o]
std::vector<at::Tensor> lstm_approx_forward(const at::Tensor& Z_, c10::ArrayRef<double> k, bool with_af) {
  TORCH_CHECK(k.size() == 9, "lstm_approx_forward: 9 constants");
  const at::Tensor Z = Z_.contiguous();
  const int64_t H = Z.size(-1) / 4, N = Z.numel() / (4 * H);
  auto lead = Z.sizes().vec();
  lead.pop_back();
  auto shape = [&](int64_t last) { auto s = lead; s.push_back(last); return s; };
  std::vector<at::Tensor> outs = {at::empty(shape(2 * H), Z.options())};
  for (int q = 0; q < 6; ++q)
    outs.push_back(q == 3 && !with_af ? at::empty({0}, Z.options()) : at::empty(shape(H), Z.options()));
  AT_DISPATCH_FLOATING_TYPES(Z.scalar_type(), "lstm_approx_forward", [&] {
    auto ptr = [](at::Tensor& t) -> scalar_t* { return t.numel() ? t.data_ptr<scalar_t>() : nullptr; };
    ApproxLstmOut<scalar_t> o{ptr(outs[0]), ptr(outs[1]), ptr(outs[2]), ptr(outs[3]), ptr(outs[4]), ptr(outs[5]),
                              ptr(outs[6])};
    lstm_approx_fwd<scalar_t>(Z.data_ptr<scalar_t>(), k.data(), o, N, H);
  });
  return outs;
}

at::Tensor lstm_approx_backward(const at::Tensor& Z_, c10::ArrayRef<double> k, const at::Tensor& dg,
                                const at::Tensor& df, const at::Tensor& dai, const at::Tensor& dag,
                                const at::Tensor& daf, const at::Tensor& dk, const at::Tensor& dao) {
  TORCH_CHECK(k.size() == 9, "lstm_approx_backward: 9 constants");
  const at::Tensor Z = Z_.contiguous();
  const int64_t H = Z.size(-1) / 4, N = Z.numel() / (4 * H);
  at::Tensor dZ = at::empty_like(Z);
  auto given = [&](const at::Tensor& d, int64_t last) {     // a missing gradient is a zero one
    return d.numel() ? d.contiguous() : at::zeros({N, last}, Z.options());
  };
  std::vector<at::Tensor> ds = {given(dg, 2 * H), given(df, H), given(dai, H), given(dag, H), daf.contiguous(),
                                given(dk, H), given(dao, H)};
  AT_DISPATCH_FLOATING_TYPES(Z.scalar_type(), "lstm_approx_backward", [&] {
    auto ptr = [](const at::Tensor& t) -> const scalar_t* { return t.numel() ? t.data_ptr<scalar_t>() : nullptr; };
    ApproxLstmGrads<scalar_t> d{ptr(ds[0]), ptr(ds[1]), ptr(ds[2]), ptr(ds[3]), ptr(ds[4]), ptr(ds[5]), ptr(ds[6])};
    lstm_approx_bwd<scalar_t>(Z.data_ptr<scalar_t>(), k.data(), d, dZ.data_ptr<scalar_t>(), N, H);
  });
  return dZ;
}

}  // namespace

TORCH_LIBRARY(rnnlens_view_terms, m) {
  m.def("gru_forward(Tensor P, Tensor b_hh) -> Tensor[]");
  m.def("gru_backward(Tensor P, Tensor b_hh, Tensor dg, Tensor dcoef, Tensor ddiag) -> Tensor[]");
  m.def("lstm_forward(Tensor z) -> Tensor[]");
  m.def("lstm_backward(Tensor z, Tensor dg, Tensor df, Tensor dai, Tensor dag, Tensor dao, Tensor dk) -> Tensor");
  m.def("gru_approx_forward(Tensor P, float[] k, int b0) -> Tensor[]");
  m.def("gru_approx_backward(Tensor P, float[] k, int b0, Tensor dg, Tensor dcoef, Tensor ddiag) -> Tensor");
  m.def("lstm_approx_forward(Tensor z, float[] k, bool with_af) -> Tensor[]");
  m.def("lstm_approx_backward(Tensor z, float[] k, Tensor dg, Tensor df, Tensor dai, Tensor dag, Tensor daf, "
        "Tensor dk, Tensor dao) -> Tensor");
}

TORCH_LIBRARY_IMPL(rnnlens_view_terms, CPU, m) {
  m.impl("gru_forward", &gru_view_forward);
  m.impl("gru_backward", &gru_view_backward);
  m.impl("lstm_forward", &lstm_view_forward);
  m.impl("lstm_backward", &lstm_view_backward);
  m.impl("gru_approx_forward", &gru_approx_forward);
  m.impl("gru_approx_backward", &gru_approx_backward);
  m.impl("lstm_approx_forward", &lstm_approx_forward);
  m.impl("lstm_approx_backward", &lstm_approx_backward);
}
