// mojo_jit._check: the check library's pieces (libmojo_jit_check) for Python tests and users who compare: each op's
// float64 reference, the random inputs it accepts, its tolerance and the comparison `mojo-jit run` makes. Apart from
// mojo_jit._C so that a serving process never loads the references.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "convert.hpp"
#include "mojo/check.hpp"
#include "mojo/mojo.hpp"

namespace nb = nanobind;
using namespace nb::literals;

using namespace mojo::python;

namespace {

using HostArray = nb::ndarray<nb::c_contig, nb::device::cpu>;

// The op's random inputs (OpCheck::random_data) for the tensors it reads, as bytes in tensor order; None for the
// tensors it only writes and for absent ones.
nb::list random_inputs(const std::string& op_name, const std::string& dtype, nb::dict shapes, nb::dict scalar_dict,
                       std::uint32_t seed) {
  const mojo::OpDef& op = mojo::find_op(op_name);
  std::vector<std::string> names;
  const auto scalars = scalars_of(scalar_dict, names);
  const auto specs = specs_of(op, dtype, shapes, scalars);
  const mojo::OpCheck& check = mojo::find_check(op_name);
  nb::list out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].rank() == 0 || op.tensor_args()[i].role == std::string_view("out")) {
      out.append(nb::none());
      continue;
    }
    const std::vector<std::uint8_t> data = check.random_data(i, specs, scalars, seed);
    out.append(nb::bytes(reinterpret_cast<const char*>(data.data()), data.size()));
  }
  return out;
}

// Runs the op's float64 reference on host arrays (contiguous, in tensor order, None for absent ones): reads the
// inputs, writes the outputs and in-out tensors in place.
void reference(const std::string& op_name, nb::list arrays, nb::dict scalar_dict) {
  const mojo::OpDef& op = mojo::find_op(op_name);
  if (arrays.size() != op.tensor_args().size())
    throw mojo::InvalidArgumentError(
        fmt::format("{}: {} arrays given, the op has {} tensors", op_name, arrays.size(), op.tensor_args().size()));
  std::vector<std::string> names;
  const auto scalars = scalars_of(scalar_dict, names);
  std::vector<mojo::TensorSpec> specs(arrays.size());
  std::vector<std::vector<std::uint8_t>> data(arrays.size());
  std::vector<HostArray> views(arrays.size());
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].is_none()) continue;
    const std::string_view name = op.tensor_args()[i].name;
    if (!nb::try_cast(arrays[i], views[i], false))
      throw mojo::InvalidArgumentError(fmt::format("{}: tensor {} must be a contiguous host array", op_name, name));
    const HostArray& a = views[i];
    std::vector<std::int64_t> shape(a.ndim());
    for (std::size_t d = 0; d < a.ndim(); ++d) shape[d] = std::int64_t(a.shape(d));
    const mojo::DType dtype = dtype_from_dlpack(a.dtype(), name);
    specs[i] = mojo::TensorSpec(dtype, shape);
    data[i].resize(a.nbytes());
    std::memcpy(data[i].data(), a.data(), a.nbytes());
  }
  {
    nb::gil_scoped_release unlocked;
    mojo::find_check(op_name).reference(specs, data, scalars);
  }
  for (std::size_t i = 0; i < arrays.size(); ++i)
    if (!arrays[i].is_none() && op.tensor_args()[i].role != std::string_view("in"))
      std::memcpy(views[i].data(), data[i].data(), data[i].size());
}

// How far output `tensor` may be from the reference for these shapes: (rtol, atol), as check_op uses it.
nb::tuple tolerance(const std::string& op_name, const std::string& dtype, nb::dict shapes, nb::dict scalar_dict,
                    const std::string& tensor) {
  const mojo::OpDef& op = mojo::find_op(op_name);
  op.check_tensor_name(tensor);
  std::vector<std::string> names;
  const auto scalars = scalars_of(scalar_dict, names);
  const auto specs = specs_of(op, dtype, shapes, scalars);
  std::size_t i = 0;
  while (op.tensor_args()[i].name != tensor) ++i;
  const mojo::Tolerance t = mojo::find_check(op_name).tolerance(specs[i].dtype(), specs, scalars);
  return nb::make_tuple(t.rtol, t.atol);
}

// The elements of `got` outside (rtol, atol) of `want` (contiguous host arrays of one dtype), and a description of
// the first few: mojo::mismatches.
nb::tuple mismatches(HostArray got, HostArray want, double rtol, double atol) {
  if (got.nbytes() != want.nbytes() || got.dtype() != want.dtype())
    throw mojo::InvalidArgumentError("mismatches: the two arrays differ in size or element type");
  const mojo::DType dtype = dtype_from_dlpack(got.dtype(), "got");
  auto bytes = [](const HostArray& a) {
    const auto* p = static_cast<const std::uint8_t*>(a.data());
    return std::vector<std::uint8_t>(p, p + a.nbytes());
  };
  std::vector<std::string> report;
  const std::size_t n = mojo::mismatches(dtype, bytes(got), bytes(want), {rtol, atol}, &report);
  return nb::make_tuple(n, report);
}

}  // namespace

NB_MODULE(_check, m) {
  m.doc() = "mojo-jit's op references, random inputs and tolerances (libmojo_jit_check)";
  nb::module_::import_("mojo_jit._C");  // its exception translator turns mojo's errors into mojo_jit's classes
  m.def("random_inputs", &random_inputs, "op"_a, "dtype"_a, "shapes"_a, "scalars"_a = nb::dict(), "seed"_a = 0);
  m.def("reference", &reference, "op"_a, "arrays"_a, "scalars"_a = nb::dict());
  m.def("tolerance", &tolerance, "op"_a, "dtype"_a, "shapes"_a, "scalars"_a, "tensor"_a);
  m.def("mismatches", &mismatches, "got"_a, "want"_a, "rtol"_a, "atol"_a);
}
