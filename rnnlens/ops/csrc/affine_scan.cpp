// The matrix-affine recurrences' loops over time (rnnlens/ops/affine.py) in C++ on the CPU:
// every step's product through oneDNN (the same call as rnnlens.ops.linear.mm) into a reused
// buffer, and the step's elementwise work in one fused pass, forward and backward. With the
// forward's step products kept, the reverse loop also forms the coefficients' gradients and
// the input of W's gradient as it goes; dW itself is one large product, in Python.
// rnnlens/ops/affine.py holds the contract and the PyTorch loops these replace, which the
// tests compare with this path.
//
// Structured (StructuredView):  s_t = sum_k coef_k * (W_k s_{t-1}) + diag * s_{t-1} + g
// LSTM block (LSTMView) on s = [c; h], U = W h_{t-1} split (i, [f,] g, o):
//     u = f * c + a_i * u_i + [a_f * u_f +] a_g * u_g,   c_t = u + g_c,
//     h_t = k * u + a_o * u_o + g_h
// GRU (torch's equations; rnnlens/ops/gated_loops.py): one product W_hh h_{t-1} a step, the gates
// in one pass, and a reverse loop that keeps the gate gradients for one dW_hh product.
// The LSTM block cells whose terms come from the input alone (MVMA-L, the approximate LSTM
// forms) form them at each step of the same kind of loop instead of in passes of their own.
// A pad (mask false) keeps the state; its gradient passes straight to the step before.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <type_traits>
#include <string_view>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "gru_view.h"
#include "lstm_approx.h"
#include "lstm_view.h"
#include "vecmath.h"

namespace {

// x[M,K] @ w[N,K]^T through oneDNN where the caller says it applies (float32), else at::mm.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, bool onednn) {
  if (onednn && x.scalar_type() == at::kFloat) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                           std::string_view, c10::List<std::optional<at::Scalar>>,
                                           std::optional<std::string_view>)>();
    return op.call(x, w, std::nullopt, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
  }
  return at::mm(x, w.t());
}

// An RNNLENS_ switch read as rnnlens/ops/switches.py reads one: off for 0, false, off or no, in
// any case, spaces around ignored; on when unset or anything else.
bool switched_off(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  const auto first = s.find_first_not_of(" \t\n\r"), last = s.find_last_not_of(" \t\n\r");
  s = first == std::string::npos ? "" : s.substr(first, last - first + 1);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "0" || s == "false" || s == "off" || s == "no";
}

// w laid out once for oneDNN's matmul with `batch` rows (float32, where `linear` takes the
// oneDNN route): reused at every step, so the per-step product skips the weight reorder
// (at [32,256] x [256,768] on 2 threads about 40 us a product instead of 70). Otherwise w.
// RNNLENS_ONEDNN_PACK=0 keeps the plain weight (read once).
at::Tensor pack(const at::Tensor& w, int64_t batch, bool onednn) {
  static const bool on = !switched_off("RNNLENS_ONEDNN_PACK");
  if (!on || !onednn || w.scalar_type() != at::kFloat) return w;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_reorder_linear_weight", "")
                       .typed<at::Tensor(const at::Tensor&, std::optional<int64_t>)>();
  return op.call(w, batch);
}

// The batch in chunks, one a thread, each running the whole loop over time with its own
// single-threaded products (its rows of the state are independent of the others'): no fork
// and join at every step, each product on a core of its own and the elementwise work of a
// step split the same way (the figures: rnnlens/ops/affine.py's docstring). One chunk (the
// whole batch, products threaded by oneDNN) on one thread, when a chunk would have fewer
// than kMinRows rows, or with RNNLENS_BATCH_SPLIT=0 (read at every call).
constexpr int64_t kMinRows = 8;

struct Chunks {
  int64_t n, size;                 // n chunks of `size` rows, the last one the rest
  at::Tensor W, W_last;            // the weight packed for a chunk's rows and the last one's
};

Chunks chunks_of(int64_t B, const at::Tensor& w, bool onednn) {
  int64_t n = std::min<int64_t>(at::get_num_threads(), B / kMinRows);
  if (n < 2 || at::in_parallel_region() || switched_off("RNNLENS_BATCH_SPLIT")) n = 1;
  const int64_t size = std::max<int64_t>(1, (B + n - 1) / n);
  n = std::max<int64_t>(1, (B + size - 1) / size);      // an empty batch: one empty chunk
  Chunks c{n, size, pack(w, size, onednn), at::Tensor()};
  const int64_t last = B - (n - 1) * size;
  c.W_last = last == size ? c.W : pack(w, last, onednn);
  return c;
}

// f(b0, b1, W) for every chunk, in parallel where there are several
template <typename F>
void over_chunks(int64_t B, const Chunks& c, const F& f) {
  if (c.n == 1) {
    f(int64_t(0), B, c.W);
    return;
  }
  at::parallel_for(0, c.n, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t k = c0; k < c1; ++k) f(k * c.size, std::min(B, (k + 1) * c.size), k == c.n - 1 ? c.W_last : c.W);
  });
}

// rows [b0, b1) in parallel when the step's work is large enough to pay for the threads (run
// inline inside a chunk, which is already one thread's)
template <typename F>
void rows(int64_t b0, int64_t b1, int64_t per_row, const F& f) {
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(per_row, 1));
  at::parallel_for(b0, b1, grain, f);
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void structured_fwd_impl(const at::Tensor& g, const at::Tensor& W, const at::Tensor& coef, const at::Tensor& diag,
                         const at::Tensor& s0, const at::Tensor& mask, at::Tensor& S, at::Tensor& U, bool onednn) {
  const int64_t B = g.size(0), Tn = g.size(1), H = g.size(2), KH = W.size(0), K = KH / H;
  at::Tensor s = s0.contiguous().clone();
  T* sp = s.data_ptr<T>();
  const T* gp = g.data_ptr<T>();
  const T* cp = coef.data_ptr<T>();
  const T* dp = diag.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* Sp = S.data_ptr<T>();
  T* Up = U.numel() ? U.data_ptr<T>() : nullptr;
  over_chunks(B, chunks_of(B, W, onednn), [&](int64_t c0, int64_t c1, const at::Tensor& Wc) {
  const at::Tensor sv = s.narrow(0, c0, c1 - c0);      // the chunk's rows of the running state
  for (int64_t t = 0; t < Tn; ++t) {
    at::Tensor u = linear(sv, Wc, onednn);
    const T* up = u.data_ptr<T>();
    rows(c0, c1, KH, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * Tn + t;
        T* __restrict__ st = sp + b * H;
        T* __restrict__ out = Sp + bt * H;
        const T* __restrict__ ub = up + (b - c0) * KH;
        if (Up) std::copy(ub, ub + KH, Up + bt * KH);
        if (mp && !mp[bt]) {
          std::copy(st, st + H, out);
          continue;
        }
        const T* __restrict__ gt = gp + bt * H;
        const T* __restrict__ dt = dp + bt * H;
        const T* __restrict__ ct = cp + bt * KH;
        for (int64_t j = 0; j < H; ++j) out[j] = gt[j] + dt[j] * st[j];
        for (int64_t k = 0; k < K; ++k) {
          const T* __restrict__ uk = ub + k * H;
          const T* __restrict__ ck = ct + k * H;
          for (int64_t j = 0; j < H; ++j) out[j] += uk[j] * ck[j];
        }
        std::copy(out, out + H, st);
      }
    });
  }
  });
}

std::vector<at::Tensor> structured_forward(const at::Tensor& g, const at::Tensor& W, const at::Tensor& coef,
                                           const at::Tensor& diag, const at::Tensor& s0, const at::Tensor& mask,
                                           bool keep_u, bool onednn) {
  const int64_t B = g.size(0), Tn = g.size(1), H = g.size(2), KH = W.size(0);
  at::Tensor S = at::empty({B, Tn, H}, g.options());
  at::Tensor U = keep_u ? at::empty({B, Tn, KH}, g.options()) : at::empty({0}, g.options());
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "structured_forward", [&] {
    structured_fwd_impl<scalar_t>(g.contiguous(), W.contiguous(), coef.contiguous(),
                                  diag.contiguous(), s0, mask, S, U, onednn);
  });
  return {S, U};
}

// With the step products U kept by the forward, the reverse loop also forms the batched
// gradients while each position's rows are at hand (no second pass over them): dcoef =
// U * d_in, ddiag = d_in * prev, and the step's product input coef * d_in written straight
// into G (time-major [T,B,KH], so that a chunk's rows of one step are contiguous) with prev
// beside it (time-major [T,B,H]) for dW = G^T prev. Without it (null), the loop alone.
template <typename T>
struct Grads {
  const T *S, *s0, *U;             // states [B,T,H], s0 [B,H], kept products [B,T,KH]
  T *dcoef, *ddiag, *prev;         // [B,T,KH], [B,T,H], [T,B,H]
  at::Tensor G;                    // [T,B,KH]: the steps' product inputs, in place of one [B,KH] buffer
};

// The reverse loop: d_in[:, t] = dL/d(new state_t) (zero at pads), delta = dL/ds_0.
template <typename T>
void structured_bwd_impl(const at::Tensor& dS, const at::Tensor& Wt, const at::Tensor& coef, const at::Tensor& diag,
                         const at::Tensor& mask, at::Tensor& d_in, at::Tensor& delta, bool onednn,
                         const Grads<T>* gr = nullptr) {
  const int64_t B = dS.size(0), Tn = dS.size(1), H = dS.size(2), KH = Wt.size(1), K = KH / H;
  // dL/ds_{t-1} = d + pre: d the step's product (tmp W), pre the rest, added where next read
  const at::Tensor tmp = gr ? gr->G : at::empty({B, KH}, dS.options());
  at::Tensor pre = at::zeros({B, H}, dS.options());
  T* tp = tmp.data_ptr<T>();
  T* pp = pre.data_ptr<T>();
  const T* dSp = dS.data_ptr<T>();
  const T* cp = coef.data_ptr<T>();
  const T* dp = diag.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* dinp = d_in.data_ptr<T>();
  over_chunks(B, chunks_of(B, Wt, onednn), [&](int64_t c0, int64_t c1, const at::Tensor& Wc) {
  at::Tensor d = at::zeros({c1 - c0, H}, dS.options());
  for (int64_t t = Tn - 1; t >= 0; --t) {
    const T* dd = d.data_ptr<T>();
    const int64_t step = gr ? t * B : 0;            // the step's rows of G (its own [B,KH] block)
    rows(c0, c1, KH, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * Tn + t;
        const T* __restrict__ ds = dSp + bt * H;
        const T* __restrict__ db = dd + (b - c0) * H;
        T* __restrict__ din = dinp + bt * H;
        T* __restrict__ pr = pp + b * H;
        T* __restrict__ tb = tp + (step + b) * KH;
        const T* sp = gr ? (t ? gr->S + (bt - 1) * H : gr->s0 + b * H) : nullptr;     // s_{t-1}
        if (mp && !mp[bt]) {                       // a pad: everything passes straight on
          for (int64_t j = 0; j < H; ++j) { pr[j] += ds[j] + db[j]; din[j] = T(0); }
          std::fill(tb, tb + KH, T(0));
          if (gr) {
            std::copy(sp, sp + H, gr->prev + (step + b) * H);
            std::fill(gr->dcoef + bt * KH, gr->dcoef + (bt + 1) * KH, T(0));
            std::fill(gr->ddiag + bt * H, gr->ddiag + (bt + 1) * H, T(0));
          }
          continue;
        }
        const T* __restrict__ dt = dp + bt * H;
        for (int64_t j = 0; j < H; ++j) {
          din[j] = ds[j] + db[j] + pr[j];
          pr[j] = dt[j] * din[j];
        }
        const T* __restrict__ ct = cp + bt * KH;
        for (int64_t k = 0; k < K; ++k)
          for (int64_t j = 0; j < H; ++j) tb[k * H + j] = ct[k * H + j] * din[j];
        if (gr) {
          T* __restrict__ pv = gr->prev + (step + b) * H;
          T* __restrict__ dg = gr->ddiag + bt * H;
          for (int64_t j = 0; j < H; ++j) { pv[j] = sp[j]; dg[j] = din[j] * sp[j]; }
          const T* __restrict__ u = gr->U + bt * KH;
          T* __restrict__ dc = gr->dcoef + bt * KH;
          for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < H; ++j) dc[k * H + j] = u[k * H + j] * din[j];
        }
      }
    });
    const at::Tensor tv = (gr ? tmp.select(0, t) : tmp).narrow(0, c0, c1 - c0);
    d = linear(tv, Wc, onednn);                     // tmp[B,KH] @ W[KH,H]
  }
  at::Tensor out = delta.narrow(0, c0, c1 - c0);
  at::add_out(out, d, pre.narrow(0, c0, c1 - c0));
  });
}

std::vector<at::Tensor> structured_backward(const at::Tensor& dS, const at::Tensor& W, const at::Tensor& coef,
                                            const at::Tensor& diag, const at::Tensor& mask, bool onednn) {
  const int64_t B = dS.size(0), H = dS.size(2);
  at::Tensor d_in = at::empty_like(dS, at::MemoryFormat::Contiguous);
  at::Tensor delta = at::zeros({B, H}, dS.options());
  at::Tensor Wt = W.t().contiguous();
  AT_DISPATCH_FLOATING_TYPES(dS.scalar_type(), "structured_backward", [&] {
    structured_bwd_impl<scalar_t>(dS.contiguous(), Wt, coef.contiguous(), diag.contiguous(), mask, d_in, delta,
                                  onednn);
  });
  return {d_in, delta};
}

// The reverse loop and the batched gradients in one pass (Grads above): {d_in, delta, dcoef,
// ddiag, G [T,B,KH], prev [T,B,H]}, with U the forward's kept products.
std::vector<at::Tensor> structured_backward_grads(const at::Tensor& dS, const at::Tensor& W, const at::Tensor& coef,
                                                  const at::Tensor& diag, const at::Tensor& mask, const at::Tensor& S,
                                                  const at::Tensor& s0, const at::Tensor& U, bool onednn) {
  const int64_t B = dS.size(0), Tn = dS.size(1), H = dS.size(2), KH = W.size(0);
  at::Tensor d_in = at::empty_like(dS, at::MemoryFormat::Contiguous);
  at::Tensor delta = at::zeros({B, H}, dS.options());
  at::Tensor Wt = W.t().contiguous();
  const at::Tensor Sc = S.contiguous(), s0c = s0.contiguous(), Uc = U.contiguous();
  at::Tensor dcoef = at::empty({B, Tn, KH}, dS.options()), ddiag = at::empty({B, Tn, H}, dS.options());
  at::Tensor G = at::empty({Tn, B, KH}, dS.options()), prev = at::empty({Tn, B, H}, dS.options());
  AT_DISPATCH_FLOATING_TYPES(dS.scalar_type(), "structured_backward_grads", [&] {
    const Grads<scalar_t> gr{Sc.data_ptr<scalar_t>(), s0c.data_ptr<scalar_t>(), Uc.data_ptr<scalar_t>(),
                             dcoef.data_ptr<scalar_t>(), ddiag.data_ptr<scalar_t>(), prev.data_ptr<scalar_t>(), G};
    structured_bwd_impl<scalar_t>(dS.contiguous(), Wt, coef.contiguous(), diag.contiguous(), mask, d_in, delta,
                                  onednn, &gr);
  });
  return {d_in, delta, dcoef, ddiag, G, prev};
}

// ---------------------------------------------------------------------------------------------
// LSTM block. gates: f, a_i, a_g, a_o, k [B,T,H] and a_f [B,T,H] or empty; W [K*H,H] rows
// (i, [f,] g, o), K = 3 without a_f, 4 with it.
template <typename T>
struct Gates {
  const T *f, *ai, *ag, *ao, *k, *af;
};

template <typename T>
Gates<T> gate_ptrs(const std::vector<at::Tensor>& gs) {
  auto p = [](const at::Tensor& t) -> const T* { return t.numel() ? t.data_ptr<T>() : nullptr; };
  return {p(gs[0]), p(gs[1]), p(gs[2]), p(gs[3]), p(gs[4]), p(gs[5])};
}

template <typename T>
void lstm_fwd_impl(const at::Tensor& g, const at::Tensor& W, const std::vector<at::Tensor>& gs, const at::Tensor& s0,
                   const at::Tensor& mask, at::Tensor& S, at::Tensor& U, bool onednn) {
  const int64_t B = g.size(0), Tn = g.size(1), H = g.size(2) / 2, KH = W.size(0), K = KH / H;
  // copies: the loop writes the running state in place, and s0 is the caller's
  at::Tensor c = s0.narrow(1, 0, H).clone(at::MemoryFormat::Contiguous);
  at::Tensor h = s0.narrow(1, H, H).clone(at::MemoryFormat::Contiguous);
  T* cp = c.data_ptr<T>();
  T* hp = h.data_ptr<T>();
  const Gates<T> G = gate_ptrs<T>(gs);
  const T* gp = g.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* Sp = S.data_ptr<T>();
  T* Up = U.numel() ? U.data_ptr<T>() : nullptr;
  const int64_t oi = 0, of = H, og = (K - 2) * H, oo = (K - 1) * H;
  over_chunks(B, chunks_of(B, W, onednn), [&](int64_t c0, int64_t c1, const at::Tensor& Wc) {
  const at::Tensor hv = h.narrow(0, c0, c1 - c0);      // the chunk's rows of the running h
  for (int64_t t = 0; t < Tn; ++t) {
    at::Tensor uk = linear(hv, Wc, onednn);
    const T* up = uk.data_ptr<T>();
    rows(c0, c1, KH, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * Tn + t;
        T* __restrict__ cb = cp + b * H;
        T* __restrict__ hb = hp + b * H;
        T* __restrict__ out = Sp + bt * 2 * H;
        const T* __restrict__ ub = up + (b - c0) * KH;
        if (Up) std::copy(ub, ub + KH, Up + bt * KH);
        if (mp && !mp[bt]) {
          std::copy(cb, cb + H, out);
          std::copy(hb, hb + H, out + H);
          continue;
        }
        const int64_t o = bt * H;
        const T* __restrict__ gc = gp + bt * 2 * H;
        const T* __restrict__ f = G.f + o;
        const T* __restrict__ ai = G.ai + o;
        const T* __restrict__ ag = G.ag + o;
        const T* __restrict__ ao = G.ao + o;
        const T* __restrict__ kk = G.k + o;
        const T* __restrict__ ui = ub + oi;            // out[:H] holds u first, then c_t = u + g_c
        const T* __restrict__ ug = ub + og;
        const T* __restrict__ uo = ub + oo;
        for (int64_t j = 0; j < H; ++j) out[j] = f[j] * cb[j] + ai[j] * ui[j] + ag[j] * ug[j];
        if (G.af) {
          const T* __restrict__ af = G.af + o;
          const T* __restrict__ uf = ub + of;
          for (int64_t j = 0; j < H; ++j) out[j] += af[j] * uf[j];
        }
#pragma GCC ivdep
        for (int64_t j = 0; j < H; ++j) {
          out[H + j] = gc[H + j] + kk[j] * out[j] + ao[j] * uo[j];
          out[j] += gc[j];
        }
        std::copy(out, out + H, cb);
        std::copy(out + H, out + 2 * H, hb);
      }
    });
  }
  });
}

std::vector<at::Tensor> lstm_forward(const at::Tensor& g, const at::Tensor& W, const at::Tensor& f,
                                     const at::Tensor& a_i, const at::Tensor& a_g, const at::Tensor& a_o,
                                     const at::Tensor& k, const at::Tensor& a_f, const at::Tensor& s0,
                                     const at::Tensor& mask, bool keep_u, bool onednn) {
  const int64_t B = g.size(0), Tn = g.size(1), S2 = g.size(2), KH = W.size(0);
  at::Tensor S = at::empty({B, Tn, S2}, g.options());
  at::Tensor U = keep_u ? at::empty({B, Tn, KH}, g.options()) : at::empty({0}, g.options());
  std::vector<at::Tensor> gs = {f.contiguous(), a_i.contiguous(), a_g.contiguous(), a_o.contiguous(),
                                k.contiguous(), a_f.contiguous()};
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "lstm_forward", [&] {
    lstm_fwd_impl<scalar_t>(g.contiguous(), W.contiguous(), gs, s0, mask, S, U, onednn);
  });
  return {S, U};
}

// The LSTM block's batched gradients formed inside its reverse loop (as Grads for the
// structured one): with the state before the step (c_prev, h_prev) and U the kept products,
//   du = dc + k dh, u = f c_prev + a_i u_i + [a_f u_f +] a_g u_g;
//   df = du c_prev, da_i = du u_i, [da_f = du u_f,] da_g = du u_g, da_o = dh u_o,
//   dk = dh u, G = [du a_i, [du a_f,] du a_g, dh a_o] (the step's product input; dW = G^T h_prev)
// out: df, da_i, da_g, da_o, dk, da_f (null without a_f), each [B,T,H]; G [T,B,KH] and
// hprev [T,B,H] time-major.
template <typename T>
struct LSTMGrads {
  const T *S, *s0, *U;             // states [B,T,2H], s0 [B,2H], kept products [B,T,KH]
  T* out[6];
  T* hprev;
  at::Tensor G;                    // [T,B,KH]: the steps' product inputs, in place of one [B,KH] buffer
};

template <typename T>
void lstm_bwd_impl(const at::Tensor& dS, const at::Tensor& Wt, const std::vector<at::Tensor>& gs,
                   const at::Tensor& mask, at::Tensor& d_in, at::Tensor& delta, bool onednn,
                   const LSTMGrads<T>* gr = nullptr) {
  const int64_t B = dS.size(0), Tn = dS.size(1), H = dS.size(2) / 2, KH = Wt.size(1), K = KH / H;
  const at::Tensor tmp = gr ? gr->G : at::empty({B, KH}, dS.options());
  // dL/d(c, h)_{t-1}: the c half in delta, the h half = d + pre_h (d the step's product tmp W),
  // added where it is next read
  at::Tensor pre_h = at::zeros({B, H}, dS.options());
  T* tp = tmp.data_ptr<T>();
  T* php = pre_h.data_ptr<T>();
  T* delp = delta.data_ptr<T>();
  const Gates<T> G = gate_ptrs<T>(gs);
  const T* dSp = dS.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* dinp = d_in.data_ptr<T>();
  const int64_t oi = 0, of = H, og = (K - 2) * H, oo = (K - 1) * H;
  over_chunks(B, chunks_of(B, Wt, onednn), [&](int64_t c0, int64_t c1, const at::Tensor& Wc) {
  at::Tensor d = at::zeros({c1 - c0, H}, dS.options());
  for (int64_t t = Tn - 1; t >= 0; --t) {
    const T* dd = d.data_ptr<T>();
    const int64_t step = gr ? t * B : 0;            // the step's rows of G (its own [B,KH] block)
    rows(c0, c1, KH, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * Tn + t;
        const T* __restrict__ ds = dSp + bt * 2 * H;
        T* __restrict__ del = delp + b * 2 * H;
        const T* __restrict__ db = dd + (b - c0) * H;
        T* __restrict__ din = dinp + bt * 2 * H;
        T* __restrict__ ph = php + b * H;
        T* __restrict__ tb = tp + (step + b) * KH;
        const int64_t o = bt * H;
        const T* sp = gr ? (t ? gr->S + (bt - 1) * 2 * H : gr->s0 + b * 2 * H) : nullptr;   // (c, h)_{t-1}
        if (mp && !mp[bt]) {
          for (int64_t j = 0; j < H; ++j) {
            del[j] += ds[j];
            ph[j] += db[j] + ds[H + j];
          }
          std::fill(din, din + 2 * H, T(0));
          std::fill(tb, tb + KH, T(0));
          if (gr) {
            std::copy(sp + H, sp + 2 * H, gr->hprev + (step + b) * H);
            for (int q = 0; q < 6; ++q)
              if (gr->out[q]) std::fill(gr->out[q] + o, gr->out[q] + o + H, T(0));
          }
          continue;
        }
        const T* __restrict__ kk = G.k + o;
        const T* __restrict__ ai = G.ai + o;
        const T* __restrict__ ag = G.ag + o;
        const T* __restrict__ ao = G.ao + o;
        const T* __restrict__ ff = G.f + o;
        T* __restrict__ ti = tb + oi;
        T* __restrict__ tg = tb + og;
        T* __restrict__ to = tb + oo;
#pragma GCC ivdep
        for (int64_t j = 0; j < H; ++j) {
          const T dc = ds[j] + del[j], dh = ds[H + j] + db[j] + ph[j];
          din[j] = dc;
          din[H + j] = dh;
          const T du = dc + kk[j] * dh;
          ti[j] = du * ai[j];
          tg[j] = du * ag[j];
          to[j] = dh * ao[j];
          del[j] = du * ff[j];
          ph[j] = T(0);
        }
        if (G.af) {
          const T* __restrict__ af = G.af + o;
          T* __restrict__ tf = tb + of;
          for (int64_t j = 0; j < H; ++j) tf[j] = (din[j] + kk[j] * din[H + j]) * af[j];
        }
        if (gr) {
          const T* __restrict__ cp = sp;
          const T* __restrict__ hp = sp + H;
          const T* __restrict__ u = gr->U + bt * KH;
          T *__restrict__ df = gr->out[0] + o, *__restrict__ dai = gr->out[1] + o, *__restrict__ dag = gr->out[2] + o,
                         *__restrict__ dao = gr->out[3] + o, *__restrict__ dk = gr->out[4] + o;
          T* __restrict__ hv = gr->hprev + (step + b) * H;
#pragma GCC ivdep
          for (int64_t j = 0; j < H; ++j) {
            const T dh = din[H + j], du = din[j] + kk[j] * dh;
            hv[j] = hp[j];
            df[j] = du * cp[j];
            dai[j] = du * u[oi + j];
            dag[j] = du * u[og + j];
            dao[j] = dh * u[oo + j];
            dk[j] = dh * (ff[j] * cp[j] + ai[j] * u[oi + j] + ag[j] * u[og + j]);
          }
          if (G.af) {
            const T* __restrict__ af = G.af + o;
            T* __restrict__ daf = gr->out[5] + o;
#pragma GCC ivdep
            for (int64_t j = 0; j < H; ++j) {
              const T du = din[j] + kk[j] * din[H + j];
              dk[j] += din[H + j] * af[j] * u[of + j];
              daf[j] = du * u[of + j];
            }
          }
        }
      }
    });
    const at::Tensor tv = (gr ? tmp.select(0, t) : tmp).narrow(0, c0, c1 - c0);
    d = linear(tv, Wc, onednn);                     // [B,KH] @ W[KH,H]
  }
  delta.narrow(0, c0, c1 - c0).narrow(1, H, H).copy_(d).add_(pre_h.narrow(0, c0, c1 - c0));
  });
}

std::vector<at::Tensor> lstm_backward(const at::Tensor& dS, const at::Tensor& W, const at::Tensor& f,
                                      const at::Tensor& a_i, const at::Tensor& a_g, const at::Tensor& a_o,
                                      const at::Tensor& k, const at::Tensor& a_f, const at::Tensor& mask,
                                      bool onednn) {
  const int64_t B = dS.size(0), S2 = dS.size(2);
  at::Tensor d_in = at::empty_like(dS, at::MemoryFormat::Contiguous);
  at::Tensor delta = at::zeros({B, S2}, dS.options());
  at::Tensor Wt = W.t().contiguous();
  std::vector<at::Tensor> gs = {f.contiguous(), a_i.contiguous(), a_g.contiguous(), a_o.contiguous(),
                                k.contiguous(), a_f.contiguous()};
  AT_DISPATCH_FLOATING_TYPES(dS.scalar_type(), "lstm_backward", [&] {
    lstm_bwd_impl<scalar_t>(dS.contiguous(), Wt, gs, mask, d_in, delta, onednn);
  });
  return {d_in, delta};
}

// The reverse loop and the batched gradients in one pass (LSTMGrads above): {d_in, delta, df,
// da_i, da_g, da_o, dk, da_f (empty without a_f), G [T,B,KH], h_prev [T,B,H]}.
std::vector<at::Tensor> lstm_backward_grads(const at::Tensor& dS, const at::Tensor& W, const at::Tensor& f,
                                            const at::Tensor& a_i, const at::Tensor& a_g, const at::Tensor& a_o,
                                            const at::Tensor& k, const at::Tensor& a_f, const at::Tensor& mask,
                                            const at::Tensor& S, const at::Tensor& s0, const at::Tensor& U,
                                            bool onednn) {
  const int64_t B = dS.size(0), Tn = dS.size(1), S2 = dS.size(2), H = S2 / 2, KH = W.size(0);
  at::Tensor d_in = at::empty_like(dS, at::MemoryFormat::Contiguous);
  at::Tensor delta = at::zeros({B, S2}, dS.options());
  at::Tensor Wt = W.t().contiguous();
  std::vector<at::Tensor> gs = {f.contiguous(), a_i.contiguous(), a_g.contiguous(), a_o.contiguous(),
                                k.contiguous(), a_f.contiguous()};
  const at::Tensor Sc = S.contiguous(), s0c = s0.contiguous(), Uc = U.contiguous();
  std::vector<at::Tensor> outs = {d_in, delta};
  for (int q = 0; q < 5; ++q) outs.push_back(at::empty({B, Tn, H}, dS.options()));
  outs.push_back(a_f.numel() ? at::empty({B, Tn, H}, dS.options()) : at::empty({0}, dS.options()));
  at::Tensor G = at::empty({Tn, B, KH}, dS.options()), hprev = at::empty({Tn, B, H}, dS.options());
  AT_DISPATCH_FLOATING_TYPES(dS.scalar_type(), "lstm_backward_grads", [&] {
    LSTMGrads<scalar_t> gr{Sc.data_ptr<scalar_t>(), s0c.data_ptr<scalar_t>(), Uc.data_ptr<scalar_t>(), {},
                           hprev.data_ptr<scalar_t>(), G};
    for (int q = 0; q < 6; ++q) gr.out[q] = outs[2 + q].numel() ? outs[2 + q].data_ptr<scalar_t>() : nullptr;
    lstm_bwd_impl<scalar_t>(dS.contiguous(), Wt, gs, mask, d_in, delta, onednn, &gr);
  });
  outs.push_back(G);
  outs.push_back(hprev);
  return outs;
}

// ---------------------------------------------------------------------------------------------
// GRU and LSTM, torch's equations on torch's layout (rnnlens/cells/classic.py, whose Python
// loops are the reference; rnnlens/ops/gated_loops.py). P [B,T,G*H] = W_ih x + b_ih, W = W_hh
// [G*H,H], bh = b_hh [G*H]; drop [B,H] (or empty): variational recurrent dropout, h_{t-1} * drop
// where it enters W_hh. A pad (mask false) keeps the state. The forward keeps each step's gate
// values in K [B,T,KW] for the backward (K empty: nothing kept, a scratch row instead).

// The forward loop they share (and MVMA-G's below): for each chunk of rows, at every step one
// product u = W (h * drop), then row(b, bt, u_b, k_b, s) for each row that is not a pad,
// held(b, bt) for each pad (k_b: the row's slot of K, zeroed at a pad; s: SW of scratch).
template <typename T, typename Row, typename Held>
void gated_forward(int64_t B, int64_t Tn, int64_t GH, int64_t KW, const at::Tensor& h, const at::Tensor& W,
                   const at::Tensor& drop, const bool* mp, T* Kp, bool onednn, const Row& row, const Held& held,
                   int64_t SW = 0) {
  over_chunks(B, chunks_of(B, W, onednn), [&](int64_t c0, int64_t c1, const at::Tensor& Wc) {
  const at::Tensor hv = h.narrow(0, c0, c1 - c0);       // the chunk's rows of the running h
  const at::Tensor dv = drop.numel() ? drop.narrow(0, c0, c1 - c0) : drop;
  for (int64_t t = 0; t < Tn; ++t) {
    const at::Tensor u = linear(dv.numel() ? hv * dv : hv, Wc, onednn);
    const T* up = u.data_ptr<T>();
    rows(c0, c1, GH, [&](int64_t b0, int64_t b1) {
      std::vector<T> scratch((Kp ? 0 : KW) + SW);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * Tn + t;
        T* k = Kp ? Kp + bt * KW : scratch.data() + SW;
        if (mp && !mp[bt]) {
          if (Kp) std::fill(k, k + KW, T(0));
          held(b, bt);
          continue;
        }
        row(b, bt, up + (b - c0) * GH, k, scratch.data());
      }
    });
  }
  });
}

// The reverse loop they share. At every step, for each row: h_prev * drop into hprev [T,B,H]
// (time-major, for dW_hh = G^T hprev); a pad zeroes its G [T,B,GH] and dP [B,T,PW] rows and
// calls pad(b, bt, db) (which passes the gradients on to the carries: the state is held);
// otherwise row(b, bt, h_{t-1}, db, g, dp, s) writes the row's G (the gradient of u) and dP
// (s: SW of scratch). db: the gradient the step after's product sends to h_t (already times
// drop). Then d = G_t W. At the end dh0 = d + hcarry (the h carry the callbacks keep). The h
// states are read at Hp + (b T + t) HS (h0p [B,H] before the first step).
template <typename T, typename Row, typename Pad>
void gated_backward(int64_t B, int64_t Tn, int64_t H, int64_t GH, const at::Tensor& Wt, const at::Tensor& drop,
                    const T* Hp, int64_t HS, const T* h0p, const bool* mp, at::Tensor& G, T* dPp, int64_t PW, T* hvp,
                    const at::Tensor& hcarry, at::Tensor& dh0, bool onednn, const Row& row, const Pad& pad,
                    int64_t SW = 0) {
  const T* drp = drop.numel() ? drop.data_ptr<T>() : nullptr;
  T* Gp = G.data_ptr<T>();
  over_chunks(B, chunks_of(B, Wt, onednn), [&](int64_t c0, int64_t c1, const at::Tensor& Wc) {
  at::Tensor d = at::zeros({c1 - c0, H}, Wt.options());
  for (int64_t t = Tn - 1; t >= 0; --t) {
    if (drp) d.mul_(drop.narrow(0, c0, c1 - c0));     // the product read h * drop
    const T* dd = d.data_ptr<T>();
    rows(c0, c1, GH, [&](int64_t b0, int64_t b1) {
      std::vector<T> scratch(SW);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * Tn + t;
        const T* __restrict__ hp = t ? Hp + (bt - 1) * HS : h0p + b * H;    // h_{t-1}
        T* __restrict__ hv = hvp + (t * B + b) * H;
        T* __restrict__ g = Gp + (t * B + b) * GH;
        T* __restrict__ dp = dPp + bt * PW;
        const T* __restrict__ db = dd + (b - c0) * H;
        if (drp) {
          const T* __restrict__ dr = drp + b * H;
          for (int64_t j = 0; j < H; ++j) hv[j] = hp[j] * dr[j];
        } else {
          std::copy(hp, hp + H, hv);
        }
        if (mp && !mp[bt]) {                     // the state is held: its gradient passes on
          std::fill(g, g + GH, T(0));
          std::fill(dp, dp + PW, T(0));
          pad(b, bt, db);
          continue;
        }
        row(b, bt, hp, db, g, dp, scratch.data());
      }
    });
    d = linear(G.select(0, t).narrow(0, c0, c1 - c0), Wc, onednn);   // G_t [B,GH] @ W [GH,H]
  }
  if (drp) d.mul_(drop.narrow(0, c0, c1 - c0));
  dh0.narrow(0, c0, c1 - c0).copy_(d).add_(hcarry.narrow(0, c0, c1 - c0));
  });
}

// GRU: u = W (h_{t-1} * drop), then
//   r = s(P_r + u_r + b_r),  z = s(P_z + u_z + b_z),  hn = u_n + b_n,
//   n = tanh(P_n + r * hn),  h_t = n + z * (h_{t-1} - n);   K = (r, z, n, hn), KW = 4H.
template <typename T>
void gru_fwd_impl(const at::Tensor& P, const at::Tensor& W, const at::Tensor& bh, const at::Tensor& h0,
                  const at::Tensor& mask, const at::Tensor& drop, at::Tensor& Hs, at::Tensor& K, bool onednn) {
  const int64_t B = P.size(0), Tn = P.size(1), H = h0.size(1), H3 = 3 * H;
  at::Tensor h = h0.clone(at::MemoryFormat::Contiguous);   // the running state, written in place
  T* hp = h.data_ptr<T>();
  const T* Pp = P.data_ptr<T>();
  const T* bp = bh.data_ptr<T>();
  T* Hp = Hs.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* Kp = K.numel() ? K.data_ptr<T>() : nullptr;
  gated_forward<T>(B, Tn, H3, 4 * H, h, W, drop, mp, Kp, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__ ub, T* __restrict__ k, T*) {
      T* __restrict__ hb = hp + b * H;
      T* __restrict__ out = Hp + bt * H;
      const T* __restrict__ pr = Pp + bt * H3;
      T* __restrict__ r = k;
      T* __restrict__ z = k + H;
      T* __restrict__ n = k + 2 * H;
      T* __restrict__ hn = k + 3 * H;
      for (int64_t j = 0; j < 2 * H; ++j) r[j] = pr[j] + ub[j] + bp[j];   // r and z, side by side
      rnnlens_vec::sigmoid_of(r, r, 2 * H);
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        hn[j] = ub[2 * H + j] + bp[2 * H + j];
        n[j] = pr[2 * H + j] + r[j] * hn[j];
      }
      rnnlens_vec::tanh_of(n, n, H, T(1));
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        out[j] = n[j] + z[j] * (hb[j] - n[j]);
        hb[j] = out[j];
      }
    },
    [&](int64_t b, int64_t bt) { std::copy(hp + b * H, hp + (b + 1) * H, Hp + bt * H); });
}

// -> {Hs [B,T,H] (the state after every step, held at pads), K [B,T,4H] (empty unless keep)}
std::vector<at::Tensor> gru_forward(const at::Tensor& P, const at::Tensor& W, const at::Tensor& bh,
                                    const at::Tensor& h0, const at::Tensor& mask, const at::Tensor& drop, bool keep,
                                    bool onednn) {
  TORCH_CHECK(P.dim() == 3 && h0.dim() == 2 && P.size(0) == h0.size(0) && P.size(2) == 3 * h0.size(1),
              "gru_forward: P must be [B,T,3H] and h0 [B,H]");
  TORCH_CHECK(W.size(0) == P.size(2) && W.size(1) == h0.size(1) && bh.numel() == P.size(2),
              "gru_forward: W must be [3H,H] and bh [3H]");
  const int64_t B = P.size(0), Tn = P.size(1), H = h0.size(1);
  at::Tensor Hs = at::empty({B, Tn, H}, P.options());
  at::Tensor K = keep ? at::empty({B, Tn, 4 * H}, P.options()) : at::empty({0}, P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "gru_forward", [&] {
    gru_fwd_impl<scalar_t>(P.contiguous(), W.contiguous(), bh.contiguous(), h0, mask, drop.contiguous(), Hs, K,
                           onednn);
  });
  return {Hs, K};
}

// GRU backward: dh = dL/dh_t from the outputs, the step after's product and the carry (z dh of
// the step after; dh itself across a pad), then
//   dn = dh (1 - z), dz = dh (h_{t-1} - n), da_n = dn (1 - n^2),
//   da_r = da_n hn r (1 - r), da_z = dz z (1 - z),
//   dP = (da_r, da_z, da_n), G = (da_r, da_z, da_n r),  dL/dh_{t-1} = z dh + (G W) * drop.
template <typename T>
void gru_bwd_impl(const at::Tensor& dH, const at::Tensor& Wt, const at::Tensor& K, const at::Tensor& Hs,
                  const at::Tensor& h0, const at::Tensor& mask, const at::Tensor& drop, at::Tensor& carry,
                  at::Tensor& dP, at::Tensor& dh0, at::Tensor& G, at::Tensor& hprev, bool onednn) {
  const int64_t B = dH.size(0), Tn = dH.size(1), H = dH.size(2), H3 = 3 * H;
  const T* dHp = dH.data_ptr<T>();
  const T* Kp = K.data_ptr<T>();
  T* cp = carry.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  const auto pad = [&](int64_t b, int64_t bt, const T* __restrict__ db) {
    T* __restrict__ cb = cp + b * H;
    const T* __restrict__ dy = dHp + bt * H;
    for (int64_t j = 0; j < H; ++j) cb[j] += dy[j] + db[j];
  };
  gated_backward<T>(B, Tn, H, H3, Wt, drop, Hs.data_ptr<T>(), H, h0.data_ptr<T>(), mp, G, dP.data_ptr<T>(), H3,
                    hprev.data_ptr<T>(), carry, dh0, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__ hp, const T* __restrict__ db, T* __restrict__ g,
        T* __restrict__ dp, T*) {
      const T* __restrict__ k = Kp + bt * 4 * H;
      const T* __restrict__ r = k;
      const T* __restrict__ z = k + H;
      const T* __restrict__ n = k + 2 * H;
      const T* __restrict__ hn = k + 3 * H;
      const T* __restrict__ dy = dHp + bt * H;
      T* __restrict__ cb = cp + b * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const T dh = dy[j] + db[j] + cb[j];
        const T dan = dh * (T(1) - z[j]) * (T(1) - n[j] * n[j]);
        const T dar = dan * hn[j] * r[j] * (T(1) - r[j]);
        const T daz = dh * (hp[j] - n[j]) * z[j] * (T(1) - z[j]);
        cb[j] = dh * z[j];
        dp[j] = g[j] = dar;
        dp[H + j] = g[H + j] = daz;
        dp[2 * H + j] = dan;
        g[2 * H + j] = dan * r[j];
      }
    }, pad);
}

// -> {dP [B,T,3H], dh0 [B,H], G [T,B,3H], h_prev * drop [T,B,H]}
std::vector<at::Tensor> gru_backward(const at::Tensor& dH, const at::Tensor& W,
                                     const at::Tensor& K, const at::Tensor& Hs, const at::Tensor& h0,
                                     const at::Tensor& mask, const at::Tensor& drop, bool onednn) {
  TORCH_CHECK(K.numel() == Hs.numel() * 4, "gru_backward needs the forward's K (keep=true)");
  const int64_t B = dH.size(0), Tn = dH.size(1), H = dH.size(2);
  at::Tensor dP = at::empty({B, Tn, 3 * H}, dH.options());
  at::Tensor dh0 = at::empty({B, H}, dH.options());
  at::Tensor G = at::empty({Tn, B, 3 * H}, dH.options()), hprev = at::empty({Tn, B, H}, dH.options());
  at::Tensor carry = at::zeros({B, H}, dH.options());
  AT_DISPATCH_FLOATING_TYPES(dH.scalar_type(), "gru_backward", [&] {
    gru_bwd_impl<scalar_t>(dH.contiguous(), W.t().contiguous(), K.contiguous(), Hs.contiguous(), h0.contiguous(),
                           mask, drop.contiguous(), carry, dP, dh0, G, hprev, onednn);
  });
  return {dP, dh0, G, hprev};
}

// LSTM: a = P + W (h_{t-1} * drop) + b_h,  i, f, o = s(a_i, a_f, a_o),  g = tanh(a_g),
//   c_t = f c_{t-1} + i g,  h_t = o tanh(c_t);   Cs [B,T,H] every c;  K = (i, f, g, o, tanh c_t).
template <typename T>
void lstm_cell_fwd_impl(const at::Tensor& P, const at::Tensor& W, const at::Tensor& bh, const at::Tensor& h0,
                        const at::Tensor& c0, const at::Tensor& mask, const at::Tensor& drop, at::Tensor& Hs,
                        at::Tensor& Cs, at::Tensor& K, bool onednn) {
  const int64_t B = P.size(0), Tn = P.size(1), H = h0.size(1), H4 = 4 * H;
  at::Tensor h = h0.clone(at::MemoryFormat::Contiguous);
  at::Tensor c = c0.clone(at::MemoryFormat::Contiguous);
  T* hp = h.data_ptr<T>();
  T* cp = c.data_ptr<T>();
  const T* Pp = P.data_ptr<T>();
  const T* bp = bh.data_ptr<T>();
  T* Hp = Hs.data_ptr<T>();
  T* Cp = Cs.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* Kp = K.numel() ? K.data_ptr<T>() : nullptr;
  gated_forward<T>(B, Tn, H4, 5 * H, h, W, drop, mp, Kp, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__ ub, T* __restrict__ k, T*) {
      T* __restrict__ hb = hp + b * H;
      T* __restrict__ cb = cp + b * H;
      T* __restrict__ ho = Hp + bt * H;
      T* __restrict__ co = Cp + bt * H;
      const T* __restrict__ pr = Pp + bt * H4;
      for (int64_t j = 0; j < H4; ++j) k[j] = pr[j] + ub[j] + bp[j];     // (i, f, g, o) pre-activations
      rnnlens_vec::sigmoid_of(k, k, 2 * H);                              // i, f
      rnnlens_vec::tanh_of(k + 2 * H, k + 2 * H, H, T(1));               // g
      rnnlens_vec::sigmoid_of(k + 3 * H, k + 3 * H, H);                  // o
      const T* __restrict__ ig = k;
      const T* __restrict__ fg = k + H;
      const T* __restrict__ gg = k + 2 * H;
      const T* __restrict__ og = k + 3 * H;
      T* __restrict__ tc = k + 4 * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        co[j] = fg[j] * cb[j] + ig[j] * gg[j];
        cb[j] = co[j];
      }
      rnnlens_vec::tanh_of(co, tc, H, T(1));
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        ho[j] = og[j] * tc[j];
        hb[j] = ho[j];
      }
    },
    [&](int64_t b, int64_t bt) {
      std::copy(hp + b * H, hp + (b + 1) * H, Hp + bt * H);
      std::copy(cp + b * H, cp + (b + 1) * H, Cp + bt * H);
    });
}

// -> {Hs, Cs [B,T,H], K [B,T,5H] (empty unless keep)}
std::vector<at::Tensor> lstm_cell_forward(const at::Tensor& P, const at::Tensor& W, const at::Tensor& bh,
                                          const at::Tensor& h0, const at::Tensor& c0, const at::Tensor& mask,
                                          const at::Tensor& drop, bool keep, bool onednn) {
  TORCH_CHECK(P.dim() == 3 && h0.dim() == 2 && c0.sizes() == h0.sizes() && P.size(0) == h0.size(0) &&
                  P.size(2) == 4 * h0.size(1),
              "lstm_cell_forward: P must be [B,T,4H], h0 and c0 [B,H]");
  TORCH_CHECK(W.size(0) == P.size(2) && W.size(1) == h0.size(1) && bh.numel() == P.size(2),
              "lstm_cell_forward: W must be [4H,H] and bh [4H]");
  const int64_t B = P.size(0), Tn = P.size(1), H = h0.size(1);
  at::Tensor Hs = at::empty({B, Tn, H}, P.options()), Cs = at::empty({B, Tn, H}, P.options());
  at::Tensor K = keep ? at::empty({B, Tn, 5 * H}, P.options()) : at::empty({0}, P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "lstm_cell_forward", [&] {
    lstm_cell_fwd_impl<scalar_t>(P.contiguous(), W.contiguous(), bh.contiguous(), h0, c0, mask, drop.contiguous(),
                                 Hs, Cs, K, onednn);
  });
  return {Hs, Cs, K};
}

// LSTM backward: dh = dL/dh_t from the outputs, the step after's product (times drop) and across
// pads; dc carried from the step after (dcT at the end). Then
//   dc += dh o (1 - tanh(c)^2),  da_o = dh tanh(c) o (1 - o),  da_i = dc g i (1 - i),
//   da_f = dc c_{t-1} f (1 - f),  da_g = dc i (1 - g^2),  dc_{t-1} = dc f,
//   dP = G = (da_i, da_f, da_g, da_o),  dL/dh_{t-1} = (G W) * drop.
template <typename T>
void lstm_cell_bwd_impl(const at::Tensor& dH, const at::Tensor& Wt, const at::Tensor& K, const at::Tensor& Hs,
                        const at::Tensor& Cs, const at::Tensor& h0, const at::Tensor& c0, const at::Tensor& mask,
                        const at::Tensor& drop, at::Tensor& dc, at::Tensor& hcar, at::Tensor& dP, at::Tensor& dh0,
                        at::Tensor& G, at::Tensor& hprev, bool onednn) {
  const int64_t B = dH.size(0), Tn = dH.size(1), H = dH.size(2), H4 = 4 * H;
  const T* dHp = dH.data_ptr<T>();
  const T* Kp = K.data_ptr<T>();
  const T* Cp = Cs.data_ptr<T>();
  const T* c0p = c0.data_ptr<T>();
  T* dcp = dc.data_ptr<T>();
  T* hcp = hcar.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  const auto pad = [&](int64_t b, int64_t bt, const T* __restrict__ db) {
    T* __restrict__ hc = hcp + b * H;
    const T* __restrict__ dy = dHp + bt * H;
    for (int64_t j = 0; j < H; ++j) hc[j] += dy[j] + db[j];
  };
  gated_backward<T>(B, Tn, H, H4, Wt, drop, Hs.data_ptr<T>(), H, h0.data_ptr<T>(), mp, G, dP.data_ptr<T>(), H4,
                    hprev.data_ptr<T>(), hcar, dh0, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__, const T* __restrict__ db, T* __restrict__ g,
        T* __restrict__ dp, T*) {
      const int64_t t = bt - b * Tn;
      const T* __restrict__ cpv = t ? Cp + (bt - 1) * H : c0p + b * H;    // c_{t-1}
      const T* __restrict__ k = Kp + bt * 5 * H;
      const T* __restrict__ ig = k;
      const T* __restrict__ fg = k + H;
      const T* __restrict__ gg = k + 2 * H;
      const T* __restrict__ og = k + 3 * H;
      const T* __restrict__ tc = k + 4 * H;
      const T* __restrict__ dy = dHp + bt * H;
      T* __restrict__ dcb = dcp + b * H;
      T* __restrict__ hc = hcp + b * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const T dh = dy[j] + db[j] + hc[j];
        const T dct = dcb[j] + dh * og[j] * (T(1) - tc[j] * tc[j]);
        dcb[j] = dct * fg[j];
        hc[j] = T(0);
        dp[j] = g[j] = dct * gg[j] * ig[j] * (T(1) - ig[j]);
        dp[H + j] = g[H + j] = dct * cpv[j] * fg[j] * (T(1) - fg[j]);
        dp[2 * H + j] = g[2 * H + j] = dct * ig[j] * (T(1) - gg[j] * gg[j]);
        dp[3 * H + j] = g[3 * H + j] = dh * tc[j] * og[j] * (T(1) - og[j]);
      }
    }, pad);
}

// -> {dP [B,T,4H], dh0, dc0 [B,H], G [T,B,4H], h_prev * drop [T,B,H]}
std::vector<at::Tensor> lstm_cell_backward(const at::Tensor& dH, const at::Tensor& dcT, const at::Tensor& W,
                                           const at::Tensor& K, const at::Tensor& Hs, const at::Tensor& Cs,
                                           const at::Tensor& h0, const at::Tensor& c0, const at::Tensor& mask,
                                           const at::Tensor& drop, bool onednn) {
  TORCH_CHECK(K.numel() == Hs.numel() * 5, "lstm_cell_backward needs the forward's K (keep=true)");
  const int64_t B = dH.size(0), Tn = dH.size(1), H = dH.size(2);
  at::Tensor dP = at::empty({B, Tn, 4 * H}, dH.options());
  at::Tensor dh0 = at::empty({B, H}, dH.options());
  at::Tensor G = at::empty({Tn, B, 4 * H}, dH.options()), hprev = at::empty({Tn, B, H}, dH.options());
  // dc: dL/dc_t carried back (dc0 at the end); hcar: dL/dh_t carried across pads
  at::Tensor dc = dcT.numel() ? dcT.clone(at::MemoryFormat::Contiguous) : at::zeros({B, H}, dH.options());
  at::Tensor hcar = at::zeros({B, H}, dH.options());
  AT_DISPATCH_FLOATING_TYPES(dH.scalar_type(), "lstm_cell_backward", [&] {
    lstm_cell_bwd_impl<scalar_t>(dH.contiguous(), W.t().contiguous(), K.contiguous(), Hs.contiguous(),
                                 Cs.contiguous(), h0.contiguous(), c0.contiguous(), mask, drop.contiguous(), dc,
                                 hcar, dP, dh0, G, hprev, onednn);
  });
  return {dP, dh0, dc, G, hprev};
}

// ---------------------------------------------------------------------------------------------
// MVMA-G (and MVM-G) in one loop over time: the GRU view's terms (gru_view.h) formed at each step
// from P = W_ih x + b_ih [B,T,3H] instead of in a pass of their own, and the step
//   s_t = a_r u_r + a_z u_z + a_n u_n + z s_{t-1} + first * g,   u = W_hh s_{t-1}  [3H],
// where first [B,T] (MVM: 1 at each row's first real token, else 0; empty: 1 everywhere). A pad
// keeps s. K [B,T,3H] keeps u for the backward, which forms r, z, n again from P.
template <typename T>
void mvma_gru_fwd_impl(const at::Tensor& P, const at::Tensor& W, const at::Tensor& bh, const at::Tensor& h0,
                       const at::Tensor& mask, const at::Tensor& first, at::Tensor& Hs, at::Tensor& K,
                       bool onednn) {
  const int64_t B = P.size(0), Tn = P.size(1), H = h0.size(1), H3 = 3 * H;
  at::Tensor h = h0.clone(at::MemoryFormat::Contiguous);
  T* hp = h.data_ptr<T>();
  const T* Pp = P.data_ptr<T>();
  const T* bp = bh.data_ptr<T>();
  const T* fp = first.numel() ? first.data_ptr<T>() : nullptr;
  T* Hp = Hs.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* Kp = K.numel() ? K.data_ptr<T>() : nullptr;
  gated_forward<T>(B, Tn, H3, H3, h, W, at::empty({0}, P.options()), mp, Kp, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__ ub, T* __restrict__ k, T* sc) {
      T* __restrict__ r = sc;
      T* __restrict__ z = sc + H;
      T* __restrict__ n = sc + 2 * H;
      rnnlens_gru_view::gates(Pp + bt * H3, bp, r, z, n, sc + 3 * H, H);
      if (Kp) std::copy(ub, ub + H3, k);
      const T f = fp ? fp[bt] : T(1);
      const T* __restrict__ bhn = bp + 2 * H;
      T* __restrict__ hb = hp + b * H;
      T* __restrict__ out = Hp + bt * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const T zz = z[j], nj = n[j], rr = r[j];
        const T dn = (T(1) - zz) * (T(1) - nj * nj);
        out[j] = dn * bhn[j] * rr * (T(1) - rr) * ub[j] - nj * zz * (T(1) - zz) * ub[H + j] + dn * rr * ub[2 * H + j] +
                 zz * hb[j] + f * (T(1) - zz) * nj;
        hb[j] = out[j];
      }
    },
    [&](int64_t b, int64_t bt) { std::copy(hp + b * H, hp + (b + 1) * H, Hp + bt * H); }, 4 * H);
}

// -> {Hs [B,T,H], K [B,T,3H] (empty unless keep)}
std::vector<at::Tensor> mvma_gru_forward(const at::Tensor& P, const at::Tensor& W, const at::Tensor& bh,
                                         const at::Tensor& h0, const at::Tensor& mask, const at::Tensor& first,
                                         bool keep, bool onednn) {
  TORCH_CHECK(P.dim() == 3 && h0.dim() == 2 && P.size(0) == h0.size(0) && P.size(2) == 3 * h0.size(1),
              "mvma_gru_forward: P must be [B,T,3H] and h0 [B,H]");
  TORCH_CHECK(W.size(0) == P.size(2) && W.size(1) == h0.size(1) && bh.numel() == P.size(2),
              "mvma_gru_forward: W must be [3H,H] and bh [3H]");
  const int64_t B = P.size(0), Tn = P.size(1), H = h0.size(1);
  at::Tensor Hs = at::empty({B, Tn, H}, P.options());
  at::Tensor K = keep ? at::empty({B, Tn, 3 * H}, P.options()) : at::empty({0}, P.options());
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "mvma_gru_forward", [&] {
    mvma_gru_fwd_impl<scalar_t>(P.contiguous(), W.contiguous(), bh.contiguous(), h0, mask, first.contiguous(), Hs,
                                K, onednn);
  });
  return {Hs, K};
}

// MVMA-G's reverse loop: dh from the outputs, the step after's product and the carry (z dh);
// G = dh (a_r, a_z, a_n) for the product and dW_hh; the terms' gradients dL/dg = first dh,
// dL/dcoef = dh u, dL/ddiag = dh s_{t-1} through gru_view.h's backward to dP, and b_hh's
// gradient summed per row into dbrows [B,3H] (the caller sums the rows).
template <typename T>
void mvma_gru_bwd_impl(const at::Tensor& dH, const at::Tensor& Wt, const at::Tensor& P, const at::Tensor& bh,
                       const at::Tensor& K, const at::Tensor& Hs, const at::Tensor& h0, const at::Tensor& mask,
                       const at::Tensor& first, at::Tensor& carry, at::Tensor& dP, at::Tensor& dbrows,
                       at::Tensor& dh0, at::Tensor& G, at::Tensor& hprev, bool onednn) {
  const int64_t B = dH.size(0), Tn = dH.size(1), H = dH.size(2), H3 = 3 * H;
  const T* dHp = dH.data_ptr<T>();
  const T* Pp = P.data_ptr<T>();
  const T* bp = bh.data_ptr<T>();
  const T* Kp = K.data_ptr<T>();
  const T* fp = first.numel() ? first.data_ptr<T>() : nullptr;
  T* cp = carry.data_ptr<T>();
  T* dbp = dbrows.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  const auto pad = [&](int64_t b, int64_t bt, const T* __restrict__ db) {
    T* __restrict__ cb = cp + b * H;
    const T* __restrict__ dy = dHp + bt * H;
    for (int64_t j = 0; j < H; ++j) cb[j] += dy[j] + db[j];
  };
  gated_backward<T>(B, Tn, H, H3, Wt, at::empty({0}, P.options()), Hs.data_ptr<T>(), H, h0.data_ptr<T>(), mp, G,
                    dP.data_ptr<T>(), H3, hprev.data_ptr<T>(), carry, dh0, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__ hp, const T* __restrict__ db, T* __restrict__ g,
        T* __restrict__ dp, T* sc) {
      T* __restrict__ r = sc;
      T* __restrict__ z = sc + H;
      T* __restrict__ n = sc + 2 * H;
      T* __restrict__ dg = sc + 4 * H;
      T* __restrict__ dc = sc + 5 * H;
      T* __restrict__ dd = sc + 8 * H;
      rnnlens_gru_view::gates(Pp + bt * H3, bp, r, z, n, sc + 3 * H, H);
      const T* __restrict__ u = Kp + bt * H3;
      const T* __restrict__ dy = dHp + bt * H;
      const T* __restrict__ bhn = bp + 2 * H;
      T* __restrict__ cb = cp + b * H;
      const T f = fp ? fp[bt] : T(1);
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const T dh = dy[j] + db[j] + cb[j];
        const T zz = z[j], nj = n[j], rr = r[j];
        const T dn = (T(1) - zz) * (T(1) - nj * nj);
        cb[j] = dh * zz;
        g[j] = dh * dn * bhn[j] * rr * (T(1) - rr);
        g[H + j] = -dh * nj * zz * (T(1) - zz);
        g[2 * H + j] = dh * dn * rr;
        dg[j] = dh * f;
        dc[j] = dh * u[j];
        dc[H + j] = dh * u[H + j];
        dc[2 * H + j] = dh * u[2 * H + j];
        dd[j] = dh * hp[j];
      }
      rnnlens_gru_view::backward(r, z, n, bp, dg, dc, dd, dp, dbp + b * H3, H);
    }, pad, 9 * H);
}

// -> {dP [B,T,3H], dbrows [B,3H], dh0 [B,H], G [T,B,3H], h_prev [T,B,H]}
std::vector<at::Tensor> mvma_gru_backward(const at::Tensor& dH, const at::Tensor& W, const at::Tensor& P,
                                          const at::Tensor& bh, const at::Tensor& K, const at::Tensor& Hs,
                                          const at::Tensor& h0, const at::Tensor& mask, const at::Tensor& first,
                                          bool onednn) {
  TORCH_CHECK(K.numel() == Hs.numel() * 3, "mvma_gru_backward needs the forward's K (keep=true)");
  const int64_t B = dH.size(0), Tn = dH.size(1), H = dH.size(2);
  at::Tensor dP = at::empty({B, Tn, 3 * H}, dH.options());
  at::Tensor dbrows = at::zeros({B, 3 * H}, dH.options());
  at::Tensor dh0 = at::empty({B, H}, dH.options());
  at::Tensor G = at::empty({Tn, B, 3 * H}, dH.options()), hprev = at::empty({Tn, B, H}, dH.options());
  at::Tensor carry = at::zeros({B, H}, dH.options());
  AT_DISPATCH_FLOATING_TYPES(dH.scalar_type(), "mvma_gru_backward", [&] {
    mvma_gru_bwd_impl<scalar_t>(dH.contiguous(), W.t().contiguous(), P.contiguous(), bh.contiguous(), K.contiguous(),
                                Hs.contiguous(), h0.contiguous(), mask, first.contiguous(), carry, dP, dbrows, dh0,
                                G, hprev, onednn);
  });
  return {dP, dbrows, dh0, G, hprev};
}

// ---------------------------------------------------------------------------------------------
// The LSTM block view's cells in one loop over time: MVMA-L (and MVM-L), whose view terms are
// the LSTM's first-order view (lstm_view.h), and the sequence-level paper's approximate LSTM
// forms (lstm_approx.h), their terms formed at each step from Z [B,T,4H] (MVMA-L: W_ih x +
// b_ih + b_hh; the approximate forms: W_ih x + b_ih). The block step on s = [c; h] with
// U = Wu h_{t-1} (Wu = [W_hi; W_hg; W_ho] [3H,H], and W_hf below them where the kind has an a_f
// term: NU = 4H; MVMA-L's W_hf multiplies c = 0 in the view),
//   u = f c_{t-1} + a_i u_i + a_g u_g [+ a_f u_f],  c_t = u + first * g_c,
//   h_t = k u + a_o u_o + first * g_h
// (first as MVMA-G's; 1 without it). A pad keeps (c, h). Ss [B,T,2H] every state [c; h];
// K [B,T,NU] keeps U for the backward, which forms the terms again from Z.
//
// The terms' policies: prep(z, sc) once a row and step (MVMA-L: the gates into scratch),
// at(z, sc, j) the terms of value j, grad(...) z's gradient from those of the terms.
template <typename T>
struct MvmaLstmTerms {
  int64_t H;
  static constexpr int64_t kScratch = 6;
  void prep(const T* z, T* sc) const {
    rnnlens_lstm_view::gates(z, sc, sc + H, sc + 2 * H, sc + 3 * H, sc + 4 * H, sc + 5 * H, H);
  }
  rnnlens_lstm_approx::Terms<T> at(const T*, const T* sc, int64_t j) const {
    const T ii = sc[j], ff = sc[H + j], g0 = sc[2 * H + j], oo = sc[3 * H + j], t = sc[4 * H + j];
    return {sc[5 * H + j], oo * t, ff, g0 * ii * (T(1) - ii), ii * (T(1) - g0 * g0), T(0), oo * (T(1) - t * t),
            t * oo * (T(1) - oo)};
  }
  void grad(const T*, const T* sc, int64_t j, T dgc, T dgh, T df, T dai, T dag, T, T dk, T dao, T* dz) const {
    rnnlens_lstm_view::backward(sc[j], sc[H + j], sc[2 * H + j], sc[3 * H + j], sc[4 * H + j], dgc, dgh, df, dai, dag,
                                dao, dk, dz[j], dz[H + j], dz[2 * H + j], dz[3 * H + j]);
  }
};

template <typename T>
struct ApproxLstmTerms {
  int64_t H;
  rnnlens_lstm_approx::Consts<T> q;
  static constexpr int64_t kScratch = 0;
  void prep(const T*, T*) const {}
  rnnlens_lstm_approx::Terms<T> at(const T* z, const T*, int64_t j) const {
    return rnnlens_lstm_approx::terms(q, z[j], z[H + j], z[2 * H + j], z[3 * H + j]);
  }
  void grad(const T* z, const T*, int64_t j, T dgc, T dgh, T df, T dai, T dag, T daf, T dk, T dao, T* dz) const {
    rnnlens_lstm_approx::backward(q, z[j], z[2 * H + j], z[3 * H + j], dgc, dgh, df, dai, dag, daf, dk, dao, dz[j],
                                  dz[H + j], dz[2 * H + j], dz[3 * H + j]);
  }
};

template <typename T, bool AF, typename Pol>
void lstm_block_fwd_impl(const at::Tensor& Z, const at::Tensor& Wu, const at::Tensor& c0, const at::Tensor& h0,
                         const at::Tensor& mask, const at::Tensor& first, at::Tensor& Ss, at::Tensor& K, bool onednn,
                         const Pol& pol) {
  const int64_t B = Z.size(0), Tn = Z.size(1), H = h0.size(1), NU = (AF ? 4 : 3) * H;
  at::Tensor h = h0.clone(at::MemoryFormat::Contiguous);
  at::Tensor c = c0.clone(at::MemoryFormat::Contiguous);
  T* hp = h.data_ptr<T>();
  T* cp = c.data_ptr<T>();
  const T* Zp = Z.data_ptr<T>();
  const T* fp = first.numel() ? first.data_ptr<T>() : nullptr;
  T* Sp = Ss.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  T* Kp = K.numel() ? K.data_ptr<T>() : nullptr;
  gated_forward<T>(B, Tn, NU, NU, h, Wu, at::empty({0}, Z.options()), mp, Kp, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__ ub, T* __restrict__ k, T* sc) {
      const T* __restrict__ z = Zp + bt * 4 * H;
      pol.prep(z, sc);
      if (Kp) std::copy(ub, ub + NU, k);
      const T f = fp ? fp[bt] : T(1);
      T* __restrict__ hb = hp + b * H;
      T* __restrict__ cb = cp + b * H;
      T* __restrict__ out = Sp + bt * 2 * H;
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const auto m = pol.at(z, sc, j);
        T u = m.f * cb[j] + m.ai * ub[j] + m.ag * ub[H + j];
        if constexpr (AF) u += m.af * ub[3 * H + j];
        out[j] = u + f * m.gc;
        out[H + j] = m.k * u + m.ao * ub[2 * H + j] + f * m.gh;
        cb[j] = out[j];
        hb[j] = out[H + j];
      }
    },
    [&](int64_t b, int64_t bt) {
      std::copy(cp + b * H, cp + (b + 1) * H, Sp + bt * 2 * H);
      std::copy(hp + b * H, hp + (b + 1) * H, Sp + bt * 2 * H + H);
    }, Pol::kScratch * H);
}

// Runs run(AF, policy) with the terms k names: empty, MVMA-L's; else an approximate form's nine
// constants (lstm_approx.h), with a_f where af.
template <typename T, typename F>
void with_terms(c10::ArrayRef<double> k, int64_t H, bool af, const F& run) {
  TORCH_CHECK(k.empty() || k.size() == 9, "lstm_block: MVMA-L's terms (no constants) or an approximate form's 9");
  TORCH_CHECK(!af || !k.empty(), "lstm_block: MVMA-L's view has no a_f term");
  if (k.empty()) {
    run(std::false_type{}, MvmaLstmTerms<T>{H});
  } else if (af) {
    run(std::true_type{}, ApproxLstmTerms<T>{H, rnnlens_lstm_approx::Consts<T>(k.data())});
  } else {
    run(std::false_type{}, ApproxLstmTerms<T>{H, rnnlens_lstm_approx::Consts<T>(k.data())});
  }
}

// -> {Ss [B,T,2H], K [B,T,NU] (empty unless keep)}
std::vector<at::Tensor> lstm_block_forward(const at::Tensor& Z, const at::Tensor& Wu, const at::Tensor& c0,
                                           const at::Tensor& h0, const at::Tensor& mask, const at::Tensor& first,
                                           c10::ArrayRef<double> k, bool keep, bool onednn) {
  TORCH_CHECK(Z.dim() == 3 && h0.dim() == 2 && c0.sizes() == h0.sizes() && Z.size(0) == h0.size(0) &&
                  Z.size(2) == 4 * h0.size(1),
              "lstm_block_forward: Z must be [B,T,4H], c0 and h0 [B,H]");
  const int64_t B = Z.size(0), Tn = Z.size(1), H = h0.size(1), NU = Wu.size(0);
  TORCH_CHECK((NU == 3 * H || NU == 4 * H) && Wu.size(1) == H, "lstm_block_forward: Wu must be [3H,H] or [4H,H]");
  at::Tensor Ss = at::empty({B, Tn, 2 * H}, Z.options());
  at::Tensor K = keep ? at::empty({B, Tn, NU}, Z.options()) : at::empty({0}, Z.options());
  AT_DISPATCH_FLOATING_TYPES(Z.scalar_type(), "lstm_block_forward", [&] {
    with_terms<scalar_t>(k, H, NU == 4 * H, [&](auto af, const auto& pol) {
      lstm_block_fwd_impl<scalar_t, decltype(af)::value>(Z.contiguous(), Wu.contiguous(), c0, h0, mask,
                                                         first.contiguous(), Ss, K, onednn, pol);
    });
  });
  return {Ss, K};
}

// The reverse loop: dc = dL/dc_t from the states and the carry (du f of the step after),
// dh = dL/dh_t from the states, the step after's product and across pads; du = dc + k dh;
// G = (du a_i, du a_g, dh a_o [, du a_f]) for the product and dWu; the terms' gradients
// (dL/dg_view = first (dc, dh), df = du c_{t-1}, da_i = du u_i, da_g = du u_g, da_f = du u_f,
// da_o = dh u_o, dk = dh u) through the policy's grad to dZ.
template <typename T, bool AF, typename Pol>
void lstm_block_bwd_impl(const at::Tensor& dS, const at::Tensor& Wut, const at::Tensor& Z, const at::Tensor& K,
                         const at::Tensor& Ss, const at::Tensor& c0, const at::Tensor& h0, const at::Tensor& mask,
                         const at::Tensor& first, at::Tensor& dcar, at::Tensor& hcar, at::Tensor& dZ,
                         at::Tensor& dh0, at::Tensor& G, at::Tensor& hprev, bool onednn, const Pol& pol) {
  const int64_t B = dS.size(0), Tn = dS.size(1), H = dS.size(2) / 2, NU = (AF ? 4 : 3) * H;
  const T* dSp = dS.data_ptr<T>();
  const T* Zp = Z.data_ptr<T>();
  const T* Kp = K.data_ptr<T>();
  const T* Sp = Ss.data_ptr<T>();
  const T* c0p = c0.data_ptr<T>();
  const T* fp = first.numel() ? first.data_ptr<T>() : nullptr;
  T* dcp = dcar.data_ptr<T>();
  T* hcp = hcar.data_ptr<T>();
  const bool* mp = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  const auto pad = [&](int64_t b, int64_t bt, const T* __restrict__ db) {
    T* __restrict__ dc = dcp + b * H;
    T* __restrict__ hc = hcp + b * H;
    const T* __restrict__ dy = dSp + bt * 2 * H;
    for (int64_t j = 0; j < H; ++j) {
      dc[j] += dy[j];
      hc[j] += dy[H + j] + db[j];
    }
  };
  gated_backward<T>(B, Tn, H, NU, Wut, at::empty({0}, Z.options()), Sp + H, 2 * H, h0.data_ptr<T>(), mp, G,
                    dZ.data_ptr<T>(), 4 * H, hprev.data_ptr<T>(), hcar, dh0, onednn,
    [&](int64_t b, int64_t bt, const T* __restrict__, const T* __restrict__ db, T* __restrict__ g,
        T* __restrict__ dz, T* sc) {
      const T* __restrict__ z = Zp + bt * 4 * H;
      pol.prep(z, sc);
      const int64_t t = bt - b * Tn;
      const T* __restrict__ cpv = t ? Sp + (bt - 1) * 2 * H : c0p + b * H;    // c_{t-1}
      const T* __restrict__ u = Kp + bt * NU;
      const T* __restrict__ dy = dSp + bt * 2 * H;
      T* __restrict__ dcb = dcp + b * H;
      T* __restrict__ hc = hcp + b * H;
      const T f = fp ? fp[bt] : T(1);
#pragma GCC ivdep
      for (int64_t j = 0; j < H; ++j) {
        const auto m = pol.at(z, sc, j);
        const T dc = dy[j] + dcb[j], dh = dy[H + j] + db[j] + hc[j];
        const T du = dc + m.k * dh;
        hc[j] = T(0);
        dcb[j] = du * m.f;
        g[j] = du * m.ai;
        g[H + j] = du * m.ag;
        g[2 * H + j] = dh * m.ao;
        T uu = m.f * cpv[j] + m.ai * u[j] + m.ag * u[H + j];
        T daf = T(0);
        if constexpr (AF) {
          g[3 * H + j] = du * m.af;
          uu += m.af * u[3 * H + j];
          daf = du * u[3 * H + j];
        }
        pol.grad(z, sc, j, dc * f, dh * f, du * cpv[j], du * u[j], du * u[H + j], daf, dh * uu, dh * u[2 * H + j],
                 dz);
      }
    }, pad, Pol::kScratch * H);
}

// -> {dZ [B,T,4H], dc0, dh0 [B,H], G [T,B,NU], h_prev [T,B,H]}
std::vector<at::Tensor> lstm_block_backward(const at::Tensor& dS, const at::Tensor& Wu, const at::Tensor& Z,
                                            const at::Tensor& K, const at::Tensor& Ss, const at::Tensor& c0,
                                            const at::Tensor& h0, const at::Tensor& mask, const at::Tensor& first,
                                            c10::ArrayRef<double> k, bool onednn) {
  const int64_t B = dS.size(0), Tn = dS.size(1), H = dS.size(2) / 2, NU = Wu.size(0);
  TORCH_CHECK(K.numel() * 2 * H == Ss.numel() * NU, "lstm_block_backward needs the forward's K (keep=true)");
  at::Tensor dZ = at::empty({B, Tn, 4 * H}, dS.options());
  at::Tensor dh0 = at::empty({B, H}, dS.options());
  at::Tensor G = at::empty({Tn, B, NU}, dS.options()), hprev = at::empty({Tn, B, H}, dS.options());
  at::Tensor dcar = at::zeros({B, H}, dS.options()), hcar = at::zeros({B, H}, dS.options());
  AT_DISPATCH_FLOATING_TYPES(dS.scalar_type(), "lstm_block_backward", [&] {
    with_terms<scalar_t>(k, H, NU == 4 * H, [&](auto af, const auto& pol) {
      lstm_block_bwd_impl<scalar_t, decltype(af)::value>(
          dS.contiguous(), Wu.t().contiguous(), Z.contiguous(), K.contiguous(), Ss.contiguous(), c0.contiguous(),
          h0.contiguous(), mask, first.contiguous(), dcar, hcar, dZ, dh0, G, hprev, onednn, pol);
    });
  });
  return {dZ, dcar, dh0, G, hprev};
}

}  // namespace

TORCH_LIBRARY(rnnlens_affine_scan, m) {
  m.def("structured_forward(Tensor g, Tensor W, Tensor coef, Tensor diag, Tensor s0, Tensor mask, bool keep_u, "
        "bool onednn) -> Tensor[]");
  m.def("structured_backward(Tensor dS, Tensor W, Tensor coef, Tensor diag, Tensor mask, bool onednn) -> Tensor[]");
  m.def("lstm_forward(Tensor g, Tensor W, Tensor f, Tensor a_i, Tensor a_g, Tensor a_o, Tensor k, Tensor a_f, "
        "Tensor s0, Tensor mask, bool keep_u, bool onednn) -> Tensor[]");
  m.def("lstm_backward(Tensor dS, Tensor W, Tensor f, Tensor a_i, Tensor a_g, Tensor a_o, Tensor k, Tensor a_f, "
        "Tensor mask, bool onednn) -> Tensor[]");
  m.def("structured_backward_grads(Tensor dS, Tensor W, Tensor coef, Tensor diag, Tensor mask, Tensor S, "
        "Tensor s0, Tensor U, bool onednn) -> Tensor[]");
  m.def("lstm_backward_grads(Tensor dS, Tensor W, Tensor f, Tensor a_i, Tensor a_g, Tensor a_o, Tensor k, "
        "Tensor a_f, Tensor mask, Tensor S, Tensor s0, Tensor U, bool onednn) -> Tensor[]");
  m.def("gru_forward(Tensor P, Tensor W, Tensor bh, Tensor h0, Tensor mask, Tensor drop, bool keep, bool onednn) "
        "-> Tensor[]");
  m.def("gru_backward(Tensor dH, Tensor W, Tensor K, Tensor Hs, Tensor h0, Tensor mask, Tensor drop, "
        "bool onednn) -> Tensor[]");
  m.def("lstm_cell_forward(Tensor P, Tensor W, Tensor bh, Tensor h0, Tensor c0, Tensor mask, Tensor drop, bool keep, "
        "bool onednn) -> Tensor[]");
  m.def("mvma_gru_forward(Tensor P, Tensor W, Tensor bh, Tensor h0, Tensor mask, Tensor first, bool keep, "
        "bool onednn) -> Tensor[]");
  m.def("mvma_gru_backward(Tensor dH, Tensor W, Tensor P, Tensor bh, Tensor K, Tensor Hs, Tensor h0, Tensor mask, "
        "Tensor first, bool onednn) -> Tensor[]");
  m.def("lstm_block_forward(Tensor Z, Tensor Wu, Tensor c0, Tensor h0, Tensor mask, Tensor first, float[] k, "
        "bool keep, bool onednn) -> Tensor[]");
  m.def("lstm_block_backward(Tensor dS, Tensor Wu, Tensor Z, Tensor K, Tensor Ss, Tensor c0, Tensor h0, Tensor mask, "
        "Tensor first, float[] k, bool onednn) -> Tensor[]");
  m.def("lstm_cell_backward(Tensor dH, Tensor dcT, Tensor W, Tensor K, Tensor Hs, Tensor Cs, Tensor h0, Tensor c0, "
        "Tensor mask, Tensor drop, bool onednn) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(rnnlens_affine_scan, CPU, m) {
  m.impl("structured_forward", &structured_forward);
  m.impl("structured_backward", &structured_backward);
  m.impl("lstm_forward", &lstm_forward);
  m.impl("lstm_backward", &lstm_backward);
  m.impl("structured_backward_grads", &structured_backward_grads);
  m.impl("lstm_backward_grads", &lstm_backward_grads);
  m.impl("gru_forward", &gru_forward);
  m.impl("gru_backward", &gru_backward);
  m.impl("lstm_cell_forward", &lstm_cell_forward);
  m.impl("lstm_cell_backward", &lstm_cell_backward);
  m.impl("mvma_gru_forward", &mvma_gru_forward);
  m.impl("mvma_gru_backward", &mvma_gru_backward);
  m.impl("lstm_block_forward", &lstm_block_forward);
  m.impl("lstm_block_backward", &lstm_block_backward);
}
