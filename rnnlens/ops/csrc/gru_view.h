// One position of the GRU's first-order view (implicit-ngrams Table 2 with biases), shared by
// the view terms' pass (view_terms.cpp) and MVMA-G's fused loop over time (affine_scan.cpp).
// From P = [x_r, x_z, x_n] (x_* = W_i* x + b_i*) and b_hh = [b_hr, b_hz, b_hn]:
//   r = s(x_r + b_hr), z = s(x_z + b_hz), n = tanh(x_n + r b_hn), g = (1 - z) n, diag = z,
//   coef = [a_r, a_z, a_n] = [(1 - z)(1 - n^2) b_hn r (1 - r), -n z (1 - z), (1 - z)(1 - n^2) r]
#pragma once

#include <cstdint>

#include "vecmath.h"

namespace rnnlens_gru_view {

// r, z, n [H] of one position from its pr [3H]; v: scratch [H]
template <typename T>
inline void gates(const T* __restrict__ pr, const T* __restrict__ bhh, T* __restrict__ r, T* __restrict__ z,
                  T* __restrict__ n, T* __restrict__ v, int64_t H) {
  const T* __restrict__ bhn = bhh + 2 * H;
  for (int64_t j = 0; j < H; ++j) v[j] = pr[j] + bhh[j];
  rnnlens_vec::sigmoid_of(v, r, H);
  for (int64_t j = 0; j < H; ++j) v[j] = pr[H + j] + bhh[H + j];
  rnnlens_vec::sigmoid_of(v, z, H);
  for (int64_t j = 0; j < H; ++j) v[j] = pr[2 * H + j] + r[j] * bhn[j];
  rnnlens_vec::tanh_of(v, n, H, T(1));
}

// The gradient of one position's pre-activations, out [3H] = dL/d[x_r, x_z, x_n], from those of
// its terms: G = dL/dg [H], C = dL/dcoef [3H], D = dL/ddiag [H]; b_hh's gradient added to db [3H].
template <typename T>
inline void backward(const T* __restrict__ r, const T* __restrict__ z, const T* __restrict__ nn,
                     const T* __restrict__ bhh, const T* __restrict__ G, const T* __restrict__ C,
                     const T* __restrict__ D, T* __restrict__ out, T* __restrict__ db, int64_t H) {
  const T* __restrict__ bhn = bhh + 2 * H;
#pragma GCC ivdep
  for (int64_t j = 0; j < H; ++j) {
    const T n = nn[j], zz = z[j], rr = r[j], b = bhn[j];
    const T q = T(1) - n * n, sr = rr * (T(1) - rr), sz = zz * (T(1) - zz);
    const T dn = (T(1) - zz) * q;
    const T Gj = G[j], Dj = D[j], Cr = C[j], Cz = C[H + j], Cn = C[2 * H + j];
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

}  // namespace rnnlens_gru_view
