// One position of the LSTM's first-order view at (c, h) = 0 (implicit-ngrams Appendix F with
// biases), shared by the view terms' pass (view_terms.cpp) and MVMA-L's fused loop over time
// (affine_scan.cpp). From z = [z_i, z_f, z_g, z_o] = W_ih x + b_ih + b_hh:
//   i, f, o = s(z_*), g = tanh(z_g), c = i g, and the terms
//   g_view = [c, o tanh(c)], f, a_i = g i (1 - i), a_g = i (1 - g^2), a_o = tanh(c) o (1 - o),
//   k = o (1 - tanh(c)^2)
#pragma once

#include <cstdint>

#include "vecmath.h"

namespace rnnlens_lstm_view {

// i, f, g, o and tanh(c) [H each] of one position from its z [4H]; c: scratch [H]
template <typename T>
inline void gates(const T* __restrict__ z, T* __restrict__ i, T* __restrict__ f, T* __restrict__ gg,
                  T* __restrict__ o, T* __restrict__ tc, T* __restrict__ c, int64_t H) {
  rnnlens_vec::sigmoid_of(z, i, H);
  rnnlens_vec::sigmoid_of(z + H, f, H);
  rnnlens_vec::tanh_of(z + 2 * H, gg, H, T(1));
  rnnlens_vec::sigmoid_of(z + 3 * H, o, H);
  for (int64_t j = 0; j < H; ++j) c[j] = i[j] * gg[j];
  rnnlens_vec::tanh_of(c, tc, H, T(1));
}

// The gradient of one value's pre-activations (dz_i, dz_f, dz_g, dz_o) from those of its terms:
// dgc, dgh (g_view's c and h parts), df, dai, dag, dao, dk; ii, ff, g0, oo, t = i, f, g, o, tanh(c).
template <typename T>
inline void backward(T ii, T ff, T g0, T oo, T t, T dgc, T dgh, T df, T dai, T dag, T dao, T dk, T& dzi, T& dzf,
                     T& dzg, T& dzo) {
  const T one_tc2 = T(1) - t * t, so = oo * (T(1) - oo), si = ii * (T(1) - ii), one_g2 = T(1) - g0 * g0;
  // through g_view's h part o tanh(c), a_o = tanh(c) o (1 - o) and k = o (1 - tanh(c)^2)
  const T dO = dgh * t + dao * t * (T(1) - T(2) * oo) + dk * one_tc2;
  const T dtc = dgh * oo + dao * so - T(2) * dk * oo * t;
  const T dc = dtc * one_tc2 + dgc;
  // through c = i g, a_i = g i (1 - i) and a_g = i (1 - g^2)
  const T di = dc * g0 + dai * g0 * (T(1) - T(2) * ii) + dag * one_g2;
  const T dgg = dc * ii + dai * si - T(2) * dag * ii * g0;
  dzi = di * si;
  dzf = df * ff * (T(1) - ff);
  dzg = dgg * one_g2;
  dzo = dO * so;
}

}  // namespace rnnlens_lstm_view
