// Launch-path tables (on options.device: a GPU, or the CPU device with
// --smoke or --device cpu): a new process's first launch from a warm disk
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
  const int batch = std::max(1, std::min(1000, total / 2));
  std::vector<double> per_call;
  for (int done = 0; done < total; done += batch) {
    auto t = Clock::now();
    for (int i = 0; i < batch; ++i) launch_once();
    per_call.push_back(ms_since(t) * 1e3 / batch);
    stream.synchronize();
  }
  return median(per_call);
}

// Random bf16 contents for one of rms_norm's tensors (the op's own random_data).
void fill_random(mojo::DeviceBuffer& b, const std::vector<mojo::TensorSpec>& specs, std::size_t i) {
  const std::vector<std::uint8_t> bytes = mojo::find_check("rms_norm").random_data(i, specs, {}, 3);
  b.copy_from_host(bytes.data(), std::min(bytes.size(), b.size()));
}

}  // namespace

void bench_host_overhead(mojo::Runtime& rt, const Options& options) {
  const mojo::Device& device = use_device(rt);  // the buffers below live on rt's device
  const bool cpu = device.is_cpu();
  const int n = options.smoke ? 200 : cpu ? 2000 : options.quick ? 10000 : 100000;
  const mojo::TensorSpec x(mojo::DType::bf16, {1, 4096}), w(mojo::DType::bf16, {4096});
  const std::vector<mojo::TensorSpec> specs{x, x, w};
  mojo::DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  fill_random(xb, specs, 1);
  fill_random(wb, specs, 2);
  ob.fill_bytes(0);
  const mojo::Tensor out = ob.as(x), in = xb.as(x), weight = wb.as(w);
  mojo::Stream stream;
  const float eps = 1e-6f;
  rt.launch("rms_norm", {out, in, weight}, {{"eps", eps}}, stream);
  mojo::KernelHandle h = rt.get_kernel("rms_norm", {out, in, weight}, {{"eps", eps}});

  // The raw baseline launches the same function with the same arguments and
  // geometry, packed once up front by the op (what a hand-written caller
  // does): cuLaunchKernel itself on a GPU; on the CPU device, the device
  // layer's launch (the emulator runs the kernel).
  const mojo::OpDef& op = mojo::find_op("rms_norm");
  const std::vector<mojo::Tensor> tensors{out, in, weight};
  const std::vector<mojo::ScalarArg> scalars{{"eps", mojo::Scalar(eps)}};
  mojo::KernelArgs args;
  op.pack_args(h.params(), tensors, scalars, {}, args);
  const mojo::LaunchGeometry g = op.geometry(h.params(), tensors);
  double raw_us = 0;
  if (cpu) {
    const mojo::Function& f = h.function();
    raw_us = host_us_per_launch(stream, n, [&] { mojo::launch(f, g.grid, g.block, g.dynamic_smem, stream, args.data()); });
  } else {
    RawDriver raw;
    if (raw.launch_kernel == nullptr) throw mojo::Error("bench: no cuLaunchKernel in libcuda.so.1");
    CUfunction f = h.function().handle();
    raw_us = host_us_per_launch(stream, n, [&] {
      raw.launch_kernel(f, g.grid.x, g.grid.y, g.grid.z, g.block.x, g.block.y, g.block.z, g.dynamic_smem,
                        stream.handle(), args.data(), nullptr);
    });
  }
  const double handle_us = host_us_per_launch(stream, n, [&] { h.launch(tensors, scalars, stream); });
  const double launch_us = host_us_per_launch(stream, n, [&] { rt.launch("rms_norm", tensors, scalars, stream); });
  fmt::print("\n## Host overhead per launch ({}; cache hit, {} launches, median of {}-launch batches{})\n\n",
             device.name(), n, std::max(1, std::min(1000, n / 2)), cpu ? "; the CPU device runs each kernel" : "");
  fmt::print("| path | µs / launch | over raw µs |\n|---|---:|---:|\n");
  fmt::print("| raw {} | {:.2f} | - |\n", cpu ? "mojo::launch" : "cuLaunchKernel", raw_us);
  fmt::print("| KernelHandle::launch | {:.2f} | {:+.2f} |\n", handle_us, handle_us - raw_us);
  fmt::print("| Runtime::launch(\"rms_norm\", ...) | {:.2f} | {:+.2f} |\n", launch_us, launch_us - raw_us);
}

// Runs in a child process: a new process with a warm disk cache, timed from
// opening the device to the first launch completing.
int warm_start_child(const std::string& dir, const std::string& device_spec) {
  auto t0 = Clock::now();
  mojo::Device device = mojo::Device::open(device_spec);  // made current: the buffers below live there
  double context_ms = ms_since(t0);
  const mojo::TensorSpec x(mojo::DType::bf16, {1, 4096}), w(mojo::DType::bf16, {4096});
  const std::vector<mojo::TensorSpec> specs{x, x, w};
  mojo::DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  fill_random(xb, specs, 1);
  fill_random(wb, specs, 2);
  auto t1 = Clock::now();
  mojo::RuntimeOptions o;
  o.cache_dir = dir;
  o.device = device_spec;
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
    o.device = options.device;
    mojo::Runtime fill(o);
    use_device(fill);  // before the buffers: whatever an earlier table left current (the CPU device) is not fill's
    const mojo::TensorSpec x(mojo::DType::bf16, {1, 4096}), w(mojo::DType::bf16, {4096});
    const std::vector<mojo::TensorSpec> specs{x, x, w};
    mojo::DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
    fill_random(xb, specs, 1);
    fill_random(wb, specs, 2);
    fill.launch("rms_norm", {ob.as(x), xb.as(x), wb.as(w)});
    fill.device().synchronize();
  }
  const int runs = options.smoke ? 2 : 5;
  std::vector<double> firsts, contexts;
  for (int i = 0; i < runs; ++i) {
    FILE* p = popen(fmt::format("{} --warm-start-child {} {}", self.string(), dir.string(), options.device).c_str(), "r");
    double ctx = 0, first = 0;
    int compiles = -1;
    if (p && std::fscanf(p, "%lf %lf %d", &ctx, &first, &compiles) == 3 && compiles == 0) {
      firsts.push_back(first);
      contexts.push_back(ctx);
    }
    if (p) pclose(p);
  }
  std::filesystem::remove_all(dir);
  if (firsts.size() != std::size_t(runs)) {
    fmt::print("\nwarm start: {} of {} child processes failed or compiled\n", runs - int(firsts.size()), runs);
    fail("warm start: a child process failed or compiled");
    if (firsts.empty()) return;
  }
  fmt::print("\n## Warm start ({}; new process, kernel on disk; median of {})\n\n| what | ms |\n|---|---:|\n",
             options.device, firsts.size());
  fmt::print("| open the device (GPU: cuDevicePrimaryCtxRetain, once per process) | {:.1f} |\n", median(contexts));
  fmt::print("| Runtime() + first launch: disk hit, module load, launch, sync | {:.2f} |\n", median(firsts));
}

}  // namespace bench
