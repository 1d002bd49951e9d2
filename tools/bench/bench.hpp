// Shared pieces of mojo-bench: clocks, scratch directories, medians, timing
// one op on random inputs (op_timing.cpp), and one declaration per table
// (each table lives in its own file).
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mojo/check.hpp"
#include "mojo/mojo.hpp"

namespace bench {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// CPU time (user + system) in a getrusage record.
inline double rusage_ms(const rusage& u) {
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}
// CPU time of this process (all threads) and of the children it waited for.
inline double cpu_ms() {
  rusage self{}, children{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &children);
  return rusage_ms(self) + rusage_ms(children);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Rooflines of an H100 SXM: device-to-device copy (read + write), and dense
// products on tensor cores (f16/bf16: what cuBLAS reaches on random bf16
// 4096^3, 757-804 TFLOP/s measured 2026-11-24/25) or on CUDA cores (f32).
constexpr double kNominalCopyGBs = 3000;
constexpr double kNominalTensorTflops = 800;
constexpr double kNominalTf32Tflops = 400;
constexpr double kNominalF32Tflops = 67;

// An empty scratch directory under /tmp, unique to this process.
std::filesystem::path fresh_dir(const char* tag);

struct Options {
  bool quick = false;
  // Tiny shapes and one or two repetitions: every table and every op's bench
  // end to end, on the CPU device where there is no GPU (CI). Any failure
  // makes mojo-bench exit 1.
  bool smoke = false;
  std::string device;          // where launch and ops run: "cuda", "cuda:N", "cpu", "cpu:sm_90a"
  std::filesystem::path self;  // this executable
  std::filesystem::path json;  // --json FILE: the op table as JSON, for tools/bench/torch_compare.py
  std::set<std::string> compilers;  // --compilers nvrtc,llvm: the compile tables' compilers (empty: all built)
};

// A check inside a table that failed without an exception (a child process,
// a count that disagrees): printed to stderr; mojo-bench then exits 1.
void fail(const std::string& what);
int failures();  // so far

// Buffers, streams and events live on the device current on this thread
// (mojo/device.hpp): every table makes its Runtime's device current before it
// allocates, whatever a table before it left current.
inline const mojo::Device& use_device(mojo::Runtime& rt) {
  const mojo::Device& d = rt.device();
  d.make_current();
  return d;
}

// ---- one op on random inputs (op_timing.cpp) --------------------------------

struct OpCase {
  std::string op;
  std::string shapes;  // the command line's form: "x=32x4096 weight=6144x4096" (mojo::parse_shapes)
  mojo::DType dtype = mojo::DType::bf16;
  std::vector<std::pair<std::string, double>> params;  // scalar arguments by name
  // Inputs filled with one value instead of random data, by tensor name (worst-case data: all-equal logits).
  std::vector<std::pair<std::string, double>> fills;

  std::vector<mojo::ScalarArg> scalar_args() const;  // views into `params`
  std::string params_text() const;                   // "activation=3 trans_b=1"
  std::string label() const;                          // shapes, then params
};

// What one launch must move and compute at least.
struct Traffic {
  double bytes = 0;         // each tensor read once and written once; a gathered tensor only its rows touched
  double flops = 0;         // products and attention; 0 for memory-bound ops
  double weight_bytes = 0;  // the weights (products) or K/V (attention) among `bytes`
  std::string note;         // how a data-dependent count was made
};

struct Repetitions {
  int batches = 10;          // timed batches (the median is reported)
  int min_launches = 20;     // launches per batch, at least
  double stream_bytes = 0;   // buffer sets cycled so that a batch streams this much (defeats the L2)
  double budget_s = 10;      // fewer launches when the op is slow: about this much GPU time per case
};
// The repetitions of the tables: full, --quick, --smoke, or on the CPU device.
Repetitions repetitions(const Options& options, bool cpu_device);

struct OpTiming {
  double us = 0;                 // median µs per launch over the batches
  std::vector<double> batch_us;  // each batch's µs per launch
  int launches_per_batch = 0, copies = 0;
  bool graph = false;            // the batch was one CUDA graph (else launches one by one)
  Traffic traffic;
  mojo::Params params;           // the specialization timed
  std::string kernel;            // its first kernel's name
  std::size_t plan_kernels = 1;
  std::size_t workspace = 0;     // bytes
  std::int64_t repeats = 1;      // runs of the plan per launch (OpDef::repeats)
};

// Times `c` on `rt`'s device: every tensor the op reads holds the op's own
// random_data (seeded; full-length sequences for attention), outputs start
// zeroed; the median µs per launch over batches of launches between events (a
// CUDA graph per batch where capture works; on the CPU device, wall time).
OpTiming time_op(mojo::Runtime& rt, const OpCase& c, const Repetitions& reps);

// Roofline of a timing: the time the copy bandwidth and the product peak allow, over the time taken.
struct Roofline {
  double gbs = 0, tflops = 0;  // achieved
  double copy_gbs = kNominalCopyGBs, peak_tflops = 0;
  double fraction = 0;         // roofline time / measured time
  const char* bound = "memory";
};
Roofline roofline(const OpCase& c, const OpTiming& t, double copy_gbs = kNominalCopyGBs);

// "NAME=VALUE" (a number) as a scalar argument; InvalidArgumentError otherwise.

// ---- the tables ----------------------------------------------------------------

// No GPU needed.
void bench_compile(const mojo::Target& target, const Options& options);
void bench_compile_modes(const mojo::Target& target, const Options& options);
void bench_cache(const Options& options);
void bench_emulator(const Options& options);  // the CPU device
void bench_host(const Options& options);      // a launch's host cost, launches taken by a sink
// On options.device (a GPU; the CPU device with --smoke or --device cpu).
void bench_warm_start(const Options& options);
void bench_host_overhead(mojo::Runtime& rt, const Options& options);
void bench_ops(mojo::Runtime& rt, const Options& options);

// `mojo-bench --op ...`: one op at the user's shapes; returns the exit status.
int bench_one_op(int argc, char** argv);

// Child-process entry points (a fresh process is the thing measured).
int warm_start_child(const std::string& cache_dir, const std::string& device);
int first_compile_child(const std::string& compiler, const std::string& arch);

}  // namespace bench
