#include "mojo/tensor.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "mojo/error.hpp"

namespace mojo {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
  std::string_view aliases[3];
};
constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "f32", 4, {"float32", "float", "fp32"}},
    {DType::f16, "f16", 2, {"float16", "half", "fp16"}},
    {DType::bf16, "bf16", 2, {"bfloat16", "", ""}},
    {DType::i32, "i32", 4, {"int32", "int", ""}},
    {DType::i64, "i64", 8, {"int64", "long", ""}},
    {DType::u8, "u8", 1, {"uint8", "byte", ""}},
};
const DTypeInfo& info(DType d) { return kDTypes[static_cast<int>(d)]; }
}  // namespace

std::size_t dtype_size(DType dtype) noexcept { return info(dtype).size; }
std::string_view dtype_name(DType dtype) noexcept { return info(dtype).name; }

DType parse_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) return d.dtype;
    for (std::string_view alias : d.aliases)
      if (!alias.empty() && name == alias) return d.dtype;
  }
  throw DTypeError(fmt::format("unknown dtype '{}': expected one of f32, f16, bf16, i32, i64, u8", name));
}

TensorSpec::TensorSpec(DType dtype, std::initializer_list<std::int64_t> shape)
    : TensorSpec(dtype, std::span<const std::int64_t>(shape.begin(), shape.size())) {}

TensorSpec::TensorSpec(DType dtype, std::span<const std::int64_t> shape) : dtype_(dtype) {
  if (shape.size() > kMaxRank)
    throw ShapeError(fmt::format("rank {} exceeds the maximum rank {}", shape.size(), kMaxRank));
  rank_ = int(shape.size());
  std::int64_t stride = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape[i] < 0) throw ShapeError(fmt::format("negative dimension {} in shape", shape[i]));
    shape_[i] = shape[i];
    strides_[i] = stride;
    // Element counts and byte sizes must fit in 63 bits with room for the dtype size.
    if (__builtin_mul_overflow(stride, std::max<std::int64_t>(shape[i], 1), &stride) || stride > (std::int64_t(1) << 59))
      throw ShapeError(fmt::format("shape [{}] has too many elements (more than 2^59)", fmt::join(shape, ", ")));
  }
}

TensorSpec::TensorSpec(DType dtype, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> strides)
    : TensorSpec(dtype, shape) {
  if (strides.size() != shape.size())
    throw ShapeError(fmt::format("{} strides given for a rank-{} shape", strides.size(), shape.size()));
  if (numel() == 0) return;  // strides of no element mean nothing (numpy gives an empty array 0s): it keeps row-major's
  std::int64_t extent = 0;  // the last element's offset: must fit like the element count
  for (int i = 0; i < rank_; ++i) {
    if (strides[i] < 0) throw ShapeError(fmt::format("negative stride {} in tensor", strides[i]));
    strides_[i] = strides[i];
    std::int64_t step = 0;
    if (shape_[i] > 0 && (__builtin_mul_overflow(shape_[i] - 1, strides[i], &step) ||
                          __builtin_add_overflow(extent, step, &extent) || extent > (std::int64_t(1) << 59)))
      throw ShapeError(fmt::format("strides [{}] reach past 2^59 elements", fmt::join(strides, ", ")));
  }
}

std::int64_t TensorSpec::numel() const noexcept {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

std::size_t TensorSpec::extent_bytes() const noexcept {
  std::int64_t last = 0;  // the last element's offset
  for (int i = 0; i < rank_; ++i) {
    if (shape_[i] == 0) return 0;
    last += (shape_[i] - 1) * strides_[i];
  }
  return std::size_t(last + 1) * dtype_size(dtype_);
}

bool TensorSpec::is_contiguous() const noexcept {
  if (numel() == 0) return true;  // no element to be out of place (as torch says); its strides are any
  std::int64_t expected = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string TensorSpec::str() const {
  std::string s = fmt::format("{}[{}]", dtype_name(dtype_), fmt::join(shape(), ", "));
  if (!is_contiguous()) s += fmt::format(" strides [{}]", fmt::join(strides(), ", "));
  return s;
}

bool operator==(const TensorSpec& a, const TensorSpec& b) noexcept {
  return a.dtype_ == b.dtype_ && a.rank_ == b.rank_ &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin()) &&
         std::equal(a.strides().begin(), a.strides().end(), b.strides().begin());
}

}  // namespace mojo
