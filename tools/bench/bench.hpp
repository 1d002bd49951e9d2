// Shared pieces of mojo-bench: clocks, scratch directories, medians, and one
// declaration per table (each table lives in its own file).
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

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

constexpr double kNominalCopyGBs = 3000;  // H100 SXM device-to-device copy, read + write

// An empty scratch directory under /tmp, unique to this process.
std::filesystem::path fresh_dir(const char* tag);

struct Options {
  bool quick = false;
  std::filesystem::path self;  // this executable
  std::filesystem::path json;  // --json FILE: the op table as JSON, for tools/bench/torch_compare.py
};

// No GPU needed.
void bench_compile(const mojo::Target& target);
void bench_compile_modes(const mojo::Target& target, const Options& options);
void bench_cache(const Options& options);
void bench_emulator(const Options& options);  // the CPU device
void bench_host(const Options& options);      // a launch's host cost, launches taken by a sink
// With a GPU.
void bench_warm_start(const Options& options);
void bench_host_overhead(mojo::Runtime& rt, const Options& options);
void bench_ops(mojo::Runtime& rt, const Options& options);

// Child-process entry points (a fresh process is the thing measured).
int warm_start_child(const std::string& cache_dir);
int first_compile_child(const std::string& compiler, const std::string& arch);

}  // namespace bench
