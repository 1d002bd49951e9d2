// Host copies of tensors for the ops' references and random check inputs:
// index tensors read and written as int64, any float dtype read as float.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "mojo/tensor.hpp"
#include "ops/indices.hpp"
#include "reference/reference.hpp"

namespace mojo::host_data {

inline bool is_float(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

// The rows of a tensor over its last dim (0 for an empty one).
inline std::int64_t rows(const TensorSpec& t) {
  const std::int64_t last = t.rank() == 0 ? 1 : t.dim(t.rank() - 1);
  return last == 0 ? 0 : t.numel() / last;
}
inline std::int64_t last_dim(const TensorSpec& t) { return t.rank() == 0 ? 1 : t.dim(t.rank() - 1); }

// An i32 or i64 tensor's values, and values as its bytes.
inline std::vector<std::int64_t> indices(const TensorSpec& t, const std::vector<std::uint8_t>& bytes) {
  return indices::decode(t.dtype(), bytes);
}
inline std::vector<std::uint8_t> index_bytes(DType d, const std::vector<std::int64_t>& values) {
  return indices::encode(d, values);
}

// `n` random indices in [0, bound), distinct while n <= bound.
inline std::vector<std::int64_t> random_indices(std::int64_t n, std::int64_t bound, std::uint32_t seed, bool distinct) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> out(std::size_t(std::max<std::int64_t>(n, 0)));
  if (bound <= 0) {  // no index to give: every one negative (an index the ops skip), none out of range
    std::fill(out.begin(), out.end(), -1);
    return out;
  }
  if (distinct && n <= bound && bound <= (1 << 24)) {
    std::vector<std::int64_t> all(static_cast<std::size_t>(bound));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), out.size(), out.begin());
    return out;
  }
  for (auto& v : out) v = std::int64_t(rng() % std::uint64_t(bound));
  return out;
}

// A float tensor's values as f32.
inline std::vector<float> floats(const TensorSpec& t, const std::vector<std::uint8_t>& bytes) {
  return reference::decode(t.dtype(), bytes);
}

}  // namespace mojo::host_data
