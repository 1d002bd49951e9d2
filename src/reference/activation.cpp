// The activations and their gated forms in float64.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

double activate(Act act, double x) {
  switch (act) {
    case Act::none: return x;
    case Act::silu: return x / (1.0 + std::exp(-x));
    case Act::gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Act::gelu_tanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return 0;
}

void activation(DType dtype, Act act, bool gated, const void* x, void* out, std::int64_t n, std::int64_t d) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!gated) {
      store(dtype, out, std::size_t(i), float(activate(act, load(dtype, x, std::size_t(i)))));
      continue;
    }
    const std::int64_t row = i / d, c = i % d;
    const double a = load(dtype, x, std::size_t(row * 2 * d + c)), b = load(dtype, x, std::size_t(row * 2 * d + d + c));
    store(dtype, out, std::size_t(i), float(activate(act, a) * b));
  }
}

}  // namespace mojo::reference
