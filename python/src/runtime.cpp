// mojo_jit._C.Runtime (runtime.hpp).
#include "runtime.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "convert.hpp"
#include "device/hooks.hpp"

namespace mojo::python {
namespace {

std::atomic<bool> g_sink_on{false};

void discard_launch(const mojo::Function&, mojo::Dim3, mojo::Dim3, unsigned, mojo::StreamHandle, void**,
                    mojo::LaunchOptions) {}

}  // namespace

void stop_launches_at_sink(bool on) {
  g_sink_on.store(on, std::memory_order_relaxed);
  mojo::device_hooks::set_launch_sink(on ? discard_launch : nullptr);
}

void PyRuntime::launch(const std::string& op_name, nb::sequence tensor_objs, nb::dict scalar_dict,
                       std::uintptr_t stream) {
  const mojo::OpDef& op = mojo::find_op(op_name);
  const auto infos = op.tensor_args();
  std::vector<ArrayView> views;
  for (nb::handle t : tensor_objs) {
    const std::size_t i = views.size();
    views.push_back(view_of(t, i < infos.size() ? infos[i].name : std::string_view("?")));
  }
  std::vector<std::string> names;
  launch_views(op, views, scalars_of(scalar_dict, names), stream);
}

void PyRuntime::launch_views(const mojo::OpDef& op, const std::vector<ArrayView>& views,
                             const std::vector<mojo::ScalarArg>& scalars, std::uintptr_t stream) {
  const auto infos = op.tensor_args();
  const std::string_view op_name = op.name();
  const bool stage = !g_sink_on.load(std::memory_order_relaxed);
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
    if (!stage) {  // the launch stops at the sink: nothing reads the address
      tensors[i] = {v.spec, v.data};
      continue;
    }
    // The same host memory twice (out given as its own residual) is one staged buffer, as on the GPU.
    const std::size_t bytes = v.spec.extent_bytes();
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
  rt_.launch(op_name, tensors, scalars, reinterpret_cast<mojo::StreamHandle>(stream));
  if (staged.empty()) return;
  device.synchronize();
  for (const Staged& s : staged)
    if (s.written && s.bytes) s.buffer->copy_to_host(reinterpret_cast<void*>(s.host), s.bytes);
}

nb::object PyRuntime::emit(const std::string& op_name, nb::dict shapes, const std::string& dtype, nb::dict scalar_dict,
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

nb::object PyRuntime::describe(const std::string& op_name, nb::dict shapes, const std::string& dtype,
                               nb::dict scalar_dict, const std::string& arch, int sms) {
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

nb::dict PyRuntime::prewarm(const std::string& manifest_path, const std::vector<std::string>& ops,
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

nb::dict PyRuntime::stats() const {
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

nb::dict PyRuntime::device_info() {
  const mojo::Device& d = rt_.device();
  nb::dict out;
  out["name"] = d.name();
  out["cpu"] = d.is_cpu();
  out["ordinal"] = d.ordinal();
  out["target"] = d.target().sm_name();
  out["sms"] = d.sm_count();
  return out;
}

std::vector<mojo::Tensor> PyRuntime::tensors_for(const mojo::OpDef& op, nb::dict shapes, const std::string& dtype,
                                                 const std::vector<mojo::ScalarArg>& scalars) {
  std::vector<mojo::Tensor> out;
  for (const mojo::TensorSpec& spec : specs_of(op, dtype, shapes, scalars)) out.push_back({spec, 0});
  return out;
}

}  // namespace mojo::python
