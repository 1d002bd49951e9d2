// rms_norm and add_rms_norm against the float64 reference.
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

}  // namespace

const OpCheck& rms_norm_check() {
  static const RmsNormCheck check(false);
  return check;
}
const OpCheck& add_rms_norm_check() {
  static const RmsNormCheck check(true);
  return check;
}

}  // namespace mojo
