// silu, gelu, swiglu and gelu_and_mul against the float64 reference.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

// One check, four ops: gelu or silu, plain or gated (x split in halves).
class ActivationCheck final : public OpCheck {
 public:
  ActivationCheck(const OpDef& op, bool gelu, bool gated) : OpCheck(op), gelu_(gelu), gated_(gated) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const auto act = !gelu_ ? Act::silu : scalar(scalars, "approximate") != 0 ? Act::gelu_tanh : Act::gelu;
    reference::activation(specs[1].dtype(), act, gated_, d[1].data(), d[0].data(), specs[0].numel(),
                          host_data::last_dim(specs[0]));
  }

 private:
  bool gelu_, gated_;
};

}  // namespace

const OpCheck& silu_check() {
  static const ActivationCheck check(silu_op(), false, false);
  return check;
}
const OpCheck& gelu_check() {
  static const ActivationCheck check(gelu_op(), true, false);
  return check;
}
const OpCheck& swiglu_check() {
  static const ActivationCheck check(swiglu_op(), false, true);
  return check;
}
const OpCheck& gelu_and_mul_check() {
  static const ActivationCheck check(gelu_and_mul_op(), true, true);
  return check;
}

}  // namespace mojo
