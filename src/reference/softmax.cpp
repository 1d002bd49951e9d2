// softmax, log_softmax and softmax_backward in float64.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

void softmax(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols, bool log) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * cols);
    double max = -INFINITY;
    for (std::int64_t c = 0; c < cols; ++c) max = std::max(max, double(load(dtype, x, base + std::size_t(c))));
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(load(dtype, x, base + std::size_t(c)) - max);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double d = load(dtype, x, base + std::size_t(c)) - max;
      store(dtype, out, base + std::size_t(c), float(log ? d - std::log(sum) : std::exp(d) / sum));
    }
  }
}

void softmax_backward(DType dtype, const void* grad_out, const void* out, void* grad_x, std::int64_t rows,
                      std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t base = std::size_t(r * cols);
    double dot = 0;
    for (std::int64_t c = 0; c < cols; ++c)
      dot += double(load(dtype, grad_out, base + std::size_t(c))) * load(dtype, out, base + std::size_t(c));
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = base + std::size_t(c);
      store(dtype, grad_x, i, float(load(dtype, out, i) * (double(load(dtype, grad_out, i)) - dot)));
    }
  }
}

}  // namespace mojo::reference
