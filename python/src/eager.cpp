// mojo_jit._C.TorchEager (eager.hpp).
#include "eager.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "convert.hpp"
#include "core/config.hpp"
#include "runtime.hpp"

namespace mojo::python {
namespace {

// Signatures remembered per op; past that, a new one is worked out each call (a caller of ever new shapes).
constexpr std::size_t kMaxPlans = 1024;

// The attribute and method names read off a tensor, made once.
struct Names {
  PyObject *dtype, *layout, *get_device, *is_cpu, *shape, *stride, *data_ptr, *new_empty, *requires_grad,
      *dtype_keyword;
};
const Names& names() {
  static const Names n = [] {
    auto intern = [](const char* s) { return PyUnicode_InternFromString(s); };
    Names m{intern("dtype"),  intern("layout"),   intern("get_device"), intern("is_cpu"),        intern("shape"),
            intern("stride"), intern("data_ptr"), intern("new_empty"),  intern("requires_grad"), nullptr};
    m.dtype_keyword = PyTuple_Pack(1, m.dtype);
    return m;
  }();
  return n;
}

// A new reference, or the Python error as an exception.
nb::object checked(PyObject* result) {
  if (!result) throw nb::python_error();
  return nb::steal(result);
}

bool gpu_present() {
  static const bool present = mojo::device_available();
  return present;
}

std::vector<std::int64_t> ints_of(PyObject* tuple) {
  std::vector<std::int64_t> out(std::size_t(PyTuple_GET_SIZE(tuple)));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, Py_ssize_t(i)));
  if (PyErr_Occurred()) throw nb::python_error();
  return out;
}

// A tensor's data_ptr().
std::uintptr_t address_of(PyObject* tensor) {
  const std::uintptr_t address =
      PyLong_AsUnsignedLongLong(checked(PyObject_CallMethodNoArgs(tensor, names().data_ptr)).ptr());
  if (PyErr_Occurred()) throw nb::python_error();
  return address;
}

}  // namespace

std::size_t TorchEager::KeyHash::operator()(const std::vector<std::int64_t>& key) const noexcept {
  std::uint64_t h = 0x9E3779B97F4A7C15ull;
  for (std::int64_t v : key) h = (h ^ std::uint64_t(v)) * 0x100000001B3ull + (h >> 29);
  return std::size_t(h);
}

TorchEager::TorchEager(const std::string& op, const std::vector<std::string>& args, std::size_t required,
                       const std::vector<std::string>& returned, nb::object plan, nb::object runtime, nb::dict torch)
    : op_(mojo::find_op(op)),
      tensor_slots_(args.size()),
      required_(required),
      returned_(returned),
      plan_fn_(std::move(plan)),
      runtime_fn_(std::move(runtime)),
      tensor_type_(torch["Tensor"]),
      strided_(torch["strided"]),
      current_stream_(torch["current_stream"]),
      grad_enabled_(torch["grad_enabled"]) {
  for (const auto& s : op_.scalar_args()) scalar_names_.emplace_back(s.name);
  for (const std::string& n : args) slot_names_.push_back(nb::str(n.c_str()));
  for (const std::string& n : scalar_names_) slot_names_.push_back(nb::str(n.c_str()));
  for (nb::str& n : slot_names_) {
    PyObject* p = n.release().ptr();
    PyUnicode_InternInPlace(&p);
    n = nb::steal<nb::str>(p);
  }
  slot_tensor_.resize(args.size());
  for (const auto& t : op_.tensor_args()) {
    const auto arg = std::find(args.begin(), args.end(), t.name);
    const auto out = std::find(returned.begin(), returned.end(), t.name);
    if (arg != args.end()) {
      slot_tensor_[std::size_t(arg - args.begin())] = int(source_.size());
      source_.push_back(int(arg - args.begin()));
    } else if (out != returned.end()) {
      source_.push_back(-1 - int(out - returned.begin()));
    } else {
      throw mojo::InvalidArgumentError(fmt::format("{}: tensor {} is neither an argument nor returned", op, t.name));
    }
  }
  if (required == 0 || required > args.size())
    throw mojo::InvalidArgumentError(
        fmt::format("{}: {} of {} tensors required; at least the first is (outputs are allocated like it)", op,
                    required, args.size()));
  for (auto [dtype, name] : nb::cast<nb::dict>(torch["dtypes"]))
    dtypes_.emplace_back(nb::borrow(dtype), mojo::parse_dtype(nb::cast<std::string>(name)));
}

nb::object TorchEager::call(nb::args args, nb::kwargs kwargs) { return run(args, kwargs, false); }
nb::object TorchEager::fast(nb::args args, nb::kwargs kwargs) { return run(args, kwargs, true); }

bool TorchEager::bind(nb::args args, nb::kwargs kwargs, std::vector<PyObject*>& slots, bool fast) const {
  const std::string_view op = op_.name();
  slots.assign(slot_names_.size(), nullptr);
  if (args.size() > slots.size()) {
    if (fast) return false;
    throw nb::type_error(
        fmt::format("{}() takes {} positional arguments but {} were given", op, slots.size(), args.size()).c_str());
  }
  for (std::size_t i = 0; i < args.size(); ++i) slots[i] = args[i].ptr();
  for (auto [key, value] : kwargs) {
    std::size_t j = 0;
    while (j < slot_names_.size() && slot_names_[j].ptr() != key.ptr()) ++j;  // interned: the usual case
    if (j == slot_names_.size()) {
      j = 0;
      while (j < slot_names_.size() && PyUnicode_Compare(slot_names_[j].ptr(), key.ptr()) != 0) ++j;
    }
    if (j == slot_names_.size() || slots[j]) {
      if (fast) return false;
      const std::string name = nb::cast<std::string>(key);
      throw nb::type_error((j == slot_names_.size()
                                ? fmt::format("{}() got an unexpected keyword argument '{}'", op, name)
                                : fmt::format("{}() got multiple values for argument '{}'", op, name))
                               .c_str());
    }
    slots[j] = value.ptr();
  }
  for (PyObject*& s : slots)
    if (s == Py_None) s = nullptr;
  for (std::size_t i = 0; i < required_; ++i) {
    if (slots[i]) continue;
    if (fast) return false;
    throw nb::type_error(
        fmt::format("{}() missing required argument: '{}'", op, nb::cast<std::string>(slot_names_[i])).c_str());
  }
  return true;
}

bool TorchEager::read(PyObject* obj, Read& r, std::string_view name) const {
  const Names& n = names();
  if (!PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(tensor_type_.ptr()))) return false;
  {
    const nb::object dtype = checked(PyObject_GetAttr(obj, n.dtype));
    r.dtype = -1;
    for (std::size_t i = 0; i < dtypes_.size(); ++i)
      if (dtypes_[i].first.ptr() == dtype.ptr()) r.dtype = int(i);
    if (r.dtype < 0) return false;
  }
  if (checked(PyObject_GetAttr(obj, n.layout)).ptr() != strided_.ptr()) return false;
  r.device = int(PyLong_AsLong(checked(PyObject_CallMethodNoArgs(obj, n.get_device)).ptr()));
  if (r.device < 0 && checked(PyObject_GetAttr(obj, n.is_cpu)).ptr() != Py_True) return false;  // meta, mps...
  const std::vector<std::int64_t> shape = ints_of(checked(PyObject_GetAttr(obj, n.shape)).ptr());
  const std::vector<std::int64_t> strides = ints_of(checked(PyObject_CallMethodNoArgs(obj, n.stride)).ptr());
  r.requires_grad = checked(PyObject_GetAttr(obj, n.requires_grad)).ptr() == Py_True;
  r.view.spec = spec_of(dtypes_[std::size_t(r.dtype)].second, shape, strides, name);
  r.view.data = address_of(obj);
  r.view.on_host = r.device < 0;
  r.view.device_id = std::max(r.device, 0);
  return true;
}

nb::tuple TorchEager::ask_plan(const std::vector<PyObject*>& slots) const {
  nb::dict tensors, scalars;
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (slots[i]) (i < tensor_slots_ ? tensors : scalars)[slot_names_[i]] = nb::handle(slots[i]);
  return nb::cast<nb::tuple>(plan_fn_(tensors, scalars));
}

const TorchEager::Plan& TorchEager::plan_for(std::vector<std::int64_t>&& key, const std::vector<PyObject*>& slots,
                                             Plan& unkept) {
  if (auto hit = plans_.find(key); hit != plans_.end()) return hit->second;
  const nb::tuple answer = ask_plan(slots);
  Plan plan;
  plan.runtime = answer[1];
  plan.outputs.resize(returned_.size());
  const nb::object first_dtype = checked(PyObject_GetAttr(slots[0], names().dtype));
  std::size_t given = 0;
  for (nb::handle spec : nb::cast<nb::list>(answer[0])) {
    const auto at = std::find(returned_.begin(), returned_.end(), nb::cast<std::string>(spec[0]));
    if (at == returned_.end()) throw mojo::Error(fmt::format("{}: the plan names an output not returned", op_.name()));
    const int r = int(at - returned_.begin());
    Output& out = plan.outputs[std::size_t(r)];
    out.dtype = spec[1].ptr() == first_dtype.ptr() ? nb::none() : nb::borrow(spec[1]);
    const nb::handle shape = spec[2];
    if (shape.is_none()) {
      out.dims.push_back(nb::int_(0));
    } else {
      const auto dtype =
          std::find_if(dtypes_.begin(), dtypes_.end(), [&](const auto& d) { return d.first.is(spec[1]); });
      if (dtype == dtypes_.end())
        throw mojo::Error(fmt::format("{}: the plan gives an output of no dtype it knows", op_.name()));
      std::vector<std::int64_t> dims;
      for (nb::handle d : shape) {
        out.dims.push_back(nb::borrow(d));
        dims.push_back(nb::cast<std::int64_t>(d));
      }
      if (out.dims.empty()) out.dims.push_back(nb::borrow(shape));
      // Contiguous, as new_empty makes it; a rank-0 output is one element, as spec_of reads one.
      out.spec = dims.empty() ? mojo::TensorSpec(dtype->second, {1}) : mojo::TensorSpec(dtype->second, dims);
    }
    ++given;
  }
  if (given != returned_.size())
    throw mojo::Error(fmt::format("{}: the plan gives {} of {} outputs", op_.name(), given, returned_.size()));
  if (plans_.size() >= kMaxPlans) {
    unkept = std::move(plan);
    return unkept;
  }
  return plans_.emplace(std::move(key), std::move(plan)).first->second;
}

nb::object TorchEager::run(nb::args args, nb::kwargs kwargs, bool fast) {
  std::vector<PyObject*> slots;
  if (!bind(args, kwargs, slots, fast)) return nb::borrow(Py_NotImplemented);
  const auto infos = op_.tensor_args();

  // The tensors: read, and the signature of the call.
  std::vector<Read> reads(tensor_slots_);
  std::vector<std::int64_t> key;
  key.reserve(4 * tensor_slots_ + 2 * (slots.size() - tensor_slots_));
  bool any_gpu = false, any_grad = false;
  for (std::size_t i = 0; i < tensor_slots_; ++i) {
    if (!slots[i]) {
      key.push_back(-1);
      continue;
    }
    const std::string_view name = infos[std::size_t(slot_tensor_[i])].name;
    if (!read(slots[i], reads[i], name)) {
      if (fast) return nb::borrow(Py_NotImplemented);
      ask_plan(slots);  // its Python says what is wrong with the tensor
      throw mojo::InvalidArgumentError(fmt::format(
          "{}: tensor {} is no strided torch tensor of f32, f16, bf16, i32, i64 or u8 on the host or a CUDA GPU",
          op_.name(), name));
    }
    any_gpu |= reads[i].device >= 0;
    any_grad |= reads[i].requires_grad;
    key.push_back(reads[i].dtype | (reads[i].device + 1) << 8);
    key.push_back(reads[i].view.spec.rank());
    for (std::int64_t d : reads[i].view.spec.shape()) key.push_back(d);
  }
  if (fast) {
    // mojo_jit.torch's backend switch: MOJO_JIT_BACKEND unset, empty or auto, or mojo, takes the kernel; auto falls
    // back to the golden function where the kernel cannot run (host tensors, no GPU, no MOJO_JIT_DEVICE).
    const std::optional<std::string> backend = mojo::config::text("MOJO_JIT_BACKEND");
    const bool is_auto = !backend || *backend == "auto";
    if (!is_auto && *backend != "mojo") return nb::borrow(Py_NotImplemented);
    if (is_auto && !any_gpu && !mojo::config::text("MOJO_JIT_DEVICE") && !gpu_present())
      return nb::borrow(Py_NotImplemented);
    // Autograd records this call (mojo_jit.torch: the op's backward, or an error at backward where it has none).
    if (any_grad && grad_enabled_().ptr() == Py_True) return nb::borrow(Py_NotImplemented);
  }
  std::vector<mojo::ScalarArg> scalars;
  for (std::size_t i = tensor_slots_; i < slots.size(); ++i) {
    if (!slots[i]) {
      key.push_back(0);
      continue;
    }
    const std::string& name = scalar_names_[i - tensor_slots_];
    scalars.push_back({name, to_scalar(slots[i], name)});
    const mojo::Scalar& s = scalars.back().value;
    key.push_back(s.is_int() ? 1 : 2);
    if (s.is_int()) {
      key.push_back(s.as_int());
    } else {
      const double d = s.as_double();
      std::int64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      key.push_back(bits);
    }
  }
  Plan unkept;
  const Plan& plan = plan_for(std::move(key), slots, unkept);

  // The outputs, allocated like the first input (on its device; never requiring grad). One absent for these inputs
  // is returned empty, and not launched on.
  const Names& n = names();
  std::vector<nb::object> outputs;
  std::vector<ArrayView> written(plan.outputs.size());
  std::vector<PyObject*> call_args;
  for (std::size_t r = 0; r < plan.outputs.size(); ++r) {
    const Output& o = plan.outputs[r];
    call_args.assign(1, slots[0]);
    for (const nb::object& d : o.dims) call_args.push_back(d.ptr());
    const std::size_t positional = call_args.size();
    if (!o.dtype.is_none()) call_args.push_back(o.dtype.ptr());
    outputs.push_back(checked(PyObject_VectorcallMethod(n.new_empty, call_args.data(), positional,
                                                        o.dtype.is_none() ? nullptr : n.dtype_keyword)));
    if (o.spec.rank() == 0) continue;  // absent: not launched on
    written[r] = reads[0].view;        // on the first input's device
    written[r].spec = o.spec;
    written[r].data = address_of(outputs.back().ptr());
    written[r].readonly = false;
  }

  // The launch, in the op's tensor order, on the current stream of the first input's GPU.
  std::vector<ArrayView> views(source_.size());
  for (std::size_t i = 0; i < source_.size(); ++i) {
    const int s = source_[i];
    if (s >= 0 && slots[std::size_t(s)])
      views[i] = reads[std::size_t(s)].view;
    else if (s < 0)
      views[i] = written[std::size_t(-1 - s)];  // rank 0 (absent) where it was not allocated
  }
  std::uintptr_t stream = 0;
  if (reads[0].device >= 0) stream = nb::cast<std::uintptr_t>(current_stream_(reads[0].device));
  const nb::object runtime = plan.runtime.is_none() ? runtime_fn_() : plan.runtime;
  nb::cast<PyRuntime*>(runtime)->launch_views(op_, views, scalars, stream);

  if (outputs.empty()) return nb::none();
  if (outputs.size() == 1) return outputs[0];
  nb::list list;
  for (nb::object& o : outputs) list.append(o);
  return nb::tuple(list);
}

}  // namespace mojo::python
