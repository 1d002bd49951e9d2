// The CPU device: how long the emulator takes to run a kernel (host compile
// excluded: it is cached like any artifact, and reported beside it). The
// goal (issue 14): a 64x4096 bf16 rms_norm within 50 ms and a 256^3 bf16
// gemm on each path within 1 s, on one core.
#include <fmt/format.h>

#include "bench.hpp"

namespace bench {

namespace {

struct EmulatedCase {
  const char* what;
  const char* device;
  const char* op;
  std::vector<mojo::TensorSpec> specs;
  std::vector<mojo::ScalarArg> scalars;
};

}  // namespace

void bench_emulator(const Options& options) {
  using mojo::DType;
  using mojo::TensorSpec;
  const TensorSpec x(DType::bf16, {64, 4096}), w(DType::bf16, {4096}), m(DType::bf16, {256, 256});
  const std::vector<EmulatedCase> cases = {
      {"rms_norm bf16 64x4096", "cpu", "rms_norm", {x, x, w}, {}},
      {"gemm bf16 256^3, sm_80 path", "cpu", "gemm", {m, m, m}, {{"path", 80}}},
      {"gemm bf16 256^3, sm_90a path", "cpu:sm_90a", "gemm", {m, m, m}, {{"path", 90}}},
  };
  fmt::print(
      "\n## The CPU device: emulation time (one core)\n\n"
      "| kernel | device | kernel name | host compile ms | emulation ms (median of {}) |\n"
      "|---|---|---|---:|---:|\n",
      options.quick ? 3 : 7);
  for (const EmulatedCase& c : cases) {
    mojo::RuntimeOptions o;
    o.device = c.device;
    o.cache_dir = fresh_dir("emulator");
    mojo::Runtime rt(o);
    std::vector<mojo::DeviceBuffer> buffers;
    std::vector<mojo::Tensor> tensors;
    for (const TensorSpec& s : c.specs) {
      buffers.emplace_back(s.nbytes());
      buffers.back().fill_bytes(0x3c);  // 1.1 in bf16
      tensors.push_back(buffers.back().as(s));
    }
    const auto compile_start = Clock::now();
    const mojo::KernelHandle h = rt.get_kernel(c.op, tensors, c.scalars);
    const double compile_ms = ms_since(compile_start);
    std::vector<double> runs;
    for (int i = 0; i < (options.quick ? 3 : 7); ++i) {
      const auto start = Clock::now();
      h.launch(tensors, c.scalars);
      runs.push_back(ms_since(start));
    }
    fmt::print("| {} | {} | `{}` | {:.0f} | {:.1f} |\n", c.what, rt.device().name(), h.kernel_name(), compile_ms,
               median(runs));
    std::filesystem::remove_all(o.cache_dir);
  }
}

}  // namespace bench
