// linear (bias, activation and residual fused) against the float64 reference.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class LinearCheck final : public OpCheck {
 public:
  LinearCheck() : OpCheck(linear_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec &x = specs[1], &w = specs[2];
    reference::linear(x.dtype(), d[1].data(), d[2].data(), d[3].empty() ? nullptr : d[3].data(),
                      d[4].empty() ? nullptr : d[4].data(), d[0].data(), host_data::rows(x), w.dim(0), w.dim(1),
                      Act(int(scalar(scalars, "activation"))));
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    return product_tolerance(out, specs[2].dim(1), scalar(scalars, "tf32") != 0);
  }
};

}  // namespace

const OpCheck& linear_check() {
  static const LinearCheck check;
  return check;
}

}  // namespace mojo
