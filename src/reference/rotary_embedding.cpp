// rotary_embedding in float64.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace mojo::reference {

void rotary_embedding(DType dtype, void* q, void* k, const std::int64_t* positions, const float* cos_sin,
                      std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                      std::int64_t rot_dim, std::int64_t max_pos, bool neox) {
  const std::int64_t half = rot_dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t pos = positions[t];
    if (pos < 0 || pos >= max_pos) continue;
    for (std::int64_t h = 0; h < heads + kv_heads; ++h) {
      void* data = h < heads ? q : k;
      const std::int64_t base = h < heads ? (t * heads + h) * head_dim : (t * kv_heads + h - heads) * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const std::size_t i1 = std::size_t(base + (neox ? i : 2 * i)), i2 = std::size_t(base + (neox ? i + half : 2 * i + 1));
        const double c = cos_sin[pos * rot_dim + i], s = cos_sin[pos * rot_dim + half + i];
        const double x1 = load(dtype, data, i1), x2 = load(dtype, data, i2);
        store(dtype, data, i1, float(x1 * c - x2 * s));
        store(dtype, data, i2, float(x2 * c + x1 * s));
      }
    }
  }
}

}  // namespace mojo::reference
