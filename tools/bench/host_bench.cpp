// The host's share of a launch on a cache hit, no GPU needed: from the call
// to the moment the driver's launch would be called. The device layer's
// launch sink takes the launch instead of running it, and counts what else
// reached the device layer; heap allocations are counted by this binary's
// operator new. Goal (issue 15): at most 100 ns by handle and 400 ns by name
// on a 2-core CI machine, no allocation, no driver call besides the launch.
//
// Everything here is on the CPU device, even where there is a GPU: the
// Runtime, the buffers (its device is made current before they are
// allocated) and so every launch the sink takes. The sink is removed on the
// way out, exception or not, and a launch of a GPU function reaching it is an
// error; the CPU device is left current, so the tables after this one make
// their own device current before allocating (bench::use_device).
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "bench.hpp"
#include "device/hooks.hpp"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
std::atomic<std::uint64_t> g_launches{0};
// The function of the last launch the sink took: the table checks after each timed loop that it is the CPU
// device's (a loop launches one function), so the sink itself costs next to nothing.
mojo::Function g_last_function;
void count_launch(const mojo::Function& f, mojo::Dim3, mojo::Dim3, unsigned, mojo::StreamHandle, void**,
                  mojo::LaunchOptions) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_last_function = f;
}

// The sink for a scope: removed however the scope ends, so no later launch is swallowed.
struct SinkScope {
  SinkScope() { mojo::device_hooks::set_launch_sink(count_launch); }
  ~SinkScope() { mojo::device_hooks::set_launch_sink(nullptr); }
  SinkScope(const SinkScope&) = delete;
  SinkScope& operator=(const SinkScope&) = delete;
};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace bench {
namespace {

struct HostCase {
  const char* what;
  const char* op;
  std::vector<mojo::TensorSpec> specs;
  std::vector<mojo::ScalarArg> scalars;
};

struct PerLaunch {
  double ns = 0, allocations = 0, driver_calls = 0, launches = 0;
};

// Nanoseconds per call of `launch_once` (median over batches), and what each call cost besides.
template <class F>
PerLaunch measure(int total, F&& launch_once) {
  const int batch = 10000;
  std::vector<double> ns;
  const std::uint64_t allocations = g_allocations, driver_calls = mojo::device_hooks::driver_calls(),
                      launches = g_launches;
  for (int done = 0; done < total; done += batch) {
    const auto t = Clock::now();
    for (int i = 0; i < batch; ++i) launch_once();
    ns.push_back(ms_since(t) * 1e6 / batch);
  }
  if (g_last_function.handle() != nullptr)
    throw mojo::Error("bench: a launch of a GPU function reached the host table's sink");
  const double n = double(ns.size()) * batch;
  return {median(ns), double(g_allocations - allocations) / n,
          double(mojo::device_hooks::driver_calls() - driver_calls) / n, double(g_launches - launches) / n};
}

}  // namespace

void bench_host(const Options& options) {
  using mojo::DType;
  using mojo::TensorSpec;
  mojo::RuntimeOptions o;
  o.device = "cpu:sm_90a";  // both GEMM paths; nothing here runs a kernel
  mojo::Runtime rt(o);
  if (!use_device(rt).is_cpu()) throw mojo::Error("bench: the host table's Runtime is not on the CPU device");
  const std::vector<HostCase> cases = {
      {"rms_norm bf16 1x4096", "rms_norm",
       {TensorSpec(DType::bf16, {1, 4096}), TensorSpec(DType::bf16, {1, 4096}), TensorSpec(DType::bf16, {4096})},
       {{"eps", 1e-6}}},
      {"linear bf16 16x4096x4096, sm_90a path (TMA)", "linear",
       {TensorSpec(DType::bf16, {16, 4096}), TensorSpec(DType::bf16, {16, 4096}), TensorSpec(DType::bf16, {4096, 4096}),
        TensorSpec(), TensorSpec()},
       {{"path", 90}}},
  };
  const int n = options.smoke ? 20000 : options.quick ? 100000 : 1000000;
  fmt::print("\n## Host overhead per launch, cache hit (cpu device, launches taken by a sink; {} calls, median of "
             "10000-call batches)\n\n",
             n);
  fmt::print("| op | path | ns / launch | heap allocations / launch | driver calls / launch | launches |\n");
  fmt::print("|---|---|---:|---:|---:|---:|\n");
  SinkScope sink;
  for (const HostCase& c : cases) {
    rt.device().make_current();  // the buffers are the CPU device's: nothing the sink takes points at a GPU
    // Two sets of buffers of the same shapes: the same tensors again, or others like them.
    std::vector<mojo::DeviceBuffer> buffers;
    std::vector<mojo::Tensor> first, second;
    for (const TensorSpec& s : c.specs)
      for (std::vector<mojo::Tensor>* set : {&first, &second}) {
        buffers.emplace_back(s.nbytes());
        set->push_back(s.rank() == 0 ? mojo::Tensor{s, 0} : buffers.back().as(s));
      }
    const mojo::KernelHandle handle = rt.get_kernel(c.op, first, c.scalars);
    rt.launch(c.op, first, c.scalars);  // the first call by name resolves it; later ones hit
    int i = 0;
    const auto& other = [&]() -> const std::vector<mojo::Tensor>& { return ++i % 2 ? second : first; };
    const std::pair<const char*, PerLaunch> rows[] = {
        {"KernelHandle::launch, same tensors", measure(n, [&] { handle.launch(first, c.scalars); })},
        {"KernelHandle::launch, other buffers", measure(n, [&] { handle.launch(other(), c.scalars); })},
        {"Runtime::launch, same tensors", measure(n, [&] { rt.launch(c.op, first, c.scalars); })},
        {"Runtime::launch, other buffers", measure(n, [&] { rt.launch(c.op, other(), c.scalars); })},
    };
    for (const auto& [path, r] : rows) {
      fmt::print("| {} | {} | {:.0f} | {:.2f} | {:.2f} | {:.2f} |\n", c.what, path, r.ns, r.allocations, r.driver_calls,
                 r.launches);
      if (r.launches < 1) fail(fmt::format("host: {} {}: {:.2f} launches per call reached the sink", c.what, path, r.launches));
    }
  }
}

}  // namespace bench
