// rms_norm, add_rms_norm and rms_norm_backward against the float64 reference.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class RmsNormCheck final : public OpCheck {
 public:
  explicit RmsNormCheck(bool add) : OpCheck(add ? add_rms_norm_op() : rms_norm_op()), add_(add) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& x = specs[add_ ? 2 : 1];
    const double eps = scalar(scalars, "eps");
    if (add_)
      reference::add_rms_norm(x.dtype(), d[1].data(), d[2].data(), d[3].data(), d[0].data(), host_data::rows(x),
                              host_data::last_dim(x), eps);
    else
      reference::rms_norm(x.dtype(), d[1].data(), d[2].data(), d[0].data(), host_data::rows(x), host_data::last_dim(x),
                          eps);
  }

 private:
  bool add_;
};

class RmsNormBackwardCheck final : public OpCheck {
 public:
  RmsNormBackwardCheck() : OpCheck(rms_norm_backward_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& x = specs[3];
    reference::rms_norm_backward(x.dtype(), d[2].data(), d[3].data(), d[4].data(),
                                 d[5].empty() ? nullptr : d[5].data(), d[0].data(), d[1].data(), host_data::rows(x),
                                 host_data::last_dim(x), scalar(scalars, "eps"));
  }
};

}  // namespace

const OpCheck& rms_norm_check() {
  static const RmsNormCheck check(false);
  return check;
}
const OpCheck& add_rms_norm_check() {
  static const RmsNormCheck check(true);
  return check;
}

const OpCheck& rms_norm_backward_check() {
  static const RmsNormBackwardCheck check;
  return check;
}

}  // namespace mojo
