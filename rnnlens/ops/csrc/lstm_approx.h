// One value of the sequence-level paper's approximate LSTM forms (rnnlens/cells/ngram.py,
// LSTMApprox: approx, simplified, variant), shared by the terms' own pass (view_terms.cpp) and
// the fused loop over time (affine_scan.cpp). From z = [x^i, x^f, x^c, x^o] and the kind's nine
// constants q = (ff, f0, fi, fc, ai, ag, ko, aog, aov) (rnnlens/cells/approx_terms.py, LSTM_KINDS):
//   g_c = (x^i + 2) x^c / 4,  g_h = (x^o + 2) g_c / 4,  f = (ff x^f + f0 + fi x^i + fc x^c) / 4,
//   a_i = ai x^c / 4,  a_g = (ag x^i + 2) / 4,  k = (ko x^o + 2) / 4,
//   a_o = (aog g_c + aov (x^f + x^o) / 10) / 4,  a_f = x^f / 10 (the variant's alone)
#pragma once

namespace rnnlens_lstm_approx {

template <typename T>
struct Consts {
  T ff, f0, fi, fc, ai, ag, ko, aog, aov;
  explicit Consts(const double* k)
      : ff(T(k[0])), f0(T(k[1])), fi(T(k[2])), fc(T(k[3])), ai(T(k[4])), ag(T(k[5])), ko(T(k[6])), aog(T(k[7])),
        aov(T(k[8])) {}
};

template <typename T>
struct Terms {
  T gc, gh, f, ai, ag, af, k, ao;
};

template <typename T>
inline Terms<T> terms(const Consts<T>& q, T i, T fz, T c, T oz) {
  const T gc = T(0.25) * (i + T(2)) * c;
  return {gc,
          T(0.25) * (oz + T(2)) * gc,
          T(0.25) * (q.ff * fz + q.f0 + q.fi * i + q.fc * c),
          T(0.25) * q.ai * c,
          T(0.25) * (q.ag * i + T(2)),
          T(0.1) * fz,
          T(0.25) * (q.ko * oz + T(2)),
          T(0.25) * (q.aog * gc + T(0.1) * q.aov * (fz + oz))};
}

// The gradient of z's four values from those of the terms (daf: zero for the kinds without a_f).
template <typename T>
inline void backward(const Consts<T>& q, T i, T c, T oz, T dgc_, T dgh, T df, T dai, T dag, T daf, T dk, T dao,
                     T& dzi, T& dzf, T& dzc, T& dzo) {
  const T dgc = dgc_ + T(0.25) * (dgh * (oz + T(2)) + q.aog * dao);      // g_c's gradient, all paths
  dzi = T(0.25) * (dgc * c + q.fi * df + q.ag * dag);
  dzf = T(0.25) * (q.ff * df + T(0.1) * q.aov * dao) + T(0.1) * daf;
  dzc = T(0.25) * (dgc * (i + T(2)) + q.fc * df + q.ai * dai);
  dzo = T(0.25) * (dgh * T(0.25) * (i + T(2)) * c + q.ko * dk + T(0.1) * q.aov * dao);
}

}  // namespace rnnlens_lstm_approx
