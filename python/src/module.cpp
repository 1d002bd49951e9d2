// mojo_jit._C: the Python face of libmojo_jit (nanobind). It converts and forwards: arrays in (DLPack, the
// buffer protocol, __cuda_array_interface__, __array_interface__) to mojo::Tensor, mojo's typed errors out to
// Python exception classes with the same one-line messages, and the GIL released around compiles and launches.
// Everything a user calls is in mojo_jit/ (Python); this file only adds what Python cannot do itself.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "convert.hpp"
#include "mojo/mojo.hpp"

namespace nb = nanobind;
using namespace nb::literals;

using namespace mojo::python;

namespace {

// ---- errors ---------------------------------------------------------------------------------------------------
// mojo's exception classes as Python classes with the same names and the same hierarchy; the invalid-argument ones
// are ValueErrors too (UnknownOpError also a KeyError), so `except ValueError` works as Python users expect.
struct ErrorTypes {
  PyObject *error, *invalid, *unknown_op, *dtype, *shape, *pointer, *arch, *compile, *device, *no_device, *cache_miss,
      *template_not_found;
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
  e.compile = new_error(m, "CompileError", e.error, nullptr, "A template that does not compile; .log holds the "
                                                              "compiler's whole output.");
  e.device = new_error(m, "DeviceError", e.error, nullptr, "A CUDA driver call (or the CPU device) failed; .code is "
                                                            "the CUresult.");
  e.no_device = new_error(m, "NoDeviceError", e.device);
  e.cache_miss = new_error(m, "CacheMissError", e.error);
  e.template_not_found = new_error(m, "TemplateNotFoundError", e.error);
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
    } catch (const mojo::Error& x) {
      raise(errors.error, x);
    }
  });
}

// ---- arrays -----------------------------------------------------------------------------------------------------
// One array argument as the launch sees it.
struct ArrayView {
  mojo::TensorSpec spec;  // rank 0: absent (None)
  std::uintptr_t data = 0;
  bool on_host = true;  // host memory (numpy), else a GPU's
  int device_id = 0;
  bool readonly = false;
};

// The typestr of __array_interface__ / __cuda_array_interface__ ("<f4", "<f2", "<i8", "|u1"; bf16 has none).
mojo::DType dtype_from_typestr(const std::string& t, std::string_view name) {
  const std::string s = t.size() == 3 && (t[0] == '<' || t[0] == '|' || t[0] == '=') ? t.substr(1) : t;
  if (s == "f4") return mojo::DType::f32;
  if (s == "f2") return mojo::DType::f16;
  if (s == "i4") return mojo::DType::i32;
  if (s == "i8") return mojo::DType::i64;
  if (s == "u1") return mojo::DType::u8;
  throw mojo::DTypeError(fmt::format("tensor {}: typestr '{}' is none of <f4, <f2, <i4, <i8, |u1 (bf16 arrays come in "
                                     "through DLPack)",
                                     name, t));
}

mojo::TensorSpec spec_of(mojo::DType dtype, const std::vector<std::int64_t>& shape,
                         const std::vector<std::int64_t>& strides, std::string_view name) {
  if (shape.size() > std::size_t(mojo::TensorSpec::kMaxRank))
    throw mojo::ShapeError(fmt::format("tensor {}: rank {} is more than {}", name, shape.size(),
                                       mojo::TensorSpec::kMaxRank));
  for (std::int64_t s : strides)
    if (s < 0) throw mojo::ShapeError(fmt::format("tensor {}: a negative stride ({}); give a copy", name, s));
  if (shape.empty())  // a Python scalar array: one element (rank 0 means absent here)
    return mojo::TensorSpec(dtype, {1});
  return mojo::TensorSpec(dtype, shape, strides);
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
        throw mojo::ShapeError(fmt::format("tensor {}: stride of {} bytes is no multiple of the element size", name,
                                           bytes));
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

// Bytes from a tensor's first element to one past its last (strides >= 0).
std::size_t extent_bytes(const mojo::TensorSpec& s) {
  std::int64_t last = 0;
  for (int i = 0; i < s.rank(); ++i) {
    if (s.dim(i) == 0) return 0;
    last += (s.dim(i) - 1) * s.stride(i);
  }
  return std::size_t(last + 1) * mojo::dtype_size(s.dtype());
}

nb::object from_json(const nlohmann::json& j) {
  return nb::module_::import_("json").attr("loads")(nb::str(j.dump().c_str()));
}

// ---- the runtime ------------------------------------------------------------------------------------------------
class PyRuntime {
 public:
  explicit PyRuntime(mojo::RuntimeOptions options) : rt_(std::move(options)) {}

  // One launch. Host arrays (numpy) are staged: copied into device memory (on the CPU device: poisoned, guarded
  // allocations, so a store past a buffer is caught), the kernel launched, the tensors it writes copied back. Device
  // arrays are launched in place, asynchronously on `stream`.
  void launch(const std::string& op_name, nb::sequence tensor_objs, nb::dict scalar_dict, std::uintptr_t stream) {
    const mojo::OpDef& op = mojo::find_op(op_name);
    const auto infos = op.tensor_args();
    std::vector<ArrayView> views;
    for (nb::handle t : tensor_objs) {
      const std::size_t i = views.size();
      views.push_back(view_of(t, i < infos.size() ? infos[i].name : std::string_view("?")));
    }
    std::vector<std::string> names;
    const std::vector<mojo::ScalarArg> scalars = scalars_of(scalar_dict, names);
    nb::gil_scoped_release unlocked;
    const mojo::Device& device = rt_.device();
    std::vector<mojo::Tensor> tensors(views.size());
    struct Staged {
      std::uintptr_t host;
      std::size_t bytes;
      std::shared_ptr<mojo::DeviceBuffer> buffer;
      bool written = false;
    };
    std::vector<Staged> staged;
    for (std::size_t i = 0; i < views.size(); ++i) {
      const ArrayView& v = views[i];
      const std::string_view name = i < infos.size() ? infos[i].name : std::string_view("?");
      const bool writes = i < infos.size() && infos[i].role != std::string_view("in");
      if (v.spec.rank() == 0) continue;  // absent
      if (writes && v.readonly)
        throw mojo::InvalidArgumentError(fmt::format("{}: tensor {} is read-only, and the op writes it", op_name, name));
      if (!v.on_host) {
        if (device.is_cpu())
          throw mojo::InvalidArgumentError(fmt::format(
              "{}: tensor {} is on GPU {}, and this runtime launches on the CPU device; give host arrays (numpy)",
              op_name, name, v.device_id));
        if (v.device_id != device.ordinal())
          throw mojo::InvalidArgumentError(fmt::format("{}: tensor {} is on GPU {}, and this runtime launches on GPU {}",
                                                       op_name, name, v.device_id, device.ordinal()));
        tensors[i] = {v.spec, v.data};
        continue;
      }
      // The same host memory twice (out given as its own residual) is one staged buffer, as on the GPU.
      const std::size_t bytes = extent_bytes(v.spec);
      auto same = std::find_if(staged.begin(), staged.end(),
                               [&](const Staged& s) { return s.host == v.data && s.bytes == bytes; });
      if (same == staged.end()) {
        auto buffer = std::make_shared<mojo::DeviceBuffer>(std::max<std::size_t>(bytes, 1));
        if (bytes) buffer->copy_from_host(reinterpret_cast<const void*>(v.data), bytes);
        staged.push_back({v.data, bytes, std::move(buffer)});
        same = staged.end() - 1;
      }
      same->written |= writes;
      tensors[i] = {v.spec, same->buffer->ptr()};
    }
    const auto stream_handle = reinterpret_cast<mojo::StreamHandle>(stream);
    rt_.launch(op_name, tensors, scalars, stream_handle);
    if (staged.empty()) return;
    device.synchronize();
    for (const Staged& s : staged)
      if (s.written && s.bytes) s.buffer->copy_to_host(reinterpret_cast<void*>(s.host), s.bytes);
  }

  // What one specialization compiles to: PTX or LLVM IR as text, a cubin or the CPU device's shared object as bytes.
  nb::object emit(const std::string& op_name, nb::dict shapes, const std::string& dtype, nb::dict scalar_dict,
                  const std::string& arch, const std::string& emit) {
    const mojo::OpDef& op = mojo::find_op(op_name);
    std::vector<std::string> names;
    const auto scalars = scalars_of(scalar_dict, names);
    const auto tensors = tensors_for(op, shapes, dtype, scalars);
    const mojo::Emit kind = mojo::parse_emit(emit);
    const mojo::Target target = mojo::inspect::target_or_default(arch);
    std::shared_ptr<const std::string> binary;
    {
      nb::gil_scoped_release unlocked;
      binary = rt_.compile(op_name, tensors, scalars, target, kind).binary;
    }
    if (kind == mojo::Emit::cubin || kind == mojo::Emit::host) return nb::bytes(binary->data(), binary->size());
    std::size_t size = binary->size();
    while (size > 0 && (*binary)[size - 1] == '\0') --size;  // PTX handed to the driver ends in NUL
    return nb::str(binary->data(), size);
  }

  nb::object describe(const std::string& op_name, nb::dict shapes, const std::string& dtype, nb::dict scalar_dict,
                      const std::string& arch, int sms) {
    const mojo::OpDef& op = mojo::find_op(op_name);
    std::vector<std::string> names;
    const auto scalars = scalars_of(scalar_dict, names);
    const auto tensors = tensors_for(op, shapes, dtype, scalars);
    const mojo::Target target = mojo::inspect::target_or_default(arch);
    nlohmann::json d;
    {
      nb::gil_scoped_release unlocked;
      d = mojo::inspect::describe(rt_, op, tensors, scalars, target, mojo::Emit::cubin, sms, /*model=*/true);
    }
    return from_json(d);
  }

  // Compiles specializations into the cache: a TOML manifest's, or every dtype of `ops` at their example shapes.
  nb::dict prewarm(const std::string& manifest_path, const std::vector<std::string>& ops,
                   const std::vector<std::string>& arch, const std::string& emit, int jobs) {
    mojo::Manifest manifest;
    if (!manifest_path.empty() && !ops.empty())
      throw mojo::InvalidArgumentError("prewarm: give a manifest or ops, not both");
    manifest = manifest_path.empty() ? mojo::inspect::examples_manifest(ops) : mojo::Manifest::load(manifest_path);
    std::vector<mojo::Target> targets;
    for (const std::string& a : arch) targets.push_back(mojo::Target::parse(a));
    const std::vector<mojo::PrewarmItem> items = manifest.items(targets);
    mojo::PrewarmResult r;
    {
      nb::gil_scoped_release unlocked;
      r = rt_.prewarm(items, mojo::parse_emit(emit), jobs);
    }
    nb::dict out;
    out["items"] = items.size();
    out["compiled"] = r.compiled;
    out["cached"] = r.cached;
    out["failed"] = r.failed;
    out["seconds"] = r.seconds;
    out["failures"] = nb::cast(r.failures);
    return out;
  }

  nb::dict stats() const {
    const mojo::CacheStats s = rt_.stats();
    nb::dict out;
    out["memory_hits"] = s.memory_hits;
    out["disk_hits"] = s.disk_hits;
    out["readonly_hits"] = s.readonly_hits;
    out["remote_hits"] = s.remote_hits;
    out["misses"] = s.misses;
    out["compiles"] = s.compiles;
    out["bad_entries"] = s.bad_entries;
    out["evicted"] = s.evicted;
    out["lock_waits"] = s.lock_waits;
    out["compile_seconds"] = s.compile_seconds;
    nb::dict stages;
    for (int i = 0; i < mojo::kCompileStages; ++i)
      stages[std::string(mojo::compile_stage_name(mojo::CompileStage(i))).c_str()] = s.compile_stage_seconds[i];
    out["compile_stage_seconds"] = stages;
    return out;
  }

  nb::dict device_info() {
    const mojo::Device& d = rt_.device();
    nb::dict out;
    out["name"] = d.name();
    out["cpu"] = d.is_cpu();
    out["ordinal"] = d.ordinal();
    out["target"] = d.target().sm_name();
    out["sms"] = d.sm_count();
    return out;
  }

  std::string cache_dir() const { return rt_.cache_dir().string(); }
  std::string compiler() const { return rt_.compiler().identity(); }

 private:
  std::vector<mojo::Tensor> tensors_for(const mojo::OpDef& op, nb::dict shapes, const std::string& dtype,
                                        const std::vector<mojo::ScalarArg>& scalars) {
    std::vector<mojo::Tensor> out;
    for (const mojo::TensorSpec& spec : specs_of(op, dtype, shapes, scalars)) out.push_back({spec, 0});
    return out;
  }

  mojo::Runtime rt_;
};

// Every op as data: what `mojo-jit list` prints.
nb::list op_list() {
  nb::list out;
  for (const mojo::OpDef* op : mojo::all_ops()) {
    nb::dict d;
    d["name"] = std::string(op->name());
    d["summary"] = std::string(op->summary());
    nb::list tensors, scalars, dtypes;
    for (const auto& t : op->tensor_args())
      tensors.append(nb::make_tuple(std::string(t.name), std::string(t.role), std::string(t.doc)));
    for (const auto& s : op->scalar_args())
      scalars.append(nb::make_tuple(std::string(s.name), s.default_value, std::string(s.doc)));
    for (mojo::DType t : op->dtypes()) dtypes.append(std::string(mojo::dtype_name(t)));
    d["tensors"] = tensors;
    d["scalars"] = scalars;
    d["dtypes"] = dtypes;
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
    out.append(nb::make_tuple(std::string(op.tensor_args()[i].name), std::string(mojo::dtype_name(specs[i].dtype())),
                              shape));
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
  m.attr("__version__") = MOJO_JIT_VERSION;
}
