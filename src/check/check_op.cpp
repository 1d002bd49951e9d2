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

namespace {

// A tensor in device memory as a Placement lays it out: dim(0) slices of the other dims (contiguous),
// slice_stride apart, from `offset` elements into a buffer whose other bytes are a guard (0xff). Moves data
// between that layout and the contiguous bytes the references see.
class PlacedTensor {
 public:
  static constexpr std::uint8_t kGuard = 0xff;

  PlacedTensor(const TensorSpec& spec, Placement place) : spec_(spec) {
    if (spec.rank() == 0) return;  // absent
    if (place.offset < 0 || place.pad < 0)
      throw InvalidArgumentError(
          fmt::format("a placement's offset and pad are >= 0, got {} and {}", place.offset, place.pad));
    const std::int64_t size = std::int64_t(dtype_size(spec.dtype()));
    slices_ = std::size_t(spec.dim(0));
    std::vector<std::int64_t> strides(spec.strides().begin(), spec.strides().end());
    strides[0] += place.pad;
    slice_ = std::size_t(spec.stride(0) * size);
    slice_stride_ = std::size_t(strides[0] * size);
    if (spec.numel() == 0) slices_ = 0;
    view_ = TensorSpec(spec.dtype(), spec.shape(), strides);
    start_ = std::size_t(place.offset * size);
  }

  // The view, unbacked (for the op's checks of shapes and strides before any memory is taken).
  Tensor unbacked() const { return Tensor{spec_.rank() == 0 ? spec_ : view_, 0}; }
  void allocate() {
    if (spec_.rank() == 0) return;
    uploaded_.assign(start_ + slices_ * slice_stride_, kGuard);
    buffer_ = DeviceBuffer(uploaded_.size());
  }
  Tensor tensor() const { return spec_.rank() == 0 ? Tensor{spec_, 0} : Tensor{view_, buffer_.ptr() + start_}; }

  void upload(const std::vector<std::uint8_t>& contiguous) {
    if (spec_.rank() == 0) return;
    for (std::size_t r = 0; r < slices_; ++r)
      std::memcpy(uploaded_.data() + start_ + r * slice_stride_, contiguous.data() + r * slice_, slice_);
    buffer_.copy_from_host(uploaded_.data(), uploaded_.size());
  }

  // The view's elements, contiguous; `gaps_intact` says whether every byte outside the view is as uploaded.
  std::vector<std::uint8_t> download(bool& gaps_intact) const {
    if (spec_.rank() == 0) return {};
    std::vector<std::uint8_t> now(uploaded_.size()), contiguous(slices_ * slice_);
    buffer_.copy_to_host(now.data(), now.size());
    std::vector<std::uint8_t> expected = uploaded_;  // what `now` is if only the view changed
    for (std::size_t r = 0; r < slices_; ++r) {
      const std::size_t at = start_ + r * slice_stride_;
      std::memcpy(contiguous.data() + r * slice_, now.data() + at, slice_);
      std::memcpy(expected.data() + at, now.data() + at, slice_);
    }
    gaps_intact = expected == now;
    return contiguous;
  }

 private:
  TensorSpec spec_, view_;
  std::size_t slice_ = 0, slice_stride_ = 0, slices_ = 0, start_ = 0;  // in bytes, but slices_
  std::vector<std::uint8_t> uploaded_;                                 // the whole buffer as last uploaded
  DeviceBuffer buffer_;
};

// An output written in place over an input has the input's memory and first contents: source[o], else -1.
std::vector<std::int64_t> in_place_sources(const OpDef& op, std::span<const TensorSpec> specs,
                                           std::span<const Placement> placements) {
  const std::span<const TensorArgInfo> infos = op.tensor_args();
  const auto role = [&](std::size_t i) { return std::string_view(infos[i].role); };
  std::vector<std::int64_t> source(specs.size(), -1);
  for (std::size_t o = 0; o < placements.size(); ++o) {
    const std::int64_t i = placements[o].in_place_of;
    if (i < 0) continue;
    if (std::size_t(i) >= specs.size() || role(std::size_t(i)) != "in" || role(o) == "in" ||
        !(specs[o] == specs[std::size_t(i)]) || placements[std::size_t(i)].in_place_of >= 0)
      throw InvalidArgumentError(fmt::format(
          "{}: {} cannot be written in place of {}: an output goes over an input of its shape and dtype", op.name(),
          infos[o].name,
          std::size_t(i) < specs.size() ? std::string(infos[std::size_t(i)].name) : fmt::format("tensor {}", i)));
    source[o] = i;
  }
  return source;
}

// One output against the reference: the first launch's elements `got`, the second's (other poison) `second`,
// the reference's `want`; `poisoned`: the output started from poison (not from an input it is written over).
CheckReport::Output compare(const OpCheck& check, std::span<const TensorSpec> specs, ScalarList scalars, std::size_t i,
                            const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& second,
                            const std::vector<std::uint8_t>& want, bool poisoned) {
  CheckReport::Output out;
  out.name = std::string(check.op().tensor_args()[i].name);
  out.dtype = specs[i].dtype();
  out.elements = std::size_t(specs[i].numel());
  out.tolerance = check.tolerance(out.dtype, specs, scalars);
  out.wrong = mismatches(out.dtype, got, want, out.tolerance);
  if (poisoned) {
    const std::size_t size = dtype_size(out.dtype);
    for (std::size_t e = 0; e < out.elements; ++e)
      out.poison_dependent += std::memcmp(got.data() + e * size, second.data() + e * size, size) != 0;
  }
  for (std::size_t e = 0; e < out.elements; ++e) {
    const double g = reference::load(out.dtype, got.data(), e), r = reference::load(out.dtype, want.data(), e);
    if (!std::isfinite(r)) continue;
    const double diff = std::isfinite(g) ? std::abs(g - r) : INFINITY;
    out.max_abs = std::max(out.max_abs, diff);
    if (r != 0) out.max_rel = std::max(out.max_rel, diff / std::abs(r));
  }
  return out;
}

}  // namespace

CheckReport check_op(Runtime& rt, std::string_view op_name, std::span<const TensorSpec> specs, ScalarList scalars,
                     std::uint32_t seed, CheckLaunch first_launch, std::span<const Placement> placements) {
  const OpCheck& check = find_check(op_name);
  const OpDef& op = check.op();
  const std::span<const TensorArgInfo> infos = op.tensor_args();
  if (specs.size() != infos.size())
    throw InvalidArgumentError(fmt::format("{} takes {} tensors, got {}", op.name(), infos.size(), specs.size()));
  if (!placements.empty() && placements.size() != specs.size())
    throw InvalidArgumentError(
        fmt::format("{} takes {} tensors, got {} placements", op.name(), infos.size(), placements.size()));
  rt.device().make_current();  // the buffers below live on the Runtime's device
  const auto role = [&](std::size_t i) { return std::string_view(infos[i].role); };
  const std::vector<std::int64_t> source = in_place_sources(op, specs, placements);
  std::vector<bool> overwritten_input(specs.size(), false);
  for (std::int64_t i : source)
    if (i >= 0) overwritten_input[std::size_t(i)] = true;
  std::vector<PlacedTensor> placed;
  std::vector<Tensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::size_t at = source[i] >= 0 ? std::size_t(source[i]) : i;  // whose placement
    placed.emplace_back(specs[i], placements.empty() ? Placement{} : placements[at]);
    tensors.push_back(placed.back().unbacked());
  }
  // The op's own checks of shapes, dtypes, strides and scalars first: the references below assume what it accepts.
  op.specialize(tensors, scalars, rt.device().target());
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (source[i] < 0) {
      placed[i].allocate();
      tensors[i] = placed[i].tensor();
    }
  for (std::size_t o = 0; o < specs.size(); ++o)
    if (source[o] >= 0) tensors[o] = tensors[std::size_t(source[o])];

  // Host data: inputs random, outputs poisoned; the device gets the same bytes.
  std::vector<std::vector<std::uint8_t>> host(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].rank() == 0 || source[i] >= 0) continue;  // absent, or another's memory
    host[i] = role(i) == "out" ? std::vector<std::uint8_t>(specs[i].nbytes(), 0xff)
                               : check.random_data(i, specs, scalars, seed);
    placed[i].upload(host[i]);
  }
  for (std::size_t o = 0; o < specs.size(); ++o)
    if (source[o] >= 0) host[o] = host[std::size_t(source[o])];

  CheckReport report;
  // Every tensor as the device left it; what an op must not have written is named in the report.
  const auto download = [&](std::string_view launch) {
    std::vector<std::vector<std::uint8_t>> got(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (source[i] >= 0) continue;
      bool gaps_intact = true;
      got[i] = placed[i].download(gaps_intact);
      const bool input_changed = role(i) == "in" && !overwritten_input[i] && got[i] != host[i];
      if (!gaps_intact || input_changed)
        report.overwritten.push_back(fmt::format("{} ({}, {} launch)", infos[i].name,
                                                 input_changed ? "an input's elements" : "bytes outside its view",
                                                 launch));
    }
    for (std::size_t o = 0; o < specs.size(); ++o)
      if (source[o] >= 0) got[o] = got[std::size_t(source[o])];
    return got;
  };

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
  const std::vector<std::vector<std::uint8_t>> first = download("first");

  // Again with the other poison: zeros in the outputs and, on the cpu device, in the workspace (a new
  // stream's, allocated by this launch). An output that depends on which poison it met read memory
  // nothing wrote, or left some unwritten.
  std::vector<std::vector<std::uint8_t>> second;
  {
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (source[i] >= 0)
        placed[std::size_t(source[i])].upload(host[i]);  // the input, as it was
      else if (role(i) != "in")
        placed[i].upload(role(i) == "out" ? std::vector<std::uint8_t>(host[i].size(), 0) : host[i]);
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
    second = download("second");
  }

  std::vector<std::vector<std::uint8_t>> want = host;
  check.reference(specs, want, scalars);
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (role(i) != "in" && specs[i].rank() != 0)  // poisoned: not an inout, nor over an input (its data first)
      report.outputs.push_back(
          compare(check, specs, scalars, i, first[i], second[i], want[i], role(i) == "out" && source[i] < 0));
  return report;
}

}  // namespace mojo
