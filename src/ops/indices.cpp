#include "ops/indices.hpp"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "mojo/error.hpp"
#include "ops/checks.hpp"

namespace mojo::indices {

void expect(std::string_view op, std::string_view arg, const TensorSpec& t, std::int64_t count) {
  checks::expect_dtype_in(op, arg, t.dtype(), kTypes);
  if (t.numel() != count || !t.is_contiguous())
    throw ShapeError(fmt::format("{}: {} is {}; expected a contiguous tensor of {} elements (one per token)", op, arg,
                                 t.str(), count));
}

std::vector<std::int64_t> decode(DType dtype, std::span<const std::uint8_t> bytes) {
  const std::size_t size = dtype == DType::i32 ? 4 : 8;
  std::vector<std::int64_t> values(bytes.size() / size);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::i32) {
      std::int32_t v32;
      std::memcpy(&v32, bytes.data() + 4 * i, 4);
      values[i] = v32;
    } else {
      std::memcpy(&values[i], bytes.data() + 8 * i, 8);
    }
  }
  return values;
}

std::vector<std::uint8_t> encode(DType dtype, std::span<const std::int64_t> values) {
  std::vector<std::uint8_t> out(values.size() * (dtype == DType::i32 ? 4 : 8));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::i32) {
      const auto v32 = std::int32_t(values[i]);
      std::memcpy(out.data() + 4 * i, &v32, 4);
    } else {
      std::memcpy(out.data() + 8 * i, &values[i], 8);
    }
  }
  return out;
}

std::vector<std::int64_t> read(const Tensor& t, StreamHandle stream) {
  std::vector<std::uint8_t> bytes(std::size_t(t.spec.numel()) * dtype_size(t.spec.dtype()));
  if (!bytes.empty()) copy_to_host(bytes.data(), t.data, bytes.size(), stream);
  return decode(t.spec.dtype(), bytes);
}

void check_range(std::string_view op, std::string_view arg, const Tensor& t, std::int64_t end, bool negative_skips,
                 StreamHandle stream) {
  const std::vector<std::int64_t> values = read(t, stream);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::int64_t v = values[i];
    if (v >= end || (v < 0 && !negative_skips))
      throw InvalidArgumentError(fmt::format("{}: {}[{}] = {} is out of range: expected {} < {}", op, arg, i, v,
                                             negative_skips ? "a value (negative skips the token)" : "0 <= value",
                                             end));
  }
}

}  // namespace mojo::indices
