// The word-matrix scan (rnnlens/ops/table_scan.py) as one pass over time on the CPU, forward
// and backward: every row of the batch is its own recurrence, so the rows run in parallel and
// each one's steps in a plain loop (at the URN's n = 50 a step is 2,500 multiply-adds, far
// less than what dispatching a dozen tensor operations a step costs). See table_scan.py for
// the contract; its PyTorch loop is the reference the tests compare with.
//
//   p_t = d * h_{t-1} + start_t e_0,   h_t = A_t p_t if mask_t else h_{t-1},
//   A_t = table[idx[b, t]] (* M[b], elementwise, where M is given)
//
// forward -> (H [B,T,n], P [B,T,n]); backward, from gH [B,T,n] -> (a [B,T,n], the gradient
// reaching A_t p_t (zero at pads), gstart [B,T], gh0 [B,n]). The table's gradient
// (sum over positions of a_t p_t^T into its word's row) stays in Python: a few large products.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace {

template <typename T>
struct Args {
  const T* table;
  const int64_t* idx;
  const T* start;
  const T* d;      // [B,n] or null
  const T* M;      // [B,n,n] or null
  const bool* mask;  // [B,T] or null
  int64_t B, Tn, n, U;
};

template <typename T>
Args<T> args_of(const at::Tensor& table, const at::Tensor& idx, const at::Tensor& start, const at::Tensor& d,
                const at::Tensor& M, const at::Tensor& mask) {
  return {table.data_ptr<T>(), idx.data_ptr<int64_t>(), start.data_ptr<T>(),
          d.numel() ? d.data_ptr<T>() : nullptr, M.numel() ? M.data_ptr<T>() : nullptr,
          mask.numel() ? mask.data_ptr<bool>() : nullptr, idx.size(0), idx.size(1), table.size(2), table.size(0)};
}

template <typename T>
void forward_rows(const Args<T>& a, const T* h0, T* H, T* P, int64_t b0, int64_t b1) {
  const int64_t n = a.n, nn = n * n;
  std::vector<T> h(n), p(n);
  for (int64_t b = b0; b < b1; ++b) {
    std::copy(h0 + b * n, h0 + (b + 1) * n, h.begin());
    const T* db = a.d ? a.d + b * n : nullptr;
    const T* Mb = a.M ? a.M + b * nn : nullptr;
    for (int64_t t = 0; t < a.Tn; ++t) {
      const int64_t bt = b * a.Tn + t;
      for (int64_t j = 0; j < n; ++j) p[j] = db ? h[j] * db[j] : h[j];
      p[0] += a.start[bt];
      T* __restrict__ Pt = P + bt * n;
      std::copy(p.begin(), p.end(), Pt);
      if (!a.mask || a.mask[bt]) {
        const T* A = a.table + a.idx[bt] * nn;
        for (int64_t i = 0; i < n; ++i) {
          const T* __restrict__ Ai = A + i * n;
          T s = 0;
          if (Mb) {
            const T* __restrict__ Mi = Mb + i * n;
            for (int64_t j = 0; j < n; ++j) s += Ai[j] * Mi[j] * p[j];
          } else {
            for (int64_t j = 0; j < n; ++j) s += Ai[j] * p[j];
          }
          h[i] = s;
        }
      }
      std::copy(h.begin(), h.end(), H + bt * n);
    }
  }
}

template <typename T>
void backward_rows(const Args<T>& a, const T* gH, T* A_out, T* gstart, T* gh0, int64_t b0, int64_t b1) {
  const int64_t n = a.n, nn = n * n;
  std::vector<T> gh(n), gp(n);
  for (int64_t b = b0; b < b1; ++b) {
    std::fill(gh.begin(), gh.end(), T(0));
    const T* db = a.d ? a.d + b * n : nullptr;
    const T* Mb = a.M ? a.M + b * nn : nullptr;
    for (int64_t t = a.Tn - 1; t >= 0; --t) {
      const int64_t bt = b * a.Tn + t;
      const T* __restrict__ g = gH + bt * n;
      T* __restrict__ at = A_out + bt * n;
      for (int64_t j = 0; j < n; ++j) gh[j] += g[j];
      if (a.mask && !a.mask[bt]) {          // a pad: h_t = h_{t-1}, the gradient passes through
        std::fill(at, at + n, T(0));
        if (gstart) gstart[bt] = T(0);
        continue;
      }
      std::copy(gh.begin(), gh.end(), at);
      std::fill(gp.begin(), gp.end(), T(0));
      const T* A = a.table + a.idx[bt] * nn;
      for (int64_t i = 0; i < n; ++i) {      // gp = A^T a
        const T ai = at[i];
        const T* __restrict__ Ai = A + i * n;
        if (Mb) {
          const T* __restrict__ Mi = Mb + i * n;
          for (int64_t j = 0; j < n; ++j) gp[j] += Ai[j] * Mi[j] * ai;
        } else {
          for (int64_t j = 0; j < n; ++j) gp[j] += Ai[j] * ai;
        }
      }
      if (gstart) gstart[bt] = gp[0];
      for (int64_t j = 0; j < n; ++j) gh[j] = db ? gp[j] * db[j] : gp[j];
    }
    std::copy(gh.begin(), gh.end(), gh0 + b * n);
  }
}

std::tuple<at::Tensor, at::Tensor> table_forward(const at::Tensor& table, const at::Tensor& idx, const at::Tensor& start,
                                      const at::Tensor& d, const at::Tensor& M, const at::Tensor& h0,
                                      const at::Tensor& mask) {
  const int64_t B = idx.size(0), Tn = idx.size(1), n = table.size(2);
  at::Tensor H = at::empty({B, Tn, n}, table.options()), P = at::empty({B, Tn, n}, table.options());
  const at::Tensor tc = table.contiguous(), ic = idx.contiguous(), sc = start.contiguous(), dc = d.contiguous(),
                   Mc = M.contiguous(), hc = h0.contiguous(), mc = mask.contiguous();
  AT_DISPATCH_FLOATING_TYPES(table.scalar_type(), "table_forward", [&] {
    const Args<scalar_t> a = args_of<scalar_t>(tc, ic, sc, dc, Mc, mc);
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      forward_rows<scalar_t>(a, hc.data_ptr<scalar_t>(), H.data_ptr<scalar_t>(), P.data_ptr<scalar_t>(), b0, b1);
    });
  });
  return {H, P};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> table_backward(const at::Tensor& gH, const at::Tensor& table, const at::Tensor& idx,
                                       const at::Tensor& d, const at::Tensor& M, const at::Tensor& mask,
                                       bool need_start) {
  const int64_t B = idx.size(0), Tn = idx.size(1), n = table.size(2);
  at::Tensor A = at::empty({B, Tn, n}, table.options());
  at::Tensor gstart = need_start ? at::empty({B, Tn}, table.options()) : at::empty({0}, table.options());
  at::Tensor gh0 = at::empty({B, n}, table.options());
  const at::Tensor gc = gH.contiguous(), tc = table.contiguous(), ic = idx.contiguous(), dc = d.contiguous(),
                   Mc = M.contiguous(), mc = mask.contiguous();
  AT_DISPATCH_FLOATING_TYPES(table.scalar_type(), "table_backward", [&] {
    const Args<scalar_t> a = args_of<scalar_t>(tc, ic, tc.new_empty({0}), dc, Mc, mc);   // no start backward
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      backward_rows<scalar_t>(a, gc.data_ptr<scalar_t>(), A.data_ptr<scalar_t>(),
                              need_start ? gstart.data_ptr<scalar_t>() : nullptr, gh0.data_ptr<scalar_t>(), b0, b1);
    });
  });
  return {A, gstart, gh0};
}

}  // namespace

TORCH_LIBRARY(rnnlens_table_scan, m) {
  m.def("forward(Tensor table, Tensor idx, Tensor start, Tensor d, Tensor M, Tensor h0, Tensor mask) "
        "-> (Tensor, Tensor)");
  m.def("backward(Tensor gH, Tensor table, Tensor idx, Tensor d, Tensor M, Tensor mask, bool need_start) "
        "-> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(rnnlens_table_scan, CPU, m) {
  m.impl("forward", &table_forward);
  m.impl("backward", &table_backward);
}
