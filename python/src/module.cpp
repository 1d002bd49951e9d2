// mojo_jit._C: the Python face of libmojo_jit (nanobind). It converts and forwards: arrays in (DLPack, the
// buffer protocol, __cuda_array_interface__, __array_interface__) to mojo::Tensor, mojo's typed errors out to
// Python exception classes with the same one-line messages, and the GIL released around compiles and launches.
// Everything a user calls is in mojo_jit/ (Python); this file only adds what Python cannot do itself.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "arrays.hpp"
#include "convert.hpp"
#include "eager.hpp"
#include "mojo/mojo.hpp"
#include "runtime.hpp"

namespace nb = nanobind;
using namespace nb::literals;

using namespace mojo::python;

namespace {

// ---- errors ---------------------------------------------------------------------------------------------------
// mojo's exception classes as Python classes with the same names and the same hierarchy; the invalid-argument ones
// are ValueErrors too (UnknownOpError also a KeyError), so `except ValueError` works as Python users expect.
struct ErrorTypes {
  PyObject *error, *invalid, *unknown_op, *dtype, *shape, *pointer, *arch, *compile, *device, *no_device, *cache_miss,
      *template_not_found, *internal;
};
ErrorTypes errors;

PyObject* new_error(nb::module_& m, const char* name, PyObject* base, PyObject* second_base = nullptr,
                    const char* doc = nullptr) {
  PyObject* bases = second_base ? PyTuple_Pack(2, base, second_base) : PyTuple_Pack(1, base);
  const std::string qualified = std::string("mojo_jit.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

void register_errors(nb::module_& m) {
  ErrorTypes& e = errors;
  e.error = new_error(m, "Error", PyExc_RuntimeError, nullptr, "Every failure mojo-jit reports: one line, what to do.");
  e.invalid = new_error(m, "InvalidArgumentError", e.error, PyExc_ValueError, "Bad input from the caller.");
  e.unknown_op = new_error(m, "UnknownOpError", e.invalid, PyExc_KeyError);
  e.dtype = new_error(m, "DTypeError", e.invalid, PyExc_TypeError);
  e.shape = new_error(m, "ShapeError", e.invalid);
  e.pointer = new_error(m, "PointerError", e.invalid);
  e.arch = new_error(m, "ArchError", e.invalid);
  e.compile = new_error(m, "CompileError", e.error, nullptr,
                        "A template that does not compile; .log holds the "
                        "compiler's whole output.");
  e.device = new_error(m, "DeviceError", e.error, nullptr,
                       "A CUDA driver call (or the CPU device) failed; .code is "
                       "the CUresult.");
  e.no_device = new_error(m, "NoDeviceError", e.device);
  e.cache_miss = new_error(m, "CacheMissError", e.error);
  e.template_not_found = new_error(m, "TemplateNotFoundError", e.error);
  e.internal = new_error(m, "InternalError", e.error, nullptr, "A bug in mojo-jit itself: please report it.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    auto raise = [](PyObject* type, const std::exception& x) { PyErr_SetString(type, x.what()); };
    // The exception object with an attribute: made here so that Python code sees e.log / e.code.
    auto raise_with = [](PyObject* type, const std::exception& x, const char* attr, nb::object value) {
      nb::object instance = nb::steal(PyObject_CallOneArg(type, nb::str(x.what()).ptr()));
      if (!instance.is_valid()) return;  // the call set its own error
      nb::setattr(instance, attr, value);
      PyErr_SetObject(type, instance.ptr());
    };
    try {
      std::rethrow_exception(p);
    } catch (const mojo::UnknownOpError& x) {
      raise(errors.unknown_op, x);
    } catch (const mojo::DTypeError& x) {
      raise(errors.dtype, x);
    } catch (const mojo::ShapeError& x) {
      raise(errors.shape, x);
    } catch (const mojo::PointerError& x) {
      raise(errors.pointer, x);
    } catch (const mojo::ArchError& x) {
      raise(errors.arch, x);
    } catch (const mojo::InvalidArgumentError& x) {
      raise(errors.invalid, x);
    } catch (const mojo::CompileError& x) {
      raise_with(errors.compile, x, "log", nb::str(x.log().c_str()));
    } catch (const mojo::NoDeviceError& x) {
      raise_with(errors.no_device, x, "code", nb::int_(x.code()));
    } catch (const mojo::DeviceError& x) {
      raise_with(errors.device, x, "code", nb::int_(x.code()));
    } catch (const mojo::CacheMissError& x) {
      raise(errors.cache_miss, x);
    } catch (const mojo::TemplateNotFoundError& x) {
      raise(errors.template_not_found, x);
    } catch (const mojo::InternalError& x) {
      raise(errors.internal, x);
    } catch (const mojo::Error& x) {
      raise(errors.error, x);
    }
  });
}

// Every op as data: what `mojo-jit list` prints.
nb::list op_list() {
  nb::list out;
  for (const mojo::OpDef* op : mojo::all_ops()) {
    nb::dict d;
    d["name"] = std::string(op->name());
    d["summary"] = std::string(op->summary());
    nb::list tensors, scalars, dtypes;
    nb::dict dtype_of;
    for (const auto& t : op->tensor_args()) {
      tensors.append(nb::make_tuple(std::string(t.name), std::string(t.role), std::string(t.doc)));
      if (!t.dtype_of.empty()) dtype_of[nb::str(std::string(t.name).c_str())] = std::string(t.dtype_of);
    }
    for (const auto& s : op->scalar_args())
      scalars.append(nb::make_tuple(std::string(s.name), s.default_value, std::string(s.doc)));
    for (mojo::DType t : op->dtypes()) dtypes.append(std::string(mojo::dtype_name(t)));
    d["tensors"] = tensors;
    d["scalars"] = scalars;
    d["dtypes"] = dtypes;
    d["dtype_of"] = dtype_of;  // output: the input whose dtype it takes (TensorArgInfo::dtype_of)
    d["template"] = std::string(op->template_file());
    d["example_shapes"] = std::string(op->example_shapes());
    out.append(d);
  }
  return out;
}

// Every tensor of `op` (name, dtype, shape) for the shapes given, the rest derived as `mojo-jit describe` does: how
// mojo_jit.ops allocates outputs. An absent optional tensor has shape None.
nb::list tensor_specs(const std::string& op_name, const std::string& dtype, nb::dict shapes, nb::dict scalar_dict) {
  const mojo::OpDef& op = mojo::find_op(op_name);
  std::vector<std::string> names;
  const auto scalars = scalars_of(scalar_dict, names);
  const auto specs = specs_of(op, dtype, shapes, scalars);
  nb::list out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    nb::object shape = nb::none();
    if (specs[i].rank() > 0) {
      nb::list dims;
      for (std::int64_t d : specs[i].shape()) dims.append(d);
      shape = nb::tuple(dims);
    }
    out.append(
        nb::make_tuple(std::string(op.tensor_args()[i].name), std::string(mojo::dtype_name(specs[i].dtype())), shape));
  }
  return out;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "mojo-jit's C++ runtime (use the mojo_jit package, not this module)";
  // The package keeps one Runtime per device for the life of the process (mojo_jit.runtime()), released after
  // nanobind's exit-time check would count it as a leak.
  nb::set_leak_warnings(false);
  register_errors(m);

  nb::class_<PyRuntime>(m, "Runtime")
      .def(
          "__init__",
          [](PyRuntime* self, const std::string& device, const std::string& cache_dir, bool disk_cache,
             const std::string& compiler, bool offline, bool debug_checks, bool autotune,
             const std::vector<std::string>& template_paths, bool programmatic_dependent_launch) {
            mojo::RuntimeOptions o;
            o.device = device;
            o.cache_dir = cache_dir;
            o.disk_cache = disk_cache;
            o.compiler = compiler;
            o.offline = offline;
            o.debug_checks = debug_checks;
            o.autotune = autotune;
            o.programmatic_dependent_launch = programmatic_dependent_launch;
            for (const std::string& p : template_paths) o.template_paths.emplace_back(p);
            new (self) PyRuntime(std::move(o));
          },
          "device"_a = "", "cache_dir"_a = "", "disk_cache"_a = true, "compiler"_a = "", "offline"_a = false,
          "debug_checks"_a = false, "autotune"_a = false, "template_paths"_a = std::vector<std::string>{},
          "programmatic_dependent_launch"_a = false)
      .def("launch", &PyRuntime::launch, "op"_a, "tensors"_a, "scalars"_a = nb::dict(), "stream"_a = 0)
      .def("emit", &PyRuntime::emit, "op"_a, "shapes"_a, "dtype"_a = "f32", "scalars"_a = nb::dict(), "arch"_a = "",
           "emit"_a = "ptx")
      .def("describe", &PyRuntime::describe, "op"_a, "shapes"_a, "dtype"_a = "f32", "scalars"_a = nb::dict(),
           "arch"_a = "", "sms"_a = 0)
      .def("prewarm", &PyRuntime::prewarm, "manifest"_a = "", "ops"_a = std::vector<std::string>{},
           "arch"_a = std::vector<std::string>{}, "emit"_a = "cubin", "jobs"_a = 0)
      .def("stats", &PyRuntime::stats)
      .def("device_info", &PyRuntime::device_info)
      .def_prop_ro("cache_dir", &PyRuntime::cache_dir)
      .def_prop_ro("compiler", &PyRuntime::compiler);

  nb::class_<TorchEager>(m, "TorchEager")
      .def(nb::init<const std::string&, const std::vector<std::string>&, std::size_t, const std::vector<std::string>&,
                    nb::object, nb::object, nb::dict>(),
           "op"_a, "args"_a, "required"_a, "returned"_a, "plan"_a, "runtime"_a, "torch"_a)
      .def("call", &TorchEager::call)
      .def("fast", &TorchEager::fast)
      .def_prop_ro("plans", &TorchEager::plans);

  m.def("ops", &op_list);
  m.def("tensor_specs", &tensor_specs, "op"_a, "dtype"_a, "shapes"_a, "scalars"_a = nb::dict());
  m.def(
      "cache",
      [](const std::string& action, const std::string& cache_dir, std::uint64_t max_bytes, const std::string& remote) {
        return from_json(mojo::inspect::cache_action(action, cache_dir, max_bytes, remote).json);
      },
      "action"_a, "cache_dir"_a = "", "max_bytes"_a = 0, "remote"_a = "");
  // An array as the launch sees it: (dtype, shape, device) with device "cpu" or "cuda:N"; the errors a launch
  // would raise for it, naming it `name`.
  m.def(
      "array_spec",
      [](nb::handle array, const std::string& name) {
        const ArrayView v = view_of(array, name);
        nb::list dims;
        for (std::int64_t d : v.spec.shape()) dims.append(d);
        return nb::make_tuple(std::string(mojo::dtype_name(v.spec.dtype())), nb::tuple(dims),
                              v.on_host ? std::string("cpu") : fmt::format("cuda:{}", v.device_id));
      },
      "array"_a, "name"_a = "array");
  m.def("device_available", &mojo::device_available);
  m.def("_stop_launches_at_sink", &stop_launches_at_sink, "on"_a,
        "Benchmarks only: while on, launches stop before the device runs them, host arrays unstaged.");
  m.attr("__version__") = MOJO_JIT_VERSION;
}
