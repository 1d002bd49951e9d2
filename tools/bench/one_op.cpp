// `mojo-bench --op OP ...`: one op at the user's shapes, on random inputs
// from the op's own random_data (op_timing.cpp), timed as the median of
// batches of launches between events (on the CPU device, wall time), and
// reported as time, GB/s, TFLOP/s and the fraction of an H100's roofline:
//
//   mojo-bench --op rms_norm --dtype bf16 --shape x=4096x4096 --param eps=1e-5
//   mojo-bench --op linear --shape x=128x4096 --shape weight=6144x4096 --param path=90 --json
//   mojo-bench --op gemm --shape a=64x64 --shape b=64x64 --device cpu
//   mojo-bench --op sample --shape logits=1x151936 --fill logits=0    (every logit equal)
//   mojo-bench --op paged_decode_gqa --compiler llvm ...               (a case's kernels from the other compiler)
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "bench.hpp"

namespace bench {
namespace {

constexpr const char* kUsage =
    "usage: mojo-bench --op OP [--dtype DT] [--shape NAME=DIMS]... [--param NAME=VALUE]... [--device "
    "cuda|cpu|cpu:ARCH]\n"
    "                  [--fill NAME=VALUE]... [--compiler nvrtc|llvm] [--batches N] [--launches N] [--quick]\n"
    "                  [--json [FILE]]\n"
    "  --shape      one per tensor, as mojo-jit takes them (x=4096x4096); none: the op's example shapes\n"
    "  --fill       an input tensor holding one value instead of random data (worst cases: --fill logits=0)\n"
    "  --dtype      default bf16 (or the op's first dtype)\n"
    "  --device     default $MOJO_JIT_DEVICE, else cuda where there is a GPU, else cpu (the emulator: wall time)\n"
    "  --compiler   the GPU kernels' compiler (default $MOJO_JIT_COMPILER, else nvrtc): one case under each\n"
    "  --batches    timed batches (default 10, --quick 3; the median is reported)\n"
    "  --launches   launches per batch, at least (default 20, enough buffer sets to stream 256 MiB past the L2)\n"
    "  --json       the result as JSON: on stdout alone, or into FILE beside the text";

int usage_error(const std::string& what) {
  std::fprintf(stderr, "mojo-bench: %s\n%s\n", what.c_str(), kUsage);
  return 2;
}

int positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0 || v > 1000000)
    throw mojo::InvalidArgumentError(fmt::format("{} {}: expected a positive whole number", flag, text));
  return int(v);
}

}  // namespace

int bench_one_op(int argc, char** argv) {
  OpCase c;
  std::string dtype, device, compiler;
  std::vector<std::string> shapes;
  bool json = false, quick = false;
  std::filesystem::path json_file;
  int batches = 0, launches = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--op" && has_value) {
      c.op = argv[++i];
    } else if (a == "--dtype" && has_value) {
      dtype = argv[++i];
    } else if (a == "--shape" && has_value) {
      shapes.push_back(argv[++i]);
    } else if (a == "--param" && has_value) {
      c.params.push_back(mojo::parse_param(argv[++i]));
    } else if (a == "--fill" && has_value) {
      c.fills.push_back(mojo::parse_param(argv[++i]));
    } else if (a == "--device" && has_value) {
      device = argv[++i];
    } else if (a == "--compiler" && has_value) {
      compiler = argv[++i];
    } else if (a == "--batches" && has_value) {
      batches = positive("--batches", argv[++i]);
    } else if (a == "--launches" && has_value) {
      launches = positive("--launches", argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--json") {
      json = true;
      if (has_value && argv[i + 1][0] != '-') json_file = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::puts(kUsage);
      return 0;
    } else {
      return usage_error(fmt::format("unknown or incomplete argument '{}'", a));
    }
  }
  if (c.op.empty()) return usage_error("--op needs an op name (mojo-jit list shows them)");
  const mojo::OpDef& op = mojo::find_op(c.op);  // UnknownOpError names the known ops
  if (!dtype.empty()) {
    c.dtype = mojo::parse_dtype(dtype);
  } else {
    const auto dtypes = op.dtypes();
    c.dtype = dtypes.empty() || std::find(dtypes.begin(), dtypes.end(), mojo::DType::bf16) != dtypes.end()
                  ? mojo::DType::bf16
                  : dtypes.front();
  }
  if (shapes.empty()) {
    c.shapes = std::string(op.example_shapes());
  } else {
    for (const std::string& s : shapes) c.shapes += (c.shapes.empty() ? "" : " ") + s;
  }
  if (device.empty())
    if (const char* v = std::getenv("MOJO_JIT_DEVICE"); v != nullptr) device = v;
  if (device.empty()) device = mojo::device_available() ? "cuda" : "cpu";

  mojo::RuntimeOptions o;
  o.device = device;
  o.compiler = compiler;
  mojo::Runtime rt(o);
  const mojo::Device& dev = use_device(rt);
  Options options;
  options.quick = quick;
  Repetitions reps = repetitions(options, dev.is_cpu());
  if (batches > 0) reps.batches = batches;
  if (launches > 0) {
    reps.min_launches = launches;
    reps.budget_s = std::numeric_limits<double>::infinity();  // as many as asked
  }
  const OpTiming t = time_op(rt, c, reps);
  const Roofline r = roofline(c, t);

  nlohmann::json params = nlohmann::json::object(), fills = nlohmann::json::object();
  for (const auto& [name, value] : c.params) params[name] = value;
  for (const auto& [name, value] : c.fills) fills[name] = value;
  const nlohmann::json doc = {
      {"op", c.op},
      {"dtype", mojo::dtype_name(c.dtype)},
      {"shapes", c.shapes},
      {"params", params},
      {"fills", fills},
      {"device", dev.name()},
      {"target", dev.target().sm_name()},
      {"compiler", dev.is_cpu() ? "host" : std::string(rt.compiler().name())},
      {"kernel", t.kernel},
      {"plan_kernels", t.plan_kernels},
      {"specialization", t.params.str()},
      {"us", t.us},
      {"batch_us", t.batch_us},
      {"launches_per_batch", t.launches_per_batch},
      {"buffer_sets", t.copies},
      {"graph", t.graph},
      {"wall_time", dev.is_cpu()},
      {"bytes", t.traffic.bytes},
      {"flops", t.traffic.flops},
      {"traffic_note", t.traffic.note},
      {"gbs", r.gbs},
      {"tflops", r.tflops},
      {"roofline",
       {{"copy_gbs", r.copy_gbs}, {"peak_tflops", r.peak_tflops}, {"bound", r.bound}, {"fraction", r.fraction}}}};
  if (json && json_file.empty()) {
    fmt::print("{}\n", doc.dump(2));
    return 0;
  }
  if (!json_file.empty()) std::ofstream(json_file) << doc.dump(2) << "\n";

  const auto [lo, hi] = std::minmax_element(t.batch_us.begin(), t.batch_us.end());
  fmt::print("op:       {} {} {}\n", c.op, mojo::dtype_name(c.dtype), c.label());
  fmt::print("device:   {} ({}), kernels compiled by {}\n", dev.name(), dev.target().sm_name(),
             dev.is_cpu() ? "the host's C++ compiler" : rt.compiler().name());
  fmt::print("kernel:   {}{} [{}]\n", t.kernel,
             t.plan_kernels > 1 ? fmt::format(" (+{} more in the plan)", t.plan_kernels - 1) : "", t.params.str());
  fmt::print("time:     {:.2f} µs per launch: median of {} batches of {} launches ({}{} buffer set{}; batches "
             "{:.2f} to {:.2f} µs)\n",
             t.us, t.batch_us.size(), t.launches_per_batch,
             dev.is_cpu() ? "CPU device, wall time; " : t.graph ? "CUDA graph, events; " : "events; ", t.copies,
             t.copies == 1 ? "" : "s", *lo, *hi);
  fmt::print("traffic:  {:.3f} MB{} -> {:.0f} GB/s = {:.0f}% of {:.0f} GB/s\n", t.traffic.bytes * 1e-6,
             t.traffic.note.empty() ? "" : fmt::format(" ({})", t.traffic.note), r.gbs, 100 * r.gbs / r.copy_gbs,
             r.copy_gbs);
  if (t.traffic.flops > 0)
    fmt::print("compute:  {:.3f} GFLOP -> {:.1f} TFLOP/s = {:.0f}% of {:.0f} TFLOP/s\n", t.traffic.flops * 1e-9, r.tflops,
               100 * r.tflops / r.peak_tflops, r.peak_tflops);
  fmt::print("roofline: {:.0f}% ({}-bound; an H100's {:.0f} GB/s copy and {:.0f} TFLOP/s {}){}\n", 100 * r.fraction,
             r.bound, r.copy_gbs, r.peak_tflops, c.dtype == mojo::DType::f32 ? "f32" : "dense f16/bf16",
             dev.is_cpu() ? " - the CPU device emulates, so this says nothing of the kernel's speed" : "");
  return 0;
}

}  // namespace bench
