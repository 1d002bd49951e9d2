// embedding against the float64 reference, with ids in range of the vocabulary.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class EmbeddingCheck final : public OpCheck {
 public:
  EmbeddingCheck() : OpCheck(embedding_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const std::vector<std::int64_t> ids = host_data::indices(specs[1], d[1]);
    reference::embedding(specs[2].dtype(), ids.data(), d[2].data(), d[0].data(), specs[1].numel(), specs[2].dim(0),
                         specs[2].dim(1));
  }
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 1) return OpCheck::random_data(i, specs, scalars, seed);
    return host_data::index_bytes(specs[1].dtype(),
                                  host_data::random_indices(specs[1].numel(), specs[2].dim(0), seed, false));
  }
};

}  // namespace

const OpCheck& embedding_check() {
  static const EmbeddingCheck check;
  return check;
}

}  // namespace mojo
