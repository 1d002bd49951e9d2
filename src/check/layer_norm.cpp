// layer_norm and layer_norm_backward against the float64 reference.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class LayerNormCheck final : public OpCheck {
 public:
  LayerNormCheck() : OpCheck(layer_norm_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& x = specs[3];
    auto stats = [&](std::size_t i) { return d[i].empty() ? nullptr : reinterpret_cast<float*>(d[i].data()); };
    reference::layer_norm(x.dtype(), d[3].data(), d[4].data(), d[5].data(), d[0].data(), stats(1), stats(2),
                          host_data::rows(x), host_data::last_dim(x), scalar(scalars, "eps"));
  }
};

class LayerNormBackwardCheck final : public OpCheck {
 public:
  LayerNormBackwardCheck() : OpCheck(layer_norm_backward_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const TensorSpec& x = specs[4];
    reference::layer_norm_backward(x.dtype(), d[3].data(), d[4].data(), d[5].data(),
                                   reinterpret_cast<const float*>(d[6].data()),
                                   reinterpret_cast<const float*>(d[7].data()), d[0].data(), d[1].data(), d[2].data(),
                                   host_data::rows(x), host_data::last_dim(x));
  }
};

}  // namespace

const OpCheck& layer_norm_check() {
  static const LayerNormCheck check;
  return check;
}
const OpCheck& layer_norm_backward_check() {
  static const LayerNormBackwardCheck check;
  return check;
}

}  // namespace mojo
