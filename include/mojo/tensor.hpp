// Tensors as the runtime sees them: a TensorSpec describes one without memory
// (so specialization and compilation need no GPU); a Tensor adds a device
// pointer. Both are small trivially-copyable values: passing them on the hot
// path never allocates.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace mojo {

enum class DType : std::uint8_t { f32, f16, bf16, i32, i64, u8 };

std::size_t dtype_size(DType dtype) noexcept;
std::string_view dtype_name(DType dtype) noexcept;  // "f32", "bf16", ...
// Parses "f32" / "float32" / "float", "f16" / "half", "bf16" / "bfloat16", ...
// Throws DTypeError listing the accepted names.
DType parse_dtype(std::string_view name);

// A device address; 0 is null.
using DevicePtr = unsigned long long;  // same as the driver's CUdeviceptr

class TensorSpec {
 public:
  static constexpr int kMaxRank = 8;

  TensorSpec() = default;
  // Contiguous (row-major) tensor of the given shape.
  TensorSpec(DType dtype, std::initializer_list<std::int64_t> shape);
  TensorSpec(DType dtype, std::span<const std::int64_t> shape);
  // Explicit strides, in elements.
  TensorSpec(DType dtype, std::span<const std::int64_t> shape, std::span<const std::int64_t> strides);

  DType dtype() const noexcept { return dtype_; }
  int rank() const noexcept { return rank_; }
  std::int64_t dim(int i) const noexcept { return shape_[i]; }
  std::int64_t stride(int i) const noexcept { return strides_[i]; }
  std::span<const std::int64_t> shape() const noexcept { return {shape_.data(), std::size_t(rank_)}; }
  std::span<const std::int64_t> strides() const noexcept { return {strides_.data(), std::size_t(rank_)}; }

  std::int64_t numel() const noexcept;
  std::size_t nbytes() const noexcept { return std::size_t(numel()) * dtype_size(dtype_); }
  // The bytes from the first element to the end of the last one through the strides (0 without elements):
  // what a view of this spec reaches.
  std::size_t extent_bytes() const noexcept;
  bool is_contiguous() const noexcept;
  // "bf16[4096, 4096]", with strides appended when not contiguous.
  std::string str() const;

  friend bool operator==(const TensorSpec&, const TensorSpec&) noexcept;

 private:
  DType dtype_ = DType::f32;
  int rank_ = 0;
  std::array<std::int64_t, kMaxRank> shape_{};
  std::array<std::int64_t, kMaxRank> strides_{};
};

struct Tensor {
  TensorSpec spec;
  DevicePtr data = 0;
};

}  // namespace mojo
