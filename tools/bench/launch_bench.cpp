// Launch-path tables (GPU): a new process's first launch from a warm disk
// cache, and the host cost of one launch on the cache-hit path.
#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdio>

#include "bench.hpp"

namespace bench {
namespace {

struct RawDriver {
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  RawDriver() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) launch_kernel = reinterpret_cast<decltype(launch_kernel)>(dlsym(lib, "cuLaunchKernel"));
  }
};

// Microseconds per call of `launch_once`: median over batches of back-to-back calls.
template <class F>
double host_us_per_launch(const mojo::Stream& stream, int total, F&& launch_once) {
  const int batch = 1000;
  std::vector<double> per_call;
  for (int done = 0; done < total; done += batch) {
    auto t = Clock::now();
    for (int i = 0; i < batch; ++i) launch_once();
    per_call.push_back(ms_since(t) * 1e3 / batch);
    stream.synchronize();
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

void bench_host_overhead(mojo::Runtime& rt, const Options& options) {
  const bool quick = options.quick;
  const mojo::TensorSpec x(mojo::DType::bf16, {1, 4096}), w(mojo::DType::bf16, {4096});
  mojo::DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  const mojo::Tensor out = ob.as(x), in = xb.as(x), weight = wb.as(w);
  mojo::Stream stream;
  rt.launch("rms_norm", {out, in, weight}, {}, stream);
  mojo::KernelHandle h = rt.get_kernel("rms_norm", {out, in, weight});
  RawDriver raw;
  const int n = quick ? 10000 : 100000;

  // The raw baseline launches the same function with the same arguments and
  // geometry, packed once up front by the op (what a hand-written caller does).
  const float eps = 1e-6f;
  const mojo::OpDef& op = mojo::find_op("rms_norm");
  const std::vector<mojo::Tensor> tensors{out, in, weight};
  const std::vector<mojo::ScalarArg> scalars{{"eps", mojo::Scalar(eps)}};
  mojo::KernelArgs args;
  op.pack_args(h.params(), tensors, scalars, 0, args);
  const mojo::LaunchGeometry g = op.geometry(h.params(), tensors);
  CUfunction f = h.function().handle();
  double raw_us = host_us_per_launch(stream, n, [&] {
    raw.launch_kernel(f, g.grid.x, g.grid.y, g.grid.z, g.block.x, g.block.y, g.block.z, g.dynamic_smem, stream.handle(),
                      args.data(), nullptr);
  });
  double handle_us = host_us_per_launch(stream, n, [&] { h.launch({out, in, weight}, {{"eps", eps}}, stream); });
  double launch_us =
      host_us_per_launch(stream, n, [&] { rt.launch("rms_norm", {out, in, weight}, {{"eps", eps}}, stream); });
  fmt::print("\n## Host overhead per launch (cache hit, {} launches, median of 1000-launch batches)\n\n", n);
  fmt::print("| path | µs / launch | over raw µs |\n|---|---:|---:|\n");
  fmt::print("| raw cuLaunchKernel | {:.2f} | - |\n", raw_us);
  fmt::print("| KernelHandle::launch | {:.2f} | {:+.2f} |\n", handle_us, handle_us - raw_us);
  fmt::print("| Runtime::launch(\"rms_norm\", ...) | {:.2f} | {:+.2f} |\n", launch_us, launch_us - raw_us);
}

// Runs in a child process: a new process with a warm disk cache, timed from
// Runtime construction to the first launch completing.
int warm_start_child(const std::string& dir) {
  auto t0 = Clock::now();
  mojo::Device device = mojo::Device::open();
  double context_ms = ms_since(t0);
  const mojo::TensorSpec x(mojo::DType::bf16, {1, 4096}), w(mojo::DType::bf16, {4096});
  mojo::DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  auto t1 = Clock::now();
  mojo::RuntimeOptions o;
  o.cache_dir = dir;
  mojo::Runtime rt(o);
  rt.launch("rms_norm", {ob.as(x), xb.as(x), wb.as(w)});
  rt.device().synchronize();
  double first_ms = ms_since(t1);
  fmt::print("{:.3f} {:.3f} {}\n", context_ms, first_ms, rt.stats().compiles);
  return 0;
}

void bench_warm_start(const Options& options) {
  const std::filesystem::path& self = options.self;
  auto dir = fresh_dir("warm");
  {
    mojo::RuntimeOptions o;
    o.cache_dir = dir;
    mojo::Runtime fill(o);
    const mojo::TensorSpec x(mojo::DType::bf16, {1, 4096}), w(mojo::DType::bf16, {4096});
    mojo::DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
    fill.launch("rms_norm", {ob.as(x), xb.as(x), wb.as(w)});
    fill.device().synchronize();
  }
  std::vector<double> firsts, contexts;
  for (int i = 0; i < 5; ++i) {
    FILE* p = popen(fmt::format("{} --warm-start-child {}", self.string(), dir.string()).c_str(), "r");
    double ctx = 0, first = 0;
    int compiles = -1;
    if (p && std::fscanf(p, "%lf %lf %d", &ctx, &first, &compiles) == 3 && compiles == 0) {
      firsts.push_back(first);
      contexts.push_back(ctx);
    }
    if (p) pclose(p);
  }
  std::filesystem::remove_all(dir);
  if (firsts.empty()) {
    fmt::print("\nwarm start: the child process failed\n");
    return;
  }
  std::sort(firsts.begin(), firsts.end());
  std::sort(contexts.begin(), contexts.end());
  fmt::print("\n## Warm start (new process, kernel on disk; median of {})\n\n| what | ms |\n|---|---:|\n", firsts.size());
  fmt::print("| primary context (cuDevicePrimaryCtxRetain, once per process) | {:.1f} |\n", contexts[contexts.size() / 2]);
  fmt::print("| Runtime() + first launch: disk hit, cuModuleLoadData, launch, sync | {:.2f} |\n", firsts[firsts.size() / 2]);
}

}  // namespace bench
