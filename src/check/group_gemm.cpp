// group_gemm (plain and gated) and its weights' gradient against the float64 reference, on groups of random sizes.
#include <algorithm>
#include <cstring>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

// Offsets of groups of random sizes (some empty) covering every one of `rows`.
std::vector<std::uint8_t> random_offsets(const TensorSpec& spec, std::int64_t rows, std::uint32_t seed) {
  std::vector<std::int64_t> offsets = host_data::random_indices(spec.numel(), rows + 1, seed, false);
  std::sort(offsets.begin(), offsets.end());
  if (!offsets.empty()) offsets.front() = 0, offsets.back() = rows;
  return host_data::index_bytes(spec.dtype(), offsets);
}

class GroupGemmCheck final : public OpCheck {
 public:
  GroupGemmCheck() : OpCheck(group_gemm_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& w = specs[2];
    const std::vector<std::int64_t> offsets = host_data::indices(specs[3], d[3]);
    const int gated = gated_activation(scalars);
    const bool kn = scalar(scalars, "weight_kn") != 0;
    const std::int64_t groups = w.dim(0), k = specs[1].dim(1), n = w.dim(kn ? 2 : 1);
    std::vector<std::uint8_t> nk = d[2];  // the weights as [groups, N, K]
    if (kn) {
      const std::size_t es = dtype_size(w.dtype());
      for (std::int64_t g = 0; g < groups; ++g)
        for (std::int64_t i = 0; i < k; ++i)
          for (std::int64_t j = 0; j < n; ++j)
            std::memcpy(&nk[std::size_t((g * n + j) * k + i) * es], &d[2][std::size_t((g * k + i) * n + j) * es], es);
    }
    reference::group_gemm(w.dtype(), d[1].data(), nk.data(), offsets.data(), d[0].data(), groups, n, k, gated != 0,
                          Act(gated));
  }
  // The op has checked the value before a launch: 0 or an activation code.
  int gated_activation(ScalarList scalars) const { return int(scalar(scalars, "gated_activation")); }

  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    const Tolerance t = product_tolerance(out, specs[1].dim(1), scalar(scalars, "tf32") != 0);
    return gated_activation(scalars) != 0 ? Tolerance{2 * t.rtol, 2 * t.atol} : t;  // a product of two products
  }
  // Groups of random sizes covering every row of x.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 3) return OpCheck::random_data(i, specs, scalars, seed);
    return random_offsets(specs[3], specs[1].dim(0), seed);
  }
};

class GroupGemmWeightGradCheck final : public OpCheck {
 public:
  GroupGemmWeightGradCheck() : OpCheck(group_gemm_weight_grad_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const TensorSpec& gw = specs[0];
    const std::vector<std::int64_t> offsets = host_data::indices(specs[3], d[3]);
    reference::group_gemm_weight_grad(gw.dtype(), d[1].data(), d[2].data(), offsets.data(), d[0].data(), gw.dim(0),
                                      gw.dim(1), gw.dim(2));
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    return product_tolerance(out, specs[2].dim(0), scalar(scalars, "tf32") != 0);  // at most every row a group's
  }
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 3) return OpCheck::random_data(i, specs, scalars, seed);
    return random_offsets(specs[3], specs[2].dim(0), seed);
  }
};

}  // namespace

const OpCheck& group_gemm_check() {
  static const GroupGemmCheck check;
  return check;
}

const OpCheck& group_gemm_weight_grad_check() {
  static const GroupGemmWeightGradCheck check;
  return check;
}

}  // namespace mojo
