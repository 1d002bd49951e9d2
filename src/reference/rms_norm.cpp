// rms_norm, add_rms_norm and rms_norm_backward in float64.
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

void rms_norm_backward(DType dtype, const void* grad_out, const void* x, const void* weight,
                       const void* grad_residual, void* grad_x, void* grad_weight, std::int64_t rows,
                       std::int64_t hidden, double eps) {
  std::vector<double> dw(std::size_t(hidden), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * hidden);
    double sum_sq = 0;
    for (std::int64_t c = 0; c < hidden; ++c) sum_sq += std::pow(load(dtype, x, base + std::size_t(c)), 2);
    const double rstd = 1.0 / std::sqrt(sum_sq / double(hidden) + eps);
    double sum_gx = 0;  // sum(g * xhat), g = grad_out * weight
    for (std::int64_t c = 0; c < hidden; ++c) {
      const std::size_t i = base + std::size_t(c);
      sum_gx += load(dtype, grad_out, i) * load(dtype, weight, std::size_t(c)) * load(dtype, x, i) * rstd;
    }
    const double mean_gx = sum_gx / double(hidden);
    for (std::int64_t c = 0; c < hidden; ++c) {
      const std::size_t i = base + std::size_t(c);
      const double dy = load(dtype, grad_out, i), xhat = load(dtype, x, i) * rstd;
      double v = rstd * (dy * load(dtype, weight, std::size_t(c)) - xhat * mean_gx);
      if (grad_residual != nullptr) v += load(dtype, grad_residual, i);
      store(dtype, grad_x, i, float(v));
      dw[std::size_t(c)] += dy * xhat;
    }
  }
  for (std::int64_t c = 0; c < hidden; ++c) store(dtype, grad_weight, std::size_t(c), float(dw[std::size_t(c)]));
}

}  // namespace mojo::reference
