// mojo-bench: what the runtime costs, from a cold compile to each op's
// bandwidth. A program, not a test: it prints markdown tables;
// docs/benchmarks.md records what was measured where and when.
//
//   mojo-bench                      every table this machine can run
//   mojo-bench --only ops,launch    some of them (compile, modes, cache, emulator, host, launch, ops)
//   mojo-bench --quick              fewer repetitions
//   mojo-bench --json FILE          also the op table as JSON (tools/bench/torch_compare.py)
//
// Method (docs/benchmarks.md): GPU time from CUDA events around a CUDA graph
// of many launches that cycle through enough buffers to defeat the 50 MiB L2;
// bandwidth counts each input read once and each output written once; host
// overhead is the median over batches of back-to-back launches; CPU time is
// getrusage of the process and its children.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <sstream>
#include <thread>

#include "bench.hpp"

namespace bench {
std::filesystem::path fresh_dir(const char* tag) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("mojo-bench-{}-{}", tag, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}
}  // namespace bench

int main(int argc, char** argv) try {
  const char* usage =
      "usage: mojo-bench [--quick] [--only compile,modes,cache,emulator,host,launch,ops] [--json FILE]\n"
      "  compile, modes, cache, emulator and host (the CPU device) run anywhere; launch and ops need a GPU";
  bench::Options options;
  options.self = std::filesystem::canonical("/proc/self/exe");
  std::set<std::string> only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--warm-start-child" && i + 1 < argc) return bench::warm_start_child(argv[i + 1]);
    if (a == "--first-compile-child" && i + 2 < argc) return bench::first_compile_child(argv[i + 1], argv[i + 2]);
    if (a == "--quick") {
      options.quick = true;
    } else if (a == "--json" && i + 1 < argc) {
      options.json = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      for (std::string s; std::getline(ss, s, ',');) only.insert(s);
    } else if (a == "--help" || a == "-h") {
      std::puts(usage);
      return 0;
    } else {
      std::fprintf(stderr, "mojo-bench: unknown argument '%s'\n%s\n", a.c_str(), usage);
      return 2;
    }
  }
  auto wanted = [&](const char* table) { return only.empty() || only.count(table); };

  const bool gpu = mojo::device_available();
  mojo::Runtime rt;
  const mojo::Target target = gpu ? rt.device().target() : mojo::Target::parse("sm_90");
  fmt::print("# mojo-bench\n\ndevice: {}; host: {} cores\n",
             gpu ? fmt::format("{} ({}, {} SMs)", rt.device().name(), target.sm_name(), rt.device().sm_count())
                 : "none (CPU tables only, compiling for sm_90)",
             std::thread::hardware_concurrency());
  if (wanted("compile")) bench::bench_compile(target);
  if (wanted("modes")) bench::bench_compile_modes(target, options);
  if (wanted("cache")) bench::bench_cache(options);
  if (wanted("emulator")) bench::bench_emulator(options);
  if (wanted("host")) bench::bench_host(options);
  if (!gpu) return 0;
  if (wanted("launch")) {
    bench::bench_warm_start(options);
    bench::bench_host_overhead(rt, options);
  }
  if (wanted("ops")) bench::bench_ops(rt, options);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mojo-bench: error: %s\n", e.what());
  return 1;
}
