// group_gemm (plain and gated) against the float64 reference, on groups of random sizes.
#include <algorithm>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class GroupGemmCheck final : public OpCheck {
 public:
  GroupGemmCheck() : OpCheck(group_gemm_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& w = specs[2];
    const std::vector<std::int64_t> offsets = host_data::indices(specs[3], d[3]);
    const int gated = gated_activation(scalars);
    reference::group_gemm(w.dtype(), d[1].data(), d[2].data(), offsets.data(), d[0].data(), w.dim(0), w.dim(1),
                          w.dim(2), gated != 0, Act(gated));
  }
  // The op has checked the value before a launch: 0 or an activation code.
  int gated_activation(ScalarList scalars) const { return int(scalar(scalars, "gated_activation")); }

  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    const Tolerance t = product_tolerance(out, specs[2].dim(2), scalar(scalars, "tf32") != 0);
    return gated_activation(scalars) != 0 ? Tolerance{2 * t.rtol, 2 * t.atol} : t;  // a product of two products
  }
  // Groups of random sizes covering every row of x.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 3) return OpCheck::random_data(i, specs, scalars, seed);
    const std::int64_t rows = specs[1].dim(0);
    std::vector<std::int64_t> offsets = host_data::random_indices(specs[3].numel(), rows + 1, seed, false);
    std::sort(offsets.begin(), offsets.end());
    if (!offsets.empty()) offsets.front() = 0, offsets.back() = rows;
    return host_data::index_bytes(specs[3].dtype(), offsets);
  }
};

}  // namespace

const OpCheck& group_gemm_check() {
  static const GroupGemmCheck check;
  return check;
}

}  // namespace mojo
