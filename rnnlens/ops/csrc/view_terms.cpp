// The terms of the GRU's and the LSTM's first-order views (rnnlens/cells/classic.py) from their
// pre-activations, forward and backward, one fused pass over the positions each. The
// activations are vecmath.h's (vectorised approximations within a few ulp in float32; SLEEF's
// in float64). The Python forms in
// rnnlens/cells/view_terms.py are the reference the tests compare with this path.
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

#include "vecmath.h"

namespace {

using rnnlens_vec::sigmoid_of;
using rnnlens_vec::tanh_of;

constexpr int64_t kGrain = 16;   // positions per task

// ---------------------------------------------------------------------------------------------
template <typename T>
void gru_fwd(const T* P, const T* bhh, T* g, T* coef, T* diag, int64_t N, int64_t H) {
  const T* bhn = bhh + 2 * H;
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
    std::vector<T> v(H), w(H), nn(H);
    for (int64_t p = n0; p < n1; ++p) {
      const T* __restrict__ pr = P + p * 3 * H;
      const T* __restrict__ pz = pr + H;
      const T* __restrict__ xn = pr + 2 * H;
      T* __restrict__ r = coef + p * 3 * H;          // a_r's slot holds r until the end
      T* __restrict__ ar = r;
      T* __restrict__ az = r + H;
      T* __restrict__ an = r + 2 * H;
      T* __restrict__ z = diag + p * H;
      T* __restrict__ gp = g + p * H;
      for (int64_t j = 0; j < H; ++j) { v[j] = pr[j] + bhh[j]; w[j] = pz[j] + bhh[H + j]; }
      sigmoid_of(v.data(), r, H);
      sigmoid_of(w.data(), z, H);
      for (int64_t j = 0; j < H; ++j) v[j] = xn[j] + r[j] * bhn[j];
      tanh_of(v.data(), nn.data(), H, T(1));
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
  const T* bhn = bhh + 2 * H;
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), (N + kGrain - 1) / kGrain));
  std::vector<T> partial(nt * 3 * H, T(0));
  const int64_t chunk = (N + nt - 1) / nt;
  at::parallel_for(0, nt, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> r(H), z(H), v(H), nn(H);
    for (int64_t task = t0; task < t1; ++task) {
      T* __restrict__ db = partial.data() + task * 3 * H;
      for (int64_t p = task * chunk; p < std::min(N, (task + 1) * chunk); ++p) {
        const T* __restrict__ pr = P + p * 3 * H;
        for (int64_t j = 0; j < H; ++j) { v[j] = pr[j] + bhh[j]; nn[j] = pr[H + j] + bhh[H + j]; }
        sigmoid_of(v.data(), r.data(), H);
        sigmoid_of(nn.data(), z.data(), H);
        for (int64_t j = 0; j < H; ++j) v[j] = pr[2 * H + j] + r[j] * bhn[j];
        tanh_of(v.data(), nn.data(), H, T(1));
        const T* __restrict__ gg = G + p * H;
        const T* __restrict__ cr = C + p * 3 * H;
        const T* __restrict__ dd = D + p * H;
        T* __restrict__ out = dP + p * 3 * H;
        for (int64_t j = 0; j < H; ++j) {
          const T n = nn[j], zz = z[j], rr = r[j], b = bhn[j];
          const T q = T(1) - n * n, sr = rr * (T(1) - rr), sz = zz * (T(1) - zz);
          const T dn = (T(1) - zz) * q;
          const T Gj = gg[j], Dj = dd[j], Cr = cr[j], Cz = cr[H + j], Cn = cr[2 * H + j];
          const T dz = -Gj * n - Cr * q * b * sr - Cz * n * (T(1) - T(2) * zz) - Cn * q * rr + Dj;
          const T dnt = Gj * (T(1) - zz) - (Cr * b * sr + Cn * rr) * T(2) * n * (T(1) - zz) - Cz * sz;
          const T dv = dnt * q;
          const T dr = Cr * dn * b * (T(1) - T(2) * rr) + Cn * dn + dv * b;
          out[j] = dr * sr;
          out[H + j] = dz * sz;
          out[2 * H + j] = dv;
          db[j] += dr * sr;
          db[H + j] += dz * sz;
          db[2 * H + j] += Cr * dn * sr + dv * rr;
        }
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
      const T* __restrict__ z = Z + p * 4 * H;
      const int64_t o1 = p * H;
      sigmoid_of(z, i.data(), H);
      sigmoid_of(z + H, f + o1, H);
      tanh_of(z + 2 * H, gg.data(), H, T(1));
      sigmoid_of(z + 3 * H, o.data(), H);
      for (int64_t j = 0; j < H; ++j) c[j] = i[j] * gg[j];
      tanh_of(c.data(), tc.data(), H, T(1));
      T* __restrict__ g2 = gv + p * 2 * H;
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
      const T* __restrict__ z = Z + p * 4 * H;
      sigmoid_of(z, i.data(), H);
      sigmoid_of(z + H, f.data(), H);
      tanh_of(z + 2 * H, gg.data(), H, T(1));
      sigmoid_of(z + 3 * H, o.data(), H);
      for (int64_t j = 0; j < H; ++j) c[j] = i[j] * gg[j];
      tanh_of(c.data(), tc.data(), H, T(1));
      const int64_t o1 = p * H;
      T* __restrict__ out = dZ + p * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        const T ii = i[j], ff = f[j], g0 = gg[j], oo = o[j], t = tc[j];
        const T one_tc2 = T(1) - t * t, so = oo * (T(1) - oo), si = ii * (T(1) - ii), one_g2 = T(1) - g0 * g0;
        const T dgc = d.dg[p * 2 * H + j], dgh = d.dg[p * 2 * H + H + j];
        const T dao = d.dao[o1 + j], dk = d.dk[o1 + j], dai = d.dai[o1 + j], dag = d.dag[o1 + j];
        // through g_view's h part o tanh(c), a_o = tanh(c) o (1 - o) and k = o (1 - tanh(c)^2)
        const T dO = dgh * t + dao * t * (T(1) - T(2) * oo) + dk * one_tc2;
        const T dtc = dgh * oo + dao * so - T(2) * dk * oo * t;
        const T dc = dtc * one_tc2 + dgc;
        // through c = i g, a_i = g i (1 - i) and a_g = i (1 - g^2)
        const T di = dc * g0 + dai * g0 * (T(1) - T(2) * ii) + dag * one_g2;
        const T dgg = dc * ii + dai * si - T(2) * dag * ii * g0;
        out[j] = di * si;
        out[H + j] = d.df[o1 + j] * ff * (T(1) - ff);
        out[2 * H + j] = dgg * one_g2;
        out[3 * H + j] = dO * so;
      }
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

}  // namespace

TORCH_LIBRARY(rnnlens_view_terms, m) {
  m.def("gru_forward(Tensor P, Tensor b_hh) -> Tensor[]");
  m.def("gru_backward(Tensor P, Tensor b_hh, Tensor dg, Tensor dcoef, Tensor ddiag) -> Tensor[]");
  m.def("lstm_forward(Tensor z) -> Tensor[]");
  m.def("lstm_backward(Tensor z, Tensor dg, Tensor df, Tensor dai, Tensor dag, Tensor dao, Tensor dk) -> Tensor");
}

TORCH_LIBRARY_IMPL(rnnlens_view_terms, CPU, m) {
  m.impl("gru_forward", &gru_view_forward);
  m.impl("gru_backward", &gru_view_backward);
  m.impl("lstm_forward", &lstm_view_forward);
  m.impl("lstm_backward", &lstm_view_backward);
}
