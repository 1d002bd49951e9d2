// mojo-bench: what the runtime costs, from a cold compile to each op's
// bandwidth. A program, not a test: it prints markdown tables;
// docs/benchmarks.md records what was measured where and when.
//
//   mojo-bench                      every table this machine can run
//   mojo-bench --only ops,launch    some of them (compile, modes, cache, emulator, host, launch, ops)
//   mojo-bench --quick              fewer repetitions
//   mojo-bench --smoke              every table end to end at tiny shapes, one or two repetitions, on the
//                                   CPU device where there is no GPU; exits 1 on any failure (CTest: Tools.bench_smoke)
//   mojo-bench --device cpu         launch and ops on the CPU device (the emulator; slow at full shapes)
//   mojo-bench --compilers nvrtc    the compile tables with these compilers only (default: every one built)
//   mojo-bench --json FILE          also the op table as JSON (tools/bench/torch_compare.py)
//   mojo-bench --op OP --dtype DT --shape NAME=DIMS... [--param N=V]... [--json [FILE]]
//                                   one op at any shape (one_op.cpp)
//
// Method (docs/benchmarks.md): GPU time from CUDA events around a CUDA graph
// of many launches that cycle through enough buffers to defeat the 50 MiB L2;
// every operand random (the op's random_data); bandwidth counts each input
// read once and each output written once (op_timing.cpp); host overhead is
// the median over batches of back-to-back launches; CPU time is getrusage of
// the process and its children. A table that fails is reported and the
// others still run; mojo-bench then exits 1.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <sstream>
#include <thread>

#include "bench.hpp"

namespace bench {
namespace {
int g_failures = 0;
}  // namespace

std::filesystem::path fresh_dir(const char* tag) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("mojo-bench-{}-{}", tag, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

int failures() { return g_failures; }

void fail(const std::string& what) {
  ++g_failures;
  std::fflush(stdout);
  std::fprintf(stderr, "mojo-bench: FAILED: %s\n", what.c_str());
}

}  // namespace bench

int main(int argc, char** argv) try {
  const char* usage =
      "usage: mojo-bench [--quick | --smoke] [--only compile,modes,cache,emulator,host,launch,ops] [--device D]\n"
      "                  [--compilers nvrtc,llvm] [--json FILE]\n"
      "       mojo-bench --op OP [--dtype DT] [--shape NAME=DIMS]... [--param NAME=VALUE]... [--json [FILE]] "
      "(--op --help)\n"
      "  compile, modes, cache, emulator and host (the CPU device) run anywhere; launch and ops run on --device:\n"
      "  the GPU by default, the CPU device with --smoke where there is none, or with --device cpu";
  const std::set<std::string> tables = {"compile", "modes", "cache", "emulator", "host", "launch", "ops"};
  bench::Options options;
  options.self = std::filesystem::canonical("/proc/self/exe");
  std::set<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--warm-start-child" && i + 1 < argc)
      return bench::warm_start_child(argv[i + 1], i + 2 < argc ? argv[i + 2] : "cuda");
    if (a == "--first-compile-child" && i + 2 < argc) return bench::first_compile_child(argv[i + 1], argv[i + 2]);
    if (a == "--op") return bench::bench_one_op(argc, argv);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      options.quick = true;
    } else if (a == "--smoke") {
      options.smoke = true;
    } else if (a == "--json" && i + 1 < argc) {
      options.json = argv[++i];
    } else if (a == "--device" && i + 1 < argc) {
      options.device = argv[++i];
    } else if (a == "--compilers" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      for (std::string s; std::getline(ss, s, ',');) {
        if (s != "nvrtc" && s != "llvm") {
          std::fprintf(stderr, "mojo-bench: unknown compiler '%s' (nvrtc, llvm)\n%s\n", s.c_str(), usage);
          return 2;
        }
        options.compilers.insert(s);
      }
    } else if (a == "--only" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      for (std::string s; std::getline(ss, s, ',');) {
        if (!tables.count(s)) {
          std::fprintf(stderr, "mojo-bench: unknown table '%s'\n%s\n", s.c_str(), usage);
          return 2;
        }
        only.insert(s);
      }
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
  if (options.device.empty() && (gpu || options.smoke)) options.device = gpu ? "cuda" : "cpu";
  const bool on_device = !options.device.empty();  // launch and ops run
  mojo::RuntimeOptions ro;
  ro.device = on_device ? options.device : "cpu";
  mojo::Runtime rt(ro);
  const bool cuda = on_device && !rt.device().is_cpu();
  const mojo::Target target = cuda ? rt.device().target() : mojo::Target::parse("sm_90");
  fmt::print("# mojo-bench{}\n\ndevice: {}; compiling for {}; host: {} cores\n", options.smoke ? " --smoke" : "",
             on_device ? fmt::format("{} ({}, {} SMs)", rt.device().name(), rt.device().target().sm_name(),
                                     rt.device().sm_count())
                       : "none (CPU tables only)",
             target.sm_name(), std::thread::hardware_concurrency());
  if (on_device && !cuda && !options.smoke && (wanted("launch") || wanted("ops")))
    fmt::print("\nnote: launch and ops on the CPU device at full shapes (the emulator) take hours; --smoke: tiny shapes\n");

  // Each table on its own: one that fails is reported, and the rest still run.
  auto table = [&](const char* name, auto&& run) {
    if (!wanted(name)) return;
    try {
      run();
    } catch (const std::exception& e) {
      bench::fail(fmt::format("table {}: {}", name, e.what()));
    }
    std::fflush(stdout);
  };
  table("compile", [&] { bench::bench_compile(target, options); });
  table("modes", [&] { bench::bench_compile_modes(target, options); });
  table("cache", [&] { bench::bench_cache(options); });
  table("emulator", [&] { bench::bench_emulator(options); });
  table("host", [&] { bench::bench_host(options); });
  if (on_device) {
    table("launch", [&] {
      bench::bench_warm_start(options);
      bench::bench_host_overhead(rt, options);
    });
    table("ops", [&] { bench::bench_ops(rt, options); });
  } else if (wanted("launch") || wanted("ops")) {
    fmt::print("\nlaunch and ops: no GPU here (--smoke or --device cpu runs them on the CPU device)\n");
  }
  if (bench::failures() > 0) {
    std::fprintf(stderr, "mojo-bench: %d failure(s)\n", bench::failures());
    return 1;
  }
  if (options.smoke) fmt::print("\nsmoke: the tables ran without a failure\n");
  return 0;
} catch (const std::exception& e) {
  std::fflush(stdout);
  std::fprintf(stderr, "mojo-bench: error: %s\n", e.what());
  return 1;
}
