// rms_norm and add_rms_norm in float64.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

void rms_norm(DType dtype, const void* x, const void* weight, void* out, std::int64_t rows,
              std::int64_t hidden, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (std::int64_t c = 0; c < hidden; ++c) {
      double v = load(dtype, x, std::size_t(r * hidden + c));
      sum_sq += v * v;
    }
    double scale = 1.0 / std::sqrt(sum_sq / double(hidden) + eps);
    for (std::int64_t c = 0; c < hidden; ++c) {
      double v = load(dtype, x, std::size_t(r * hidden + c)) * scale * load(dtype, weight, std::size_t(c));
      store(dtype, out, std::size_t(r * hidden + c), float(v));
    }
  }
}

void add_rms_norm(DType dtype, void* residual, const void* x, const void* weight, void* out, std::int64_t rows,
                  std::int64_t hidden, double eps) {
  const std::size_t n = std::size_t(rows * hidden);
  for (std::size_t i = 0; i < n; ++i) store(dtype, residual, i, load(dtype, residual, i) + load(dtype, x, i));
  rms_norm(dtype, residual, weight, out, rows, hidden, eps);
}

}  // namespace mojo::reference
