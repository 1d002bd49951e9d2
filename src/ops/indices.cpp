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

std::vector<std::int64_t> read(const Tensor& t, StreamHandle stream) {
  const std::size_t n = std::size_t(t.spec.numel());
  std::vector<std::int64_t> values(n);
  if (n == 0) return values;
  std::vector<unsigned char> bytes(t.spec.nbytes());
  copy_to_host(bytes.data(), t.data, bytes.size(), stream);
  for (std::size_t i = 0; i < n; ++i) {
    if (t.spec.dtype() == DType::i32) {
      std::int32_t v32;
      std::memcpy(&v32, bytes.data() + 4 * i, 4);
      values[i] = v32;
    } else {
      std::memcpy(&values[i], bytes.data() + 8 * i, 8);
    }
  }
  return values;
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
