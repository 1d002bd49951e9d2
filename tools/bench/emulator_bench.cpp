// The CPU device: how long the emulator takes to run a kernel (host compile
// excluded: it is cached like any artifact, and reported beside it). The
// goal (issue 14): a 64x4096 bf16 rms_norm within 50 ms and a 256^3 bf16
// gemm on each path within 1 s, on one core.
#include <fmt/format.h>

#include "bench.hpp"

namespace bench {

namespace {

struct EmulatedCase {
  std::string what;
  const char* device;
  const char* op;
  std::vector<mojo::TensorSpec> specs;
  std::vector<mojo::ScalarArg> scalars;
};

}  // namespace

void bench_emulator(const Options& options) {
  using mojo::DType;
  using mojo::TensorSpec;
  const bool smoke = options.smoke;
  const TensorSpec x(DType::bf16, {smoke ? 4 : 64, smoke ? 256 : 4096}), w(DType::bf16, {smoke ? 256 : 4096}),
      m(DType::bf16, {smoke ? 64 : 256, smoke ? 64 : 256});
  const std::string gemm = smoke ? "gemm bf16 64^3" : "gemm bf16 256^3";
  const std::vector<EmulatedCase> cases = {
      {smoke ? "rms_norm bf16 4x256" : "rms_norm bf16 64x4096", "cpu", "rms_norm", {x, x, w}, {}},
      {gemm + ", sm_80 path", "cpu", "gemm", {m, m, m}, {{"path", 80}}},
      {gemm + ", sm_90a path", "cpu:sm_90a", "gemm", {m, m, m}, {{"path", 90}}},
  };
  const int runs = smoke ? 1 : options.quick ? 3 : 7;
  fmt::print(
      "\n## The CPU device: emulation time (one core; random inputs)\n\n"
      "| kernel | device | kernel name | host compile ms | emulation ms (median of {}) |\n"
      "|---|---|---|---:|---:|\n",
      runs);
  for (const EmulatedCase& c : cases) {
    mojo::RuntimeOptions o;
    o.device = c.device;
    o.cache_dir = fresh_dir("emulator");
    mojo::Runtime rt(o);
    use_device(rt);  // the buffers below are the CPU device's, whatever an earlier table left current
    const mojo::OpDef& op = mojo::find_op(c.op);
    std::vector<mojo::DeviceBuffer> buffers;
    std::vector<mojo::Tensor> tensors;
    for (std::size_t i = 0; i < c.specs.size(); ++i) {
      const std::vector<std::uint8_t> data = mojo::find_check(c.op).random_data(i, c.specs, c.scalars, 5);
      buffers.emplace_back(c.specs[i].nbytes());
      buffers.back().copy_from_host(data.data(), std::min(data.size(), c.specs[i].nbytes()));
      tensors.push_back(buffers.back().as(c.specs[i]));
    }
    const auto compile_start = Clock::now();
    const mojo::KernelHandle h = rt.get_kernel(c.op, tensors, c.scalars);
    const double compile_ms = ms_since(compile_start);
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) {
      const auto start = Clock::now();
      h.launch(tensors, c.scalars);
      times.push_back(ms_since(start));
    }
    fmt::print("| {} | {} | `{}` | {:.0f} | {:.1f} |\n", c.what, rt.device().name(), h.kernel_name(), compile_ms,
               median(times));
    std::filesystem::remove_all(o.cache_dir);
  }
}

}  // namespace bench
