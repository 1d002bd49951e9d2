// What both Python modules convert the same way: DLPack element types, scalars, shapes and tensor specs from Python
// objects.
#pragma once

#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <string_view>
#include <vector>

#include "inspect.hpp"
#include "mojo/mojo.hpp"

namespace mojo::python {

namespace nb = nanobind;

inline mojo::DType dtype_from_dlpack(nb::dlpack::dtype d, std::string_view name) {
  using Code = nb::dlpack::dtype_code;
  if (d.lanes == 1) {
    if (d.code == uint8_t(Code::Float) && d.bits == 32) return mojo::DType::f32;
    if (d.code == uint8_t(Code::Float) && d.bits == 16) return mojo::DType::f16;
    if (d.code == uint8_t(Code::Bfloat) && d.bits == 16) return mojo::DType::bf16;
    if (d.code == uint8_t(Code::Int) && d.bits == 32) return mojo::DType::i32;
    if (d.code == uint8_t(Code::Int) && d.bits == 64) return mojo::DType::i64;
    if (d.code == uint8_t(Code::UInt) && d.bits == 8) return mojo::DType::u8;
  }
  static constexpr const char* kCodeNames[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string type = fmt::format("{}{}{}", d.code < 7 ? kCodeNames[d.code] : "code", d.bits,
                                       d.lanes == 1 ? std::string() : fmt::format("x{}", d.lanes));
  throw mojo::DTypeError(fmt::format("tensor {}: element type {} is none of f32, f16, bf16, i32, i64, u8", name, type));
}

inline mojo::Scalar to_scalar(nb::handle value, std::string_view name) {
  if (PyBool_Check(value.ptr()) || PyLong_Check(value.ptr())) return mojo::Scalar(nb::cast<long long>(value));
  if (PyFloat_Check(value.ptr())) return mojo::Scalar(nb::cast<double>(value));
  if (nb::hasattr(value, "__index__")) return mojo::Scalar(nb::cast<long long>(value.attr("__index__")()));
  if (nb::hasattr(value, "__float__")) return mojo::Scalar(nb::cast<double>(value.attr("__float__")()));
  throw mojo::InvalidArgumentError(fmt::format("scalar {}: a {} is no number", name, nb::inst_name(value).c_str()));
}

// Scalars by name: the names live in `names` (ScalarArg holds a string_view).
inline std::vector<mojo::ScalarArg> scalars_of(nb::dict d, std::vector<std::string>& names) {
  names.reserve(d.size());
  std::vector<mojo::ScalarArg> out;
  for (auto [key, value] : d) {
    names.push_back(nb::cast<std::string>(key));
    out.push_back({names.back(), to_scalar(value, names.back())});
  }
  return out;
}

inline mojo::ShapeMap shapes_of(nb::dict d) {
  mojo::ShapeMap out;
  for (auto [key, value] : d) {
    std::vector<std::int64_t> dims;
    if (PyLong_Check(value.ptr()))
      dims.push_back(nb::cast<std::int64_t>(value));
    else
      for (nb::handle s : value) dims.push_back(nb::cast<std::int64_t>(s));
    out.emplace(nb::cast<std::string>(key), std::move(dims));
  }
  return out;
}

// A JSON value as Python's json module reads it.
inline nb::object from_json(const nlohmann::json& j) {
  return nb::module_::import_("json").attr("loads")(nb::str(j.dump().c_str()));
}

// Every tensor spec of `op` for the shapes named (a dict of name -> dims), the rest derived as `mojo-jit describe`
// derives them.
inline std::vector<mojo::TensorSpec> specs_of(const mojo::OpDef& op, const std::string& dtype, nb::dict shapes,
                                              mojo::ScalarList scalars) {
  return op.specs_from_shapes(mojo::parse_dtype(dtype), shapes_of(shapes), scalars);
}

}  // namespace mojo::python
