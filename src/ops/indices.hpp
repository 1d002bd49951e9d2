// Index tensors (token ids, positions, KV slots): int32 or int64, one per
// token, and the debug check that reads them back and names a bad one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mojo/op.hpp"

namespace mojo::indices {

inline constexpr DType kTypes[] = {DType::i32, DType::i64};

// `t` is i32 or i64, contiguous, with `count` elements.
void expect(std::string_view op, std::string_view arg, const TensorSpec& t, std::int64_t count);

// Host bytes of an i32 or i64 tensor as values, and values as such bytes.
std::vector<std::int64_t> decode(DType dtype, std::span<const std::uint8_t> bytes);
std::vector<std::uint8_t> encode(DType dtype, std::span<const std::int64_t> values);

// The values of an i32 or i64 tensor, copied to the host after the stream's work.
std::vector<std::int64_t> read(const Tensor& t, StreamHandle stream);

// Copies the index tensor to the host (after the stream's work) and throws
// InvalidArgumentError naming the first element outside [0, end); with
// `negative_skips`, values < 0 are allowed (they mean "skip this token").
void check_range(std::string_view op, std::string_view arg, const Tensor& t, std::int64_t end, bool negative_skips,
                 StreamHandle stream);

}  // namespace mojo::indices
