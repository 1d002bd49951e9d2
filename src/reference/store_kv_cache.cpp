// store_kv_cache: rows scattered to slots; slots out of range are skipped.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

void store_kv_cache(DType dtype, const void* k, const void* v, const std::int64_t* slots, void* k_cache,
                    void* v_cache, std::int64_t tokens, std::int64_t num_slots, std::int64_t row) {
  const std::size_t row_bytes = std::size_t(row) * dtype_size(dtype);
  for (std::int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0 || slots[t] >= num_slots) continue;
    const std::size_t at = std::size_t(slots[t]) * row_bytes, from = std::size_t(t) * row_bytes;
    std::memcpy(static_cast<std::uint8_t*>(k_cache) + at, static_cast<const std::uint8_t*>(k) + from, row_bytes);
    std::memcpy(static_cast<std::uint8_t*>(v_cache) + at, static_cast<const std::uint8_t*>(v) + from, row_bytes);
  }
}

}  // namespace mojo::reference
