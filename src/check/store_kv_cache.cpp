// store_kv_cache against the float64 reference, with distinct slots in range of the cache.
#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class StoreKvCacheCheck final : public OpCheck {
 public:
  StoreKvCacheCheck() : OpCheck(store_kv_cache_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const TensorSpec &cache = specs[0], &k = specs[2];
    const std::vector<std::int64_t> slots = host_data::indices(specs[4], d[4]);
    reference::store_kv_cache(cache.dtype(), d[2].data(), d[3].data(), slots.data(), d[0].data(), d[1].data(), k.dim(0),
                              cache.dim(0) * cache.dim(1), cache.dim(2) * cache.dim(3));
  }
  // Distinct slots: two tokens for one slot would leave either.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    if (i != 4) return OpCheck::random_data(i, specs, scalars, seed);
    return host_data::index_bytes(
        specs[4].dtype(), host_data::random_indices(specs[4].numel(), specs[0].dim(0) * specs[0].dim(1), seed, true));
  }
};

}  // namespace

const OpCheck& store_kv_cache_check() {
  static const StoreKvCacheCheck check;
  return check;
}

}  // namespace mojo
