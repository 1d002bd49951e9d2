// gemm, linear, group_gemm and its weights' gradient in float64.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "reference/reference.hpp"

namespace mojo::reference {

void gemm(DType in, DType out, const void* a, const void* b, void* c, std::int64_t batch, std::int64_t m,
          std::int64_t n, std::int64_t k, double alpha, double beta, bool trans_a, bool trans_b) {
  for (std::int64_t p = 0; p < batch; ++p) {
    const std::size_t ab = std::size_t(p * m * k), bb = std::size_t(p * k * n), cb = std::size_t(p * m * n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          const std::size_t ai = ab + std::size_t(trans_a ? q * m + i : i * k + q);
          const std::size_t bi = bb + std::size_t(trans_b ? j * k + q : q * n + j);
          sum += double(load(in, a, ai)) * load(in, b, bi);
        }
        const std::size_t ci = cb + std::size_t(i * n + j);
        const double old = beta != 0 ? beta * load(out, c, ci) : 0.0;
        store(out, c, ci, float(alpha * sum + old));
      }
  }
}

void linear(DType dtype, const void* x, const void* w, const void* bias, const void* residual, void* out,
            std::int64_t m, std::int64_t n, std::int64_t k, Act act) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double v = 0;
      for (std::int64_t q = 0; q < k; ++q)
        v += double(load(dtype, x, std::size_t(i * k + q))) * load(dtype, w, std::size_t(j * k + q));
      if (bias) v += load(dtype, bias, std::size_t(j));
      v = activate(act, v);
      if (residual) v += load(dtype, residual, std::size_t(i * n + j));
      store(dtype, out, std::size_t(i * n + j), float(v));
    }
}

void group_gemm(DType dtype, const void* x, const void* w, const std::int64_t* offsets, void* out, std::int64_t groups,
                std::int64_t n, std::int64_t k, bool gated, Act gated_act) {
  const std::size_t es = dtype_size(dtype);
  const auto dot = [&](std::int64_t row, std::int64_t g, std::int64_t col) {
    double acc = 0;
    for (std::int64_t i = 0; i < k; ++i)
      acc += double(load(dtype, x, std::size_t(row * k + i))) * load(dtype, w, std::size_t((g * n + col) * k + i));
    return acc;
  };
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t rows = offsets[g + 1] - offsets[g];
    if (rows <= 0) continue;
    if (gated) {
      for (std::int64_t r = offsets[g]; r < offsets[g + 1]; ++r)
        for (std::int64_t j = 0; j < n / 2; ++j)
          store(dtype, out, std::size_t(r * (n / 2) + j),
                float(activate(gated_act, dot(r, g, 2 * j)) * dot(r, g, 2 * j + 1)));
      continue;
    }
    linear(dtype, static_cast<const std::uint8_t*>(x) + std::size_t(offsets[g] * k) * es,
           static_cast<const std::uint8_t*>(w) + std::size_t(g * n * k) * es, nullptr, nullptr,
           static_cast<std::uint8_t*>(out) + std::size_t(offsets[g] * n) * es, rows, n, k, Act::none);
  }
}

void group_gemm_weight_grad(DType dtype, const void* grad_out, const void* x, const std::int64_t* offsets,
                            void* grad_weight, std::int64_t groups, std::int64_t n, std::int64_t k) {
  const std::size_t es = dtype_size(dtype);
  for (std::int64_t g = 0; g < groups; ++g)  // A = grad_out's rows stored [K, M]: gemm's trans_a
    gemm(dtype, dtype, static_cast<const std::uint8_t*>(grad_out) + std::size_t(offsets[g] * n) * es,
         static_cast<const std::uint8_t*>(x) + std::size_t(offsets[g] * k) * es,
         static_cast<std::uint8_t*>(grad_weight) + std::size_t(g * n * k) * es, 1, n, k, offsets[g + 1] - offsets[g],
         1.0, 0.0, true, false);
}

}  // namespace mojo::reference
