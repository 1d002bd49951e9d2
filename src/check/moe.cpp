// moe_gate, moe_dispatch and moe_combine against the float64 reference.
#include "ops/moe.hpp"

#include <algorithm>
#include <random>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

// ---- moe_gate ------------------------------------------------------------------

class MoeGateCheck final : public OpCheck {
 public:
  MoeGateCheck() : OpCheck(moe_gate_op()) {}

  // The routing the scalars choose, as the op reads them (src/ops/moe.cpp).

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    std::vector<std::int64_t> ids;
    std::vector<float> weights;
    const std::vector<float> bias = d[3].empty() ? std::vector<float>{} : host_data::floats(specs[3], d[3]);
    reference::moe_gate(moe_gate_config(op(), specs, scalars), host_data::floats(specs[2], d[2]), bias, specs[2].dim(0),
                        ids, weights);
    d[0] = reference::encode(DType::f32, weights);
    d[1] = host_data::index_bytes(specs[1].dtype(), ids);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override {
    return out == DType::f32 ? Tolerance{1e-5, 1e-6} : Tolerance{0, 0};
  }
  // Logits a permutation of an evenly spaced grid per token and a bias of a few coarse levels: every choice is
  // apart by far more than float rounding, so the kernel and the reference choose alike.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    const TensorSpec& t = specs[i];
    std::mt19937 rng(seed * 7919u + std::uint32_t(i));
    std::vector<float> v(std::size_t(t.numel()));
    if (i == 2) {
      const std::int64_t experts = t.dim(1);
      std::vector<float> grid(static_cast<std::size_t>(experts));
      for (std::int64_t e = 0; e < experts; ++e) grid[std::size_t(e)] = -4.f + 8.f * float(e) / float(experts);
      for (std::int64_t r = 0; r < t.dim(0); ++r) {
        std::shuffle(grid.begin(), grid.end(), rng);
        std::copy(grid.begin(), grid.end(), v.begin() + r * experts);
      }
    } else if (i == 3) {
      for (float& x : v) x = 0.25f * float(rng() % 3);
    } else {
      return OpCheck::random_data(i, specs, scalars, seed);
    }
    return reference::encode(t.dtype(), v);
  }
};

// ---- moe_dispatch --------------------------------------------------------------

class MoeDispatchCheck final : public OpCheck {
 public:
  MoeDispatchCheck() : OpCheck(moe_dispatch_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    std::vector<std::int64_t> offsets, sorted, positions;
    const DType index = specs[3].dtype();
    reference::moe_dispatch(host_data::indices(specs[3], d[3]), specs[3].dim(1), specs[0].numel() - 1, offsets, sorted,
                            positions);
    d[0] = host_data::index_bytes(index, offsets);
    d[1] = host_data::index_bytes(index, sorted);
    d[2] = host_data::index_bytes(index, positions);
    if (!d[4].empty()) {
      const std::int64_t hidden = specs[5].dim(1), tokens = specs[5].dim(0);
      reference::embedding(specs[5].dtype(), sorted.data(), d[5].data(), d[4].data(), std::int64_t(sorted.size()),
                           tokens, hidden);
    }
  }
  Tolerance tolerance(DType, std::span<const TensorSpec>, ScalarList) const override { return {0, 0}; }
  // Expert ids in range, a few negative (not routed).
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 3) return OpCheck::random_data(i, specs, scalars, seed);
    std::vector<std::int64_t> ids = host_data::random_indices(specs[3].numel(), specs[0].numel() - 1, seed, false);
    for (std::size_t j = 7; j < ids.size(); j += 13) ids[j] = -1;
    return host_data::index_bytes(specs[3].dtype(), ids);
  }
};

// ---- moe_combine ---------------------------------------------------------------

class MoeCombineCheck final : public OpCheck {
 public:
  MoeCombineCheck() : OpCheck(moe_combine_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const std::vector<std::int64_t> positions = host_data::indices(specs[2], d[2]);
    const std::vector<float> weights = host_data::floats(specs[3], d[3]);
    reference::moe_combine(specs[1].dtype(), d[1].data(), positions.data(), weights.data(), d[0].data(),
                           specs[2].dim(0), specs[2].dim(1), specs[1].dim(1));
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override {
    const Tolerance t = default_tolerance(out);
    return {2 * t.rtol, 2 * t.atol};  // a sum of top_k products
  }
  // Each token's slots at distinct rows of expert_out, a few not routed.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 2) return OpCheck::random_data(i, specs, scalars, seed);
    std::vector<std::int64_t> rows = host_data::random_indices(specs[2].numel(), specs[1].dim(0), seed, true);
    for (std::size_t j = 5; j < rows.size(); j += 11) rows[j] = -1;
    return host_data::index_bytes(specs[2].dtype(), rows);
  }
};

}  // namespace

const OpCheck& moe_gate_check() {
  static const MoeGateCheck check;
  return check;
}
const OpCheck& moe_dispatch_check() {
  static const MoeDispatchCheck check;
  return check;
}
const OpCheck& moe_combine_check() {
  static const MoeCombineCheck check;
  return check;
}

}  // namespace mojo
