// Array arguments as a launch sees them (arrays.hpp).
#include "arrays.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "convert.hpp"

namespace mojo::python {

mojo::TensorSpec spec_of(mojo::DType dtype, const std::vector<std::int64_t>& shape,
                         const std::vector<std::int64_t>& strides, std::string_view name) {
  if (shape.size() > std::size_t(mojo::TensorSpec::kMaxRank))
    throw mojo::ShapeError(
        fmt::format("tensor {}: rank {} is more than {}", name, shape.size(), mojo::TensorSpec::kMaxRank));
  for (std::int64_t s : strides)
    if (s < 0) throw mojo::ShapeError(fmt::format("tensor {}: a negative stride ({}); give a copy", name, s));
  if (shape.empty())  // a Python scalar array: one element (rank 0 means absent here)
    return mojo::TensorSpec(dtype, {1});
  return mojo::TensorSpec(dtype, shape, strides);
}

namespace {

// The typestr of __array_interface__ / __cuda_array_interface__ ("<f4", "<f2", "<i8", "|u1"; bf16 has none).
mojo::DType dtype_from_typestr(const std::string& t, std::string_view name) {
  const std::string s = t.size() == 3 && (t[0] == '<' || t[0] == '|' || t[0] == '=') ? t.substr(1) : t;
  if (s == "f4") return mojo::DType::f32;
  if (s == "f2") return mojo::DType::f16;
  if (s == "i4") return mojo::DType::i32;
  if (s == "i8") return mojo::DType::i64;
  if (s == "u1") return mojo::DType::u8;
  throw mojo::DTypeError(
      fmt::format("tensor {}: typestr '{}' is none of <f4, <f2, <i4, <i8, |u1 (bf16 arrays come in "
                  "through DLPack)",
                  name, t));
}

// The array interface protocols (numpy's __array_interface__, Numba's and CuPy's __cuda_array_interface__).
ArrayView from_interface(nb::handle obj, const char* attr, bool on_host, std::string_view name) {
  nb::dict d = nb::cast<nb::dict>(obj.attr(attr));
  ArrayView v;
  v.on_host = on_host;
  const mojo::DType dtype = dtype_from_typestr(nb::cast<std::string>(d["typestr"]), name);
  std::vector<std::int64_t> shape, strides;
  for (nb::handle s : nb::cast<nb::tuple>(d["shape"])) shape.push_back(nb::cast<std::int64_t>(s));
  if (d.contains("strides") && !d["strides"].is_none()) {
    for (nb::handle s : nb::cast<nb::tuple>(d["strides"])) {
      const std::int64_t bytes = nb::cast<std::int64_t>(s);
      if (bytes % std::int64_t(mojo::dtype_size(dtype)) != 0)
        throw mojo::ShapeError(
            fmt::format("tensor {}: stride of {} bytes is no multiple of the element size", name, bytes));
      strides.push_back(bytes / std::int64_t(mojo::dtype_size(dtype)));
    }
  } else {
    strides.assign(shape.size(), 1);
    for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  }
  nb::tuple data = nb::cast<nb::tuple>(d["data"]);
  v.data = nb::cast<std::uintptr_t>(data[0]);
  v.readonly = nb::cast<bool>(data[1]);
  v.spec = spec_of(dtype, shape, strides, name);
  return v;
}

// A DLPack or buffer-protocol array (nb::ndarray<> if writable, nb::ndarray<nb::ro> if not).
template <class Array>
ArrayView from_ndarray(const Array& a, bool readonly, std::string_view name) {
  ArrayView v;
  std::vector<std::int64_t> shape(a.ndim()), strides(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = std::int64_t(a.shape(i));
    strides[i] = a.stride(i);
  }
  v.spec = spec_of(dtype_from_dlpack(a.dtype(), name), shape, strides, name);
  v.data = reinterpret_cast<std::uintptr_t>(a.data());
  const int type = a.device_type();
  v.on_host = type == nb::device::cpu::value || type == nb::device::cuda_host::value;
  if (!v.on_host && type != nb::device::cuda::value && type != nb::device::cuda_managed::value)
    throw mojo::InvalidArgumentError(
        fmt::format("tensor {}: on a device of DLPack type {}, neither the host nor a CUDA GPU", name, type));
  v.device_id = a.device_id();
  v.readonly = readonly;
  return v;
}

}  // namespace

ArrayView view_of(nb::handle obj, std::string_view name) {
  if (obj.is_none()) return {};
  // mojo_jit.ops's form of a torch tensor, read in Python off its attributes (DLPack's round trip costs 4x more):
  // (dtype, shape, strides in elements, address, device: -1 for the host).
  if (PyTuple_Check(obj.ptr()) && PyTuple_GET_SIZE(obj.ptr()) == 5) {
    nb::tuple t = nb::borrow<nb::tuple>(obj);
    std::vector<std::int64_t> shape, strides;
    for (nb::handle d : t[1]) shape.push_back(nb::cast<std::int64_t>(d));
    for (nb::handle d : t[2]) strides.push_back(nb::cast<std::int64_t>(d));
    ArrayView v;
    v.spec = spec_of(mojo::parse_dtype(nb::cast<std::string>(t[0])), shape, strides, name);
    v.data = nb::cast<std::uintptr_t>(t[3]);
    const int device = nb::cast<int>(t[4]);
    v.on_host = device < 0;
    v.device_id = std::max(device, 0);
    return v;
  }
  // DLPack (torch, jax, cupy, numpy) and the buffer protocol: writable first, then read-only.
  if (nb::ndarray<> a; nb::try_cast(obj, a, /*convert=*/false)) return from_ndarray(a, false, name);
  if (nb::ndarray<nb::ro> a; nb::try_cast(obj, a, /*convert=*/false)) return from_ndarray(a, true, name);
  if (nb::hasattr(obj, "__cuda_array_interface__")) return from_interface(obj, "__cuda_array_interface__", false, name);
  if (nb::hasattr(obj, "__array_interface__")) return from_interface(obj, "__array_interface__", true, name);
  throw mojo::InvalidArgumentError(fmt::format(
      "tensor {}: a {} is no array (give a DLPack or buffer-protocol object, or one with __cuda_array_interface__ "
      "or __array_interface__: numpy, torch, cupy, jax...)",
      name, nb::inst_name(obj).c_str()));
}

}  // namespace mojo::python
