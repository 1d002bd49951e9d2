// mojo-bench: what rms_norm costs, from cold compile to the kernel's
// bandwidth. A program, not a test: it prints a table; docs/benchmarks.md
// records what was measured where.
//
//   mojo-bench              compile numbers here; with a GPU, everything
//   mojo-bench --quick      fewer repetitions
//
// Method (see docs/benchmarks.md): GPU time from CUDA events around a CUDA
// graph of many launches that cycle through enough buffers to defeat the
// 50 MiB L2; bandwidth counts each input read once and each output written
// once; host overhead is the median over batches of back-to-back launches.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cache/entry.hpp"
#include "mojo/mojo.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr double kNominalCopyGBs = 3000;  // H100 SXM device-to-device copy, read + write

std::filesystem::path fresh_dir(const char* tag) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("mojo-bench-{}-{}", tag, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<mojo::Tensor> rms_specs(mojo::DType d, std::int64_t rows, std::int64_t hidden) {
  mojo::TensorSpec x(d, {rows, hidden}), w(d, {hidden});
  return {{x}, {x}, {w}};
}

// ---- compile: no GPU needed -------------------------------------------------------

void bench_compile(const mojo::Target& target) {
  auto dir = fresh_dir("compile");
  mojo::RuntimeOptions o;
  o.cache_dir = dir;
  fmt::print("\n## Compile ({}, NVRTC, cubin)\n\n| what | ms |\n|---|---:|\n", target.sm_name());
  {
    mojo::Runtime rt(o);
    auto t = Clock::now();
    rt.compile("rms_norm", rms_specs(mojo::DType::bf16, 1, 4096), {}, target, mojo::Emit::cubin);
    fmt::print("| cold compile, first in process (includes loading NVRTC) | {:.1f} |\n", ms_since(t));
    t = Clock::now();
    rt.compile("rms_norm", rms_specs(mojo::DType::bf16, 1, 5120), {}, target, mojo::Emit::cubin);
    fmt::print("| cold compile, another specialization | {:.1f} |\n", ms_since(t));
    t = Clock::now();
    rt.compile("rms_norm", rms_specs(mojo::DType::f16, 1, 4096), {}, target, mojo::Emit::ptx);
    fmt::print("| cold compile to PTX only | {:.1f} |\n", ms_since(t));
  }
  mojo::Runtime rt(o);
  auto t = Clock::now();
  rt.compile("rms_norm", rms_specs(mojo::DType::bf16, 1, 4096), {}, target, mojo::Emit::cubin);
  fmt::print("| disk hit in a new Runtime (key + read + verify) | {:.2f} |\n", ms_since(t));
  std::filesystem::remove_all(dir);
}

// ---- cache: no GPU needed ---------------------------------------------------------------

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng());
  return s;
}

// One prewarm of `manifest` by each of `processes` mojo-jit processes at once.
// Returns {wall seconds, total compiled (from their summaries)}.
std::pair<double, int> race_prewarm(const std::filesystem::path& cli, const std::filesystem::path& manifest,
                                    const std::filesystem::path& dir, int processes) {
  std::filesystem::remove_all(dir);
  std::string cmd = "(";
  for (int p = 0; p < processes; ++p)
    cmd += fmt::format("{} prewarm --manifest {} -j 1 --cache-dir {} 2>/dev/null & ", cli.string(), manifest.string(),
                       dir.string());
  cmd += "wait)";
  auto t = Clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  int compiled = 0;
  char line[512];
  while (pipe && std::fgets(line, sizeof line, pipe)) {
    int c = 0;
    if (const char* at = std::strstr(line, "specializations: "); at && std::sscanf(at, "specializations: %d compiled", &c) == 1)
      compiled += c;
  }
  if (pipe) pclose(pipe);
  return {ms_since(t) / 1e3, compiled};
}

void bench_cache(const std::filesystem::path& self_dir, bool quick) {
  auto dir = fresh_dir("cache");
  fmt::print("\n## Cache (CPU only)\n\n| what | result |\n|---|---:|\n");

  // A disk hit: header check, checksum and read of a 100 KB entry.
  {
    mojo::DiskCache cache(dir / "hit");
    const std::string payload = random_bytes(100 * 1024, 1);
    const mojo::KernelKey key = mojo::compute_key(mojo::KeyInputs{"hit", "k", "", "sm_90", "", mojo::Emit::cubin});
    cache.store(key, mojo::Emit::cubin, "op=bench\n", payload);
    std::vector<double> us;
    for (int i = 0; i < 2000; ++i) {
      auto t = Clock::now();
      auto got = cache.load(key, mojo::Emit::cubin);
      us.push_back(ms_since(t) * 1e3);
      if (!got || got->size() != payload.size()) throw mojo::Error("bench: disk hit returned the wrong bytes");
    }
    std::sort(us.begin(), us.end());
    fmt::print("| disk hit of a 100 KB entry (read + verify), median of 2000 | {:.1f} µs |\n", us[us.size() / 2]);
  }

  // verify of 10,000 entries of 8 KB.
  {
    const int n = quick ? 2000 : 10000;
    mojo::DiskCache cache(dir / "verify");
    const std::string payload = random_bytes(8 * 1024, 2);
    for (int i = 0; i < n; ++i) {
      mojo::KernelKey key = mojo::compute_key(mojo::KeyInputs{"verify", fmt::format("k{}", i), "", "sm_90", "", mojo::Emit::cubin});
      std::filesystem::path path = cache.entry_path(key, mojo::Emit::cubin);
      std::filesystem::create_directories(path.parent_path());
      mojo::entry::Header h = mojo::entry::make_header(key, mojo::Emit::cubin, "", payload);
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(&h), sizeof h);
      out << payload;
    }
    ::sync();
    std::vector<std::string> problems;
    auto t = Clock::now();
    std::size_t good = cache.verify(&problems, false);
    double s = ms_since(t) / 1e3;
    if (good != std::size_t(n) || !problems.empty()) throw mojo::Error("bench: verify disagreed");
    fmt::print("| `cache verify` of {} entries of 8 KB (warm page cache) | {:.2f} s |\n", n, s);
  }

  // Processes racing cold on one directory vs one process alone.
  {
    const int specs = quick ? 12 : 50, processes = 8;
    std::filesystem::path manifest = dir / "race.toml";
    std::string hidden;
    for (int k = 1; k <= specs; ++k) hidden += fmt::format("{}{{ x = [1, {}] }}", k > 1 ? ", " : "", 64 * k);
    std::ofstream(manifest) << fmt::format("targets = [\"sm_90\"]\n[[kernel]]\nop = \"rms_norm\"\ndtypes = [\"f32\"]\n"
                                           "shapes = [{}]\n", hidden);
    const std::filesystem::path cli = self_dir / "mojo-jit";
    auto [alone_s, alone_compiled] = race_prewarm(cli, manifest, dir / "alone", 1);
    auto [race_s, race_compiled] = race_prewarm(cli, manifest, dir / "race", processes);
    std::vector<std::string> problems;
    std::size_t entries = mojo::DiskCache(dir / "race").list(&problems).size();
    fmt::print("| one process prewarming {} specializations | {:.2f} s ({} compiled) |\n", specs, alone_s, alone_compiled);
    fmt::print("| {} processes racing cold on the same {} | {:.2f} s = {:.2f}x ({} compiled, {} entries, {} corrupt) |\n",
               processes, specs, race_s, race_s / alone_s, race_compiled, entries, problems.size());
  }
  std::filesystem::remove_all(dir);
}

// ---- GPU -----------------------------------------------------------------------------

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

void bench_host_overhead(mojo::Runtime& rt, bool quick) {
  const mojo::TensorSpec x(mojo::DType::bf16, {1, 4096}), w(mojo::DType::bf16, {4096});
  mojo::DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  const mojo::Tensor out = ob.as(x), in = xb.as(x), weight = wb.as(w);
  mojo::Stream stream;
  rt.launch("rms_norm", {out, in, weight}, {}, stream);
  mojo::KernelHandle h = rt.get_kernel("rms_norm", {out, in, weight});
  RawDriver raw;
  const int n = quick ? 10000 : 100000;

  float eps = 1e-6f;
  long long rows = 1;
  mojo::DevicePtr o = out.data, i = in.data, wp = weight.data;
  void* args[] = {&o, &i, &wp, &eps, &rows};
  CUfunction f = h.function().handle();
  double raw_us = host_us_per_launch(stream, n, [&] {
    raw.launch_kernel(f, 1, 1, 1, 128, 1, 1, 0, stream.handle(), args, nullptr);
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

double copy_bandwidth_gbs(bool quick) {
  const std::size_t bytes = std::size_t(quick ? 256 : 1024) << 20;
  mojo::DeviceBuffer a(bytes), b(bytes);
  mojo::Stream stream;
  mojo::Event start, stop;
  mojo::copy_async(b.ptr(), a.ptr(), bytes, stream);
  const int reps = 10;
  start.record(stream);
  for (int r = 0; r < reps; ++r) mojo::copy_async(b.ptr(), a.ptr(), bytes, stream);
  stop.record(stream);
  stop.synchronize();
  double s = mojo::Event::elapsed_ms(start, stop) * 1e-3 / reps;
  return 2.0 * double(bytes) / s * 1e-9;
}

void bench_kernels(mojo::Runtime& rt, bool quick) {
  const double copy_gbs = copy_bandwidth_gbs(quick);
  fmt::print("\n## rms_norm kernel time (hidden 4096; device copy bandwidth measured now: {:.0f} GB/s)\n\n", copy_gbs);
  fmt::print("| dtype | rows | µs | GB/s | % of measured copy | % of 3.0 TB/s |\n|---|---:|---:|---:|---:|---:|\n");
  const std::int64_t hidden = 4096;
  for (mojo::DType dtype : {mojo::DType::bf16, mojo::DType::f32}) {
    for (std::int64_t rows : {1, 32, 4096, 16384}) {
      const mojo::TensorSpec x(dtype, {rows, hidden}), w(dtype, {hidden});
      const double bytes = double(2 * x.nbytes() + w.nbytes());
      // Enough copies of x/out that one graph replay streams > 256 MiB (more than L2).
      const int copies = int(std::clamp<double>(std::ceil(256.0 * (1 << 20) / bytes), 1, 64));
      std::vector<mojo::DeviceBuffer> xs, outs;
      for (int c = 0; c < copies; ++c) {
        xs.emplace_back(x.nbytes());
        outs.emplace_back(x.nbytes());
        xs.back().fill_bytes(0x3c);  // a finite value in every float type
      }
      mojo::DeviceBuffer wb(w.nbytes());
      wb.fill_bytes(0x3c);
      mojo::Stream stream;
      mojo::KernelHandle h = rt.get_kernel("rms_norm", {outs[0].as(x), xs[0].as(x), wb.as(w)});
      const int per_graph = std::max(copies, 20);
      mojo::Graph graph = mojo::Graph::capture(stream, [&] {
        for (int i = 0; i < per_graph; ++i)
          h.launch({outs[i % copies].as(x), xs[i % copies].as(x), wb.as(w)}, {}, stream);
      });
      graph.launch(stream);  // warm-up
      stream.synchronize();
      mojo::Event start, stop;
      std::vector<double> us;
      for (int rep = 0; rep < (quick ? 3 : 10); ++rep) {
        start.record(stream);
        graph.launch(stream);
        stop.record(stream);
        stop.synchronize();
        us.push_back(mojo::Event::elapsed_ms(start, stop) * 1e3 / per_graph);
      }
      std::sort(us.begin(), us.end());
      double t = us[us.size() / 2];
      double gbs = bytes / (t * 1e-6) * 1e-9;
      fmt::print("| {} | {} | {:.2f} | {:.0f} | {:.0f}% | {:.0f}% |\n", mojo::dtype_name(dtype), rows, t, gbs,
                 100 * gbs / copy_gbs, 100 * gbs / kNominalCopyGBs);
    }
  }
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

void bench_warm_start(mojo::Runtime& rt, const std::filesystem::path& self) {
  (void)rt;
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

}  // namespace

int main(int argc, char** argv) try {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--warm-start-child" && i + 1 < argc) return warm_start_child(argv[i + 1]);
    if (a == "--quick") quick = true;
    else if (a == "--help" || a == "-h") {
      std::puts("usage: mojo-bench [--quick]\n  compile timings always; with a GPU also warm start, host overhead and kernel bandwidth");
      return 0;
    } else {
      std::fprintf(stderr, "mojo-bench: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  const bool gpu = mojo::device_available();
  mojo::Runtime rt;
  const mojo::Target target = gpu ? rt.device().target() : mojo::Target::parse("sm_90");
  fmt::print("# mojo-bench: rms_norm\n\ndevice: {}\n", gpu ? fmt::format("{} ({}, {} SMs)", rt.device().name(),
                                                                          target.sm_name(), rt.device().sm_count())
                                                          : "none (compile numbers only, for sm_90)");
  bench_compile(target);
  bench_cache(std::filesystem::canonical("/proc/self/exe").parent_path(), quick);
  if (!gpu) return 0;
  bench_warm_start(rt, std::filesystem::canonical("/proc/self/exe"));
  bench_host_overhead(rt, quick);
  bench_kernels(rt, quick);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mojo-bench: error: %s\n", e.what());
  return 1;
}
