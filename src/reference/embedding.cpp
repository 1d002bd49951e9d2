// embedding: a row gather; ids out of range give zero rows.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

void embedding(DType dtype, const std::int64_t* ids, const void* weight, void* out, std::int64_t tokens,
               std::int64_t vocab, std::int64_t hidden) {
  const std::size_t row_bytes = std::size_t(hidden) * dtype_size(dtype);
  for (std::int64_t t = 0; t < tokens; ++t) {
    auto* dst = static_cast<std::uint8_t*>(out) + std::size_t(t) * row_bytes;
    if (ids[t] < 0 || ids[t] >= vocab)
      std::memset(dst, 0, row_bytes);
    else
      std::memcpy(dst, static_cast<const std::uint8_t*>(weight) + std::size_t(ids[t]) * row_bytes, row_bytes);
  }
}

}  // namespace mojo::reference
