// The activations of rnnlens's C++ kernels over a row of n values, shared by every kernel that
// includes this header (rnnlens/ops/cpp.py copies it beside each source and digests it with them).
//
//   tanh_of(x, out, n, scale)   out = tanh(scale * x)
//   sigmoid_of(x, out, n)       out = 1 / (1 + exp(-x))
//
// In float32 with AVX2 and FMA both are vectorised approximations. tanh is the rational
// minimax form Eigen uses (odd degree 13 over even degree 6 on [-7.905, 7.905]), x itself where
// |x| < 4e-4 and +-1 beyond 9.0109, where float32's own tanh is +-1: within 6 ulp (3.6e-7
// relative). exp is Cephes' expf (range reduction to [-ln2/2, ln2/2], a degree-5 polynomial,
// the power of two put in the exponent bits), about 1 ulp, inf above 88.376 and 0 below
// -88.376. SLEEF's 1-ulp tanh and exp, which libtorch carries and exports, cost several times
// more (a third of the RRNN(B) forward pass went to SLEEF's tanh). In float64: SLEEF's tanh
// and exp (1 ulp) with AVX2, std:: otherwise. A NaN gives NaN. x and out may be the same
// array (each value is read before its own is written, and no other).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
extern "C" __m256d Sleef_tanhd4_u10avx2(__m256d);
extern "C" __m256d Sleef_expd4_u10avx2(__m256d);
#endif

namespace rnnlens_vec {

constexpr float kClamp = 7.90531110763549805f;
constexpr float kAlpha[7] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                             5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                             4.89352455891786e-03f};
constexpr float kBeta[4] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                            4.89352518554385e-03f};

constexpr float kOne = 9.0109f;    // float32's tanh is +-1 exactly beyond here (torch's is too)

inline float tanh_scalar(float v) {
  if (std::isnan(v)) return v;
  if (v > kOne || v < -kOne) return v > 0 ? 1.0f : -1.0f;
  v = v > kClamp ? kClamp : (v < -kClamp ? -kClamp : v);
  if (v < 0.0004f && v > -0.0004f) return v;
  const float v2 = v * v;
  float p = kAlpha[0];
  for (int i = 1; i < 7; ++i) p = p * v2 + kAlpha[i];
  float q = kBeta[0];
  for (int i = 1; i < 4; ++i) q = q * v2 + kBeta[i];
  return p * v / q;
}

#if defined(__AVX2__) && defined(__FMA__)
inline __m256 tanh8(__m256 a) {
  const __m256 hi = _mm256_set1_ps(kClamp), lo = _mm256_set1_ps(-kClamp);
  const __m256 tiny = _mm256_set1_ps(0.0004f), sign = _mm256_set1_ps(-0.0f);
  const __m256 v = _mm256_max_ps(lo, _mm256_min_ps(hi, a));   // the second operand when either is NaN: NaN stays
  const __m256 v2 = _mm256_mul_ps(v, v);
  __m256 p = _mm256_set1_ps(kAlpha[0]);
  for (int k = 1; k < 7; ++k) p = _mm256_fmadd_ps(p, v2, _mm256_set1_ps(kAlpha[k]));
  p = _mm256_mul_ps(p, v);
  __m256 q = _mm256_set1_ps(kBeta[0]);
  for (int k = 1; k < 4; ++k) q = _mm256_fmadd_ps(q, v2, _mm256_set1_ps(kBeta[k]));
  const __m256 r = _mm256_div_ps(p, q);
  const __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), tiny, _CMP_LT_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(sign, a), _mm256_set1_ps(1.0f));
  const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(sign, a), _mm256_set1_ps(kOne), _CMP_GT_OQ);
  return _mm256_blendv_ps(_mm256_blendv_ps(r, v, small), one, big);
}

inline __m256 exp8(__m256 a) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-88.3762626647949f);
  __m256 x = _mm256_max_ps(lo, _mm256_min_ps(hi, a));
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
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  // beyond the range: inf above (so that 1 / (1 + exp(-x)) is 0 exactly, as torch's), 0 below
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(a, hi, _CMP_GT_OQ));
  return _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(a, lo, _CMP_LT_OQ));
}

inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_xor_ps(_mm256_set1_ps(-0.0f), x))));
}
#endif

inline void tanh_of(const float* x, float* out, int64_t n, float scale) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, tanh8(_mm256_mul_ps(s, _mm256_loadu_ps(x + i))));
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

inline void sigmoid_of(const float* x, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, sigmoid8(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

inline void sigmoid_of(const double* x, double* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256d one = _mm256_set1_pd(1.0);
  for (; i + 4 <= n; i += 4)
    _mm256_storeu_pd(out + i, _mm256_div_pd(one, _mm256_add_pd(one, Sleef_expd4_u10avx2(
                                                              _mm256_sub_pd(_mm256_setzero_pd(), _mm256_loadu_pd(x + i))))));
#endif
  for (; i < n; ++i) out[i] = 1.0 / (1.0 + std::exp(-x[i]));
}

}  // namespace rnnlens_vec
