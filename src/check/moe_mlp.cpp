// moe_mlp against the float64 reference of its five steps (dispatch, gather, two group_gemms, combine).
#include <algorithm>
#include <random>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class MoeMlpCheck final : public OpCheck {
 public:
  MoeMlpCheck() : OpCheck(moe_mlp_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const DType dtype = specs[1].dtype();
    const std::int64_t tokens = specs[1].dim(0), hidden = specs[1].dim(1), top_k = specs[2].dim(1),
                       experts = specs[4].dim(0), inter = specs[4].dim(1) / 2, pairs = tokens * top_k;
    const std::size_t es = dtype_size(dtype);
    std::vector<std::int64_t> offsets, sorted, positions;
    reference::moe_dispatch(host_data::indices(specs[2], d[2]), top_k, experts, offsets, sorted, positions);
    std::vector<std::uint8_t> sorted_x(std::size_t(pairs * hidden) * es), act(std::size_t(pairs * inter) * es),
        expert_out(std::size_t(pairs * hidden) * es);
    reference::embedding(dtype, sorted.data(), d[1].data(), sorted_x.data(), pairs, tokens, hidden);
    reference::group_gemm(dtype, sorted_x.data(), d[4].data(), offsets.data(), act.data(), experts, 2 * inter, hidden,
                          true, Act(int(scalar(scalars, "activation"))));
    reference::group_gemm(dtype, act.data(), d[5].data(), offsets.data(), expert_out.data(), experts, hidden, inter);
    const std::vector<float> weights = host_data::floats(specs[3], d[3]);
    reference::moe_combine(dtype, expert_out.data(), positions.data(), weights.data(), d[0].data(), tokens, top_k,
                           hidden);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList) const override {
    const Tolerance t = product_tolerance(out, std::max(specs[1].dim(1), specs[5].dim(2)), false);
    return {4 * t.rtol, 4 * t.atol};  // two products, an activation and a weighted sum, each rounded
  }
  // Expert ids in range (a few routed nowhere), weights of a gate, small weights so sums stay near 1.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    const TensorSpec& t = specs[i];
    if (i == 2) {
      std::vector<std::int64_t> ids = host_data::random_indices(t.numel(), specs[4].dim(0), seed, false);
      for (std::size_t j = 5; j < ids.size(); j += 17) ids[j] = -1;
      return host_data::index_bytes(t.dtype(), ids);
    }
    if (i == 3 || i == 4 || i == 5)
      return reference::encode(t.dtype(), test_values(t.numel(), seed * 7919u + std::uint32_t(i), i == 3 ? 1.f : 0.2f));
    return OpCheck::random_data(i, specs, scalars, seed);
  }

 private:
  // n values in ±[scale / 20, scale] (never zero).
  static std::vector<float> test_values(std::int64_t n, std::uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> mag(scale / 20, scale);
    std::vector<float> v(std::size_t(std::max<std::int64_t>(n, 0)));
    for (float& x : v) x = rng() % 2 ? mag(rng) : -mag(rng);
    return v;
  }
};

}  // namespace

const OpCheck& moe_mlp_check() {
  static const MoeMlpCheck check;
  return check;
}

}  // namespace mojo
