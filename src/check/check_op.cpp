#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "device/cpu/memory.hpp"
#include "mojo/check.hpp"
#include "mojo/error.hpp"
#include "reference/reference.hpp"

namespace mojo {

std::size_t mismatches(DType dtype, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                       Tolerance tol, std::vector<std::string>* report) {
  if (got.size() != want.size()) return std::max(got.size(), want.size()) / dtype_size(dtype);
  const std::size_t n = want.size() / dtype_size(dtype);
  double scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = reference::load(dtype, want.data(), i);
    if (std::isfinite(r)) scale = std::max(scale, std::abs(r));
  }
  // f16 subnormals are 2^-24 apart: two roundings of nearly the same value may land one step apart.
  const double step = dtype == DType::f16 ? std::ldexp(1.0, -24) : 0.0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = reference::load(dtype, got.data(), i), r = reference::load(dtype, want.data(), i);
    const bool ok = std::isfinite(r) ? std::abs(g - r) <= tol.rtol * std::abs(r) + tol.atol * scale + step
                                     : (std::isnan(r) ? std::isnan(g) : g == r);
    if (!ok && bad++ < 5 && report != nullptr)
      report->push_back(fmt::format("({}) element {}: device {} vs reference {}", dtype_name(dtype), i, g, r));
  }
  return bad;
}

CheckReport check_op(Runtime& rt, std::string_view op_name, std::span<const TensorSpec> specs, ScalarList scalars,
                     std::uint32_t seed, CheckLaunch first_launch) {
  const OpCheck& check = find_check(op_name);
  const OpDef& op = check.op();
  const std::span<const TensorArgInfo> infos = op.tensor_args();
  if (specs.size() != infos.size())
    throw InvalidArgumentError(fmt::format("{} takes {} tensors, got {}", op.name(), infos.size(), specs.size()));
  rt.device().make_current();  // the buffers below live on the Runtime's device
  {  // The op's own checks of shapes, dtypes and scalars first: the references below assume shapes it accepts.
    std::vector<Tensor> unbacked;
    for (const TensorSpec& spec : specs) unbacked.push_back({spec, 0});
    op.specialize(unbacked, scalars, rt.device().target());
  }

  // Host data: inputs random, outputs poisoned; the device gets the same bytes.
  std::vector<std::vector<std::uint8_t>> host(specs.size());
  std::vector<DeviceBuffer> buffers;
  std::vector<Tensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const bool absent = specs[i].rank() == 0;
    if (!absent)
      host[i] = infos[i].role == std::string_view("out") ? std::vector<std::uint8_t>(specs[i].nbytes(), 0xff)
                                                         : check.random_data(i, specs, seed);
    buffers.emplace_back(host[i].size());
    buffers.back().copy_from_host(host[i].data(), host[i].size());
    tensors.push_back(absent ? Tensor{specs[i], 0} : buffers.back().as(specs[i]));
  }

  CheckReport report;
  Stream stream;
  // A graph's capture launches by name: what a launch loads and allocates the first time happens inside it.
  std::optional<Graph> graph;
  if (first_launch == CheckLaunch::graph)
    graph = Graph::capture(stream, [&] { rt.launch(op.name(), tensors, scalars, stream); });
  // Compiled (or loaded) outside the timing; after a capture, already loaded.
  const KernelHandle kernel = rt.get_kernel(op.name(), tensors, scalars);
  report.kernel = kernel.kernel_name();
  Event start, stop;
  start.record(stream);
  if (graph)
    graph->launch(stream);
  else
    kernel.launch(tensors, scalars, stream);
  stop.record(stream);
  stop.synchronize();
  report.kernel_ms = Event::elapsed_ms(start, stop);
  std::vector<std::vector<std::uint8_t>> first(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (infos[i].role == std::string_view("in") || specs[i].rank() == 0) continue;
    first[i].resize(host[i].size());
    buffers[i].copy_to_host(first[i].data(), first[i].size());
  }

  // Again with the other poison: zeros in the outputs and, on the cpu device, in the workspace (a new
  // stream's, allocated by this launch). An output that depends on which poison it met read memory
  // nothing wrote, or left some unwritten.
  std::vector<std::vector<std::uint8_t>> second(specs.size());
  {
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (infos[i].role == std::string_view("in") || specs[i].rank() == 0) continue;
      const std::vector<std::uint8_t> fill =
          infos[i].role == std::string_view("out") ? std::vector<std::uint8_t>(host[i].size(), 0) : host[i];
      buffers[i].copy_from_host(fill.data(), fill.size());
    }
    const bool cpu = rt.device().is_cpu();
    if (cpu) cpu::set_poison(cpu::Poison::zero);
    try {
      Stream other;
      kernel.launch(tensors, scalars, other);
      other.synchronize();
    } catch (...) {
      if (cpu) cpu::set_poison(std::nullopt);
      throw;
    }
    if (cpu) cpu::set_poison(std::nullopt);
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (infos[i].role == std::string_view("in") || specs[i].rank() == 0) continue;
      second[i].resize(host[i].size());
      buffers[i].copy_to_host(second[i].data(), second[i].size());
    }
  }

  std::vector<std::vector<std::uint8_t>> want = host;
  check.reference(specs, want, scalars);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (infos[i].role == std::string_view("in") || specs[i].rank() == 0) continue;
    const std::vector<std::uint8_t>& got = first[i];
    CheckReport::Output out;
    out.name = std::string(infos[i].name);
    out.dtype = specs[i].dtype();
    out.elements = std::size_t(specs[i].numel());
    out.tolerance = check.tolerance(out.dtype, specs, scalars);
    out.wrong = mismatches(out.dtype, got, want[i], out.tolerance);
    if (infos[i].role == std::string_view("out")) {
      const std::size_t size = dtype_size(out.dtype);
      for (std::size_t e = 0; e < out.elements; ++e)
        out.poison_dependent += std::memcmp(got.data() + e * size, second[i].data() + e * size, size) != 0;
    }
    for (std::size_t e = 0; e < out.elements; ++e) {
      const double g = reference::load(out.dtype, got.data(), e), r = reference::load(out.dtype, want[i].data(), e);
      if (!std::isfinite(r)) continue;
      const double diff = std::isfinite(g) ? std::abs(g - r) : INFINITY;
      out.max_abs = std::max(out.max_abs, diff);
      if (r != 0) out.max_rel = std::max(out.max_rel, diff / std::abs(r));
    }
    report.outputs.push_back(std::move(out));
  }
  return report;
}

}  // namespace mojo
