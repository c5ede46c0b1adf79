// The terms of the GRU's and the LSTM's first-order views (rnnlens/cells/classic.py) from their
// pre-activations, forward and backward, one fused pass over the positions each. In float32
// the activations are vectorised approximations within a few ulp (`tanh_of`, `sigmoid_of`
// below); in float64, SLEEF's tanh (which libtorch carries and exports) and std::exp. The Python forms in
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

#if defined(__AVX2__)
#include <immintrin.h>
extern "C" __m256d Sleef_tanhd4_u10avx2(__m256d);
#endif

namespace {

// out = tanh(scale * x) in float32: Eigen's rational approximation (a 13/6 odd/even polynomial
// ratio on [-7.9, 7.9], within a few ulp of tanh), in a plain loop the compiler vectorises.
// SLEEF's tanh, which the rational scan uses for one tanh a step, costs about ten times more
// here, as torch.tanh does; these views take five or six activations a position.
constexpr float kClamp = 7.90531110763549805f;
constexpr float kAlpha[7] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                             5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                             4.89352455891786e-03f};
constexpr float kBeta[4] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                            4.89352518554385e-03f};

inline float tanh_scalar(float v) {
  v = v > kClamp ? kClamp : (v < -kClamp ? -kClamp : v);
  if (v < 0.0004f && v > -0.0004f) return v;
  const float v2 = v * v;
  float p = kAlpha[0];
  for (int i = 1; i < 7; ++i) p = p * v2 + kAlpha[i];
  float q = kBeta[0];
  for (int i = 1; i < 4; ++i) q = q * v2 + kBeta[i];
  return p * v / q;
}

inline void tanh_of(const float* __restrict__ x, float* __restrict__ out, int64_t n, float scale) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 s = _mm256_set1_ps(scale), hi = _mm256_set1_ps(kClamp), lo = _mm256_set1_ps(-kClamp);
  const __m256 tiny = _mm256_set1_ps(0.0004f), sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(s, _mm256_loadu_ps(x + i));
    v = _mm256_max_ps(lo, _mm256_min_ps(hi, v));
    const __m256 v2 = _mm256_mul_ps(v, v);
    __m256 p = _mm256_set1_ps(kAlpha[0]);
    for (int k = 1; k < 7; ++k) p = _mm256_fmadd_ps(p, v2, _mm256_set1_ps(kAlpha[k]));
    p = _mm256_mul_ps(p, v);
    __m256 q = _mm256_set1_ps(kBeta[0]);
    for (int k = 1; k < 4; ++k) q = _mm256_fmadd_ps(q, v2, _mm256_set1_ps(kBeta[k]));
    const __m256 r = _mm256_div_ps(p, q);
    const __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), tiny, _CMP_LT_OQ);
    _mm256_storeu_ps(out + i, _mm256_blendv_ps(r, v, small));
  }
#endif
  for (; i < n; ++i) out[i] = tanh_scalar(scale * x[i]);
}

inline void tanh_of(const double* x, double* out, int64_t n, double scale) {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256d s = _mm256_set1_pd(scale);
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(out + i, Sleef_tanhd4_u10avx2(_mm256_mul_pd(s, _mm256_loadu_pd(x + i))));
#endif
  for (; i < n; ++i) out[i] = std::tanh(scale * x[i]);
}

// out = sigmoid(x) = 1 / (1 + exp(-x)). float32: exp by Cephes' expf (range reduction to
// [-ln2/2, ln2/2], a degree-5 polynomial, the power of two put in the exponent bits), about
// 1 ulp; float64: std::exp.
#if defined(__AVX2__) && defined(__FMA__)
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.3f), _mm256_min_ps(_mm256_set1_ps(88.3f), x));
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, z, x), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
#endif

inline void sigmoid_of(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_xor_ps(neg, _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(out + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
#endif
  for (; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

inline void sigmoid_of(const double* x, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0 / (1.0 + std::exp(-x[i]));
}

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
