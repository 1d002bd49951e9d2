// layer_norm and layer_norm_backward in float64.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

void layer_norm(DType dtype, const void* x, const void* weight, const void* bias, void* out, float* mean,
                float* rstd, std::int64_t rows, std::int64_t hidden, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * hidden);
    double sum = 0;
    for (std::int64_t c = 0; c < hidden; ++c) sum += load(dtype, x, base + std::size_t(c));
    const double mu = sum / double(hidden);
    double var = 0;
    for (std::int64_t c = 0; c < hidden; ++c) {
      const double d = load(dtype, x, base + std::size_t(c)) - mu;
      var += d * d;
    }
    const double rs = 1.0 / std::sqrt(var / double(hidden) + eps);
    if (mean != nullptr) mean[r] = float(mu);
    if (rstd != nullptr) rstd[r] = float(rs);
    for (std::int64_t c = 0; c < hidden; ++c) {
      const double v = (load(dtype, x, base + std::size_t(c)) - mu) * rs * load(dtype, weight, std::size_t(c)) +
                       load(dtype, bias, std::size_t(c));
      store(dtype, out, base + std::size_t(c), float(v));
    }
  }
}

void layer_norm_backward(DType dtype, const void* grad_out, const void* x, const void* weight, const float* mean,
                         const float* rstd, void* grad_x, void* grad_weight, void* grad_bias, std::int64_t rows,
                         std::int64_t hidden) {
  std::vector<double> dw(std::size_t(hidden), 0.0), db(std::size_t(hidden), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * hidden);
    double sum_g = 0, sum_gx = 0;
    for (std::int64_t c = 0; c < hidden; ++c) {
      const std::size_t i = base + std::size_t(c);
      const double dy = load(dtype, grad_out, i), xhat = (load(dtype, x, i) - mean[r]) * double(rstd[r]);
      const double g = dy * load(dtype, weight, std::size_t(c));
      sum_g += g;
      sum_gx += g * xhat;
      dw[std::size_t(c)] += dy * xhat;
      db[std::size_t(c)] += dy;
    }
    sum_g /= double(hidden);
    sum_gx /= double(hidden);
    for (std::int64_t c = 0; c < hidden; ++c) {
      const std::size_t i = base + std::size_t(c);
      const double xhat = (load(dtype, x, i) - mean[r]) * double(rstd[r]);
      const double g = load(dtype, grad_out, i) * load(dtype, weight, std::size_t(c));
      store(dtype, grad_x, i, float(double(rstd[r]) * (g - sum_g - xhat * sum_gx)));
    }
  }
  for (std::int64_t c = 0; c < hidden; ++c) {
    store(dtype, grad_weight, std::size_t(c), float(dw[std::size_t(c)]));
    store(dtype, grad_bias, std::size_t(c), float(db[std::size_t(c)]));
  }
}

}  // namespace mojo::reference
