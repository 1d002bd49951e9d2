// rotary_embedding against the float64 reference, with positions in range of the cos/sin cache.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class RotaryEmbeddingCheck final : public OpCheck {
 public:
  RotaryEmbeddingCheck() : OpCheck(rotary_embedding_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec &q = specs[0], &k = specs[1], &cs = specs[3];
    const std::vector<std::int64_t> positions = host_data::indices(specs[2], d[2]);
    const std::vector<float> cos_sin = host_data::floats(cs, d[3]);
    reference::rotary_embedding(q.dtype(), d[0].data(), d[1].data(), positions.data(), cos_sin.data(), q.dim(0),
                                q.dim(1), k.dim(1), q.dim(2), cs.dim(1), cs.dim(0), scalar(scalars, "neox") != 0);
  }
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 2) return OpCheck::random_data(i, specs, scalars, seed);
    return host_data::index_bytes(specs[2].dtype(),
                                  host_data::random_indices(specs[2].numel(), specs[3].dim(0), seed, false));
  }
};

}  // namespace

const OpCheck& rotary_embedding_check() {
  static const RotaryEmbeddingCheck check;
  return check;
}

}  // namespace mojo
