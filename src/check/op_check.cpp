// What every op's check shares: the default inputs and tolerances, and the
// table of checks by op name.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <unordered_map>
#include <vector>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "mojo/error.hpp"

namespace mojo {

Tolerance default_tolerance(DType dtype) noexcept {
  switch (dtype) {
    case DType::bf16:
      return {8e-3, 4e-3};  // 1 ulp = 2^-8 relative: 2 ulp
    case DType::f16:
      return {2e-3, 1e-3};  // 1 ulp = 2^-11 relative: 4 ulp
    default:
      return {1e-4, 1e-6};  // f32: a few ulp of 2^-23 after approximations and sums
  }
}

// A dot product of k terms in fp32 vs float64: atol grows like sqrt(k) / 16 (inputs in ±[0.05, 2], so the
// sums are ~sqrt(k)); tf32 inputs carry bf16-like error.
Tolerance product_tolerance(DType out, std::int64_t k, bool tf32) {
  Tolerance t = default_tolerance(tf32 ? DType::bf16 : out);
  t.atol *= std::max(1.0, std::sqrt(double(k)) / 16);
  if (out == DType::f32 && !tf32) t.rtol = 1e-4, t.atol = std::max(t.atol, 1e-5);
  return t;
}

std::vector<std::uint8_t> OpCheck::random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList /*scalars*/,
                                               std::uint32_t seed) const {
  const TensorSpec& s = specs[i];
  std::mt19937 rng(seed * 7919u + std::uint32_t(i));
  if (!host_data::is_float(s.dtype())) return std::vector<std::uint8_t>(s.nbytes(), 0);  // index 0: valid anywhere
  std::uniform_real_distribution<float> magnitude(0.05f, 2.f);
  std::vector<float> v(std::size_t(s.numel()));
  for (float& x : v) x = rng() % 2 ? magnitude(rng) : -magnitude(rng);
  return reference::encode(s.dtype(), v);
}

const OpCheck& find_check(std::string_view name) {
  // Every op in ops.def has a check; find_op names the known ops when `name` is none of them.
  static const std::unordered_map<std::string_view, const OpCheck*> by_name = [] {
    std::unordered_map<std::string_view, const OpCheck*> m;
    for (const OpCheck* check : std::array{
#define MOJO_OP(name) &name##_check(),
#include "ops/ops.def"
#undef MOJO_OP
         })
      m.emplace(check->op().name(), check);
    return m;
  }();
  if (auto it = by_name.find(name); it != by_name.end()) return *it->second;
  find_op(name);  // throws UnknownOpError
  throw InternalError(fmt::format("op '{}' has no check", name));
}

}  // namespace mojo
