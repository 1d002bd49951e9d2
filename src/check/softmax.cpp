// softmax, log_softmax and softmax_backward against the float64 reference.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class SoftmaxCheck final : public OpCheck {
 public:
  explicit SoftmaxCheck(bool log) : OpCheck(log ? log_softmax_op() : softmax_op()), log_(log) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    reference::softmax(specs[1].dtype(), d[1].data(), d[0].data(), host_data::rows(specs[1]),
                       host_data::last_dim(specs[1]), log_);
  }

 private:
  bool log_;
};

class SoftmaxBackwardCheck final : public OpCheck {
 public:
  SoftmaxBackwardCheck() : OpCheck(softmax_backward_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    reference::softmax_backward(specs[1].dtype(), d[1].data(), d[2].data(), d[0].data(), host_data::rows(specs[1]),
                                host_data::last_dim(specs[1]));
  }
};

}  // namespace

const OpCheck& softmax_check() {
  static const SoftmaxCheck check(false);
  return check;
}
const OpCheck& log_softmax_check() {
  static const SoftmaxCheck check(true);
  return check;
}
const OpCheck& softmax_backward_check() {
  static const SoftmaxBackwardCheck check;
  return check;
}

}  // namespace mojo
