// Argument checks every OpDef shares; each throws a typed error naming the op
// and the tensor.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <string>
#include <string_view>

#include "mojo/error.hpp"
#include "mojo/op.hpp"

namespace mojo::checks {

// The storage types of the floating-point ops.
inline constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Bytes per load/store of a kernel specialized with params "dtype" and "vec".
inline unsigned vector_bytes(const Params& p) {
  return unsigned(p.get("vec") * std::int64_t(dtype_size(p.dtype("dtype"))));
}

// Largest power of two dividing the address, capped at 256; a null pointer
// (compiling with no memory) counts as fully aligned.
inline unsigned alignment_of(DevicePtr p) noexcept {
  if (p == 0) return 256;
  unsigned a = 1;
  while (a < 256 && p % (a * 2) == 0) a *= 2;
  return a;
}

// The most elements of `element_bytes` each (a power of two, at most 16 bytes) that one load may move where
// every access starts `alignment`-aligned and the vectors must tile `count` elements exactly.
inline std::int64_t widest_vector(std::int64_t count, std::int64_t element_bytes, unsigned alignment) noexcept {
  std::int64_t vec = 16 / element_bytes;
  while (vec > 1 && (count % vec != 0 || alignment < vec * element_bytes)) vec /= 2;
  return vec;
}

inline void expect_dtype_in(std::string_view op, std::string_view arg, DType dtype,
                            std::span<const DType> allowed) {
  if (std::find(allowed.begin(), allowed.end(), dtype) != allowed.end()) return;
  std::vector<std::string_view> names;
  for (DType d : allowed) names.push_back(dtype_name(d));
  throw DTypeError(fmt::format("{}: {} has dtype {}; supported: {}", op, arg, dtype_name(dtype),
                               fmt::join(names, ", ")));
}

inline void expect_same_dtype(std::string_view op, std::string_view arg, const TensorSpec& t,
                              std::string_view ref_arg, const TensorSpec& ref) {
  if (t.dtype() != ref.dtype())
    throw DTypeError(fmt::format("{}: {} has dtype {} but {} has dtype {}; they must match", op, arg,
                                 dtype_name(t.dtype()), ref_arg, dtype_name(ref.dtype())));
}

inline void expect_contiguous(std::string_view op, std::string_view arg, const TensorSpec& t) {
  if (!t.is_contiguous())
    throw ShapeError(fmt::format("{}: {} {} is not contiguous; pass a contiguous (row-major) tensor", op,
                                 arg, t.str()));
}

inline void expect_same_shape(std::string_view op, std::string_view arg, const TensorSpec& t,
                              std::string_view ref_arg, const TensorSpec& ref) {
  if (!std::ranges::equal(t.shape(), ref.shape()))
    throw ShapeError(fmt::format("{}: {} has shape [{}] but {} has shape [{}]; they must match", op, arg,
                                 fmt::join(t.shape(), ", "), ref_arg, fmt::join(ref.shape(), ", ")));
}

// A contiguous tensor of exactly `shape` and one of `dtypes` (per-request parameters, routing tables).
inline void expect_exact(std::string_view op, std::string_view arg, const TensorSpec& t,
                         std::initializer_list<std::int64_t> shape, std::span<const DType> dtypes) {
  expect_dtype_in(op, arg, t.dtype(), dtypes);
  if (!std::ranges::equal(t.shape(), shape) || !t.is_contiguous())
    throw ShapeError(fmt::format("{}: {} is {}; expected a contiguous [{}]", op, arg, t.str(), fmt::join(shape, ", ")));
}

// Non-null and aligned to `bytes` (the vector width the kernel was specialized for).
inline void expect_pointer(std::string_view op, std::string_view arg, DevicePtr p, unsigned bytes) {
  if (p == 0) throw PointerError(fmt::format("{}: {} is a null pointer", op, arg));
  if (p % bytes != 0)
    throw PointerError(fmt::format("{}: {} at {:#x} is not {}-byte aligned as this kernel needs", op, arg,
                                   p, bytes));
}
// The same for a tensor's data, which may be anything where it has no element to read or write (torch gives an
// empty tensor a null pointer).
inline void expect_pointer(std::string_view op, std::string_view arg, const Tensor& t, unsigned bytes) {
  if (t.spec.numel() != 0) expect_pointer(op, arg, t.data, bytes);
}

// The `path` scalar of the ops with an sm_80 and an sm_90a kernel: 0 (the heuristic's choice), 80 or 90.
inline int kernel_path(const OpDef& op, ScalarList scalars) {
  const double v = op.scalar(scalars, "path");
  if (v != 0 && v != 80 && v != 90)
    throw InvalidArgumentError(
        fmt::format("{}: path is {}; expected 0 (the heuristic's choice), 80 or 90", op.name(), v));
  return int(v);
}

}  // namespace mojo::checks

namespace mojo::shapes {

// The shape the user gave for `name`, or ShapeError saying how to give it.
inline const std::vector<std::int64_t>& required(std::string_view op, const ShapeMap& shapes, std::string_view name,
                                                 std::string_view example) {
  auto it = shapes.find(name);
  if (it == shapes.end())
    throw ShapeError(fmt::format("{}: give the shape of {}, e.g. {}", op, name, shapes_as_options(example)));
  if (it->second.empty())  // a rank-0 tensor stands for an absent one
    throw ShapeError(fmt::format("{}: {} has no dims (a scalar); it needs at least one", op, name));
  return it->second;
}

// The shape given for `name`, else `fallback`.
inline std::vector<std::int64_t> value_or(const ShapeMap& shapes, std::string_view name,
                                          std::vector<std::int64_t> fallback) {
  auto it = shapes.find(name);
  return it == shapes.end() ? fallback : it->second;
}

// An optional tensor: the spec of the shape the user gave for `name`, or absent (rank 0) when none.
inline TensorSpec optional(const ShapeMap& shapes, std::string_view name, DType dtype) {
  auto it = shapes.find(name);
  return it == shapes.end() ? TensorSpec() : TensorSpec(dtype, it->second);
}

}  // namespace mojo::shapes
