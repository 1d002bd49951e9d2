#include "mojo/perf_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>

#include "mojo/error.hpp"

namespace mojo {
namespace {

constexpr int kWarp = 32;
constexpr int kRegisterUnit = 256;         // registers are allocated per warp in units of 256
constexpr int kSubPartitions = 4;          // the register file's quarters; a warp lives in one
constexpr std::uint64_t kSharedUnit = 128;  // shared memory is allocated per block in units of 128 bytes

std::uint64_t round_up(std::uint64_t x, std::uint64_t unit) { return (x + unit - 1) / unit * unit; }

}  // namespace

SmLimits sm_limits(const Target& target) {
  // The compute capability tables of the CUDA C++ Programming Guide.
  if (target.sm >= 100) return {"B200", 148, 2048, 32, 65536, 228 * 1024, 1024};
  if (target.sm >= 90) return {"H100 SXM", 132, 2048, 32, 65536, 228 * 1024, 1024};
  if (target.sm >= 89) return {"L4", 58, 1536, 24, 65536, 100 * 1024, 1024};
  if (target.sm >= 86) return {"A10", 72, 1536, 16, 65536, 100 * 1024, 1024};
  if (target.sm >= 80) return {"A100", 108, 2048, 32, 65536, 164 * 1024, 1024};
  throw ArchError(fmt::format("no performance model for {}: mojo-jit's kernels need sm_80 or newer",
                              target.sm_name()));
}

unsigned max_shared_per_block(const Target& target) {
  if (target.sm == 80 || target.sm == 87) return 163 * 1024;
  if (target.sm == 90 || target.sm == 100 || target.sm == 103) return 227 * 1024;
  return 99 * 1024;
}

int reference_sm_count(const Target& target) { return target.sm >= 80 ? sm_limits(target).sm_count : 100; }

Roofline roofline(const Target& target) {
  (void)sm_limits(target);  // the same families, the same error for an older target
  if (target.sm >= 100) return {8.0e12, 2250e12, 80e12, "B200 datasheet (HGX, 1000 W)"};
  if (target.sm >= 90)
    return {3.0e12, 800e12, 67e12,
            "H100 SXM measured 2026-11-24 (copy 3014-3019 GB/s, cuBLAS bf16 793-804 TFLOP/s); f32: datasheet"};
  if (target.sm >= 89) return {300e9, 121e12, 30.3e12, "L4 datasheet"};
  if (target.sm >= 86) return {600e9, 125e12, 31.2e12, "A10 datasheet"};
  return {2.039e12, 312e12, 19.5e12, "A100 SXM 80 GB datasheet"};
}

RooflineTime roofline_time(const Roofline& roof, const IdealCost& cost, DType dtype) {
  const double peak = dtype == DType::f16 || dtype == DType::bf16 ? roof.tensor_flops_per_s : roof.fp32_flops_per_s;
  const double memory = cost.bytes / roof.copy_bytes_per_s, compute = cost.flops / peak;
  return {std::max(memory, compute), compute > memory};
}

Occupancy occupancy(const SmLimits& limits, unsigned threads, int registers, std::uint64_t shared_bytes,
                    std::uint64_t blocks, int sm_count) {
  const int warps = int((std::max(threads, 1u) + kWarp - 1) / kWarp);
  // Each limit's blocks per SM, in the order a tie is reported.
  const int by_threads = limits.max_threads / (warps * kWarp);
  const int by_blocks = limits.max_blocks;
  const int registers_per_warp = int(round_up(std::uint64_t(std::max(registers, 1)) * kWarp, kRegisterUnit));
  const int warps_by_registers = limits.registers / kSubPartitions / registers_per_warp * kSubPartitions;
  const int by_registers = warps_by_registers / warps;
  const std::uint64_t shared_per_block = round_up(shared_bytes + limits.reserved_shared_bytes, kSharedUnit);
  const int by_shared = int(std::min<std::uint64_t>(limits.shared_bytes / shared_per_block, 1u << 20));
  Occupancy o;
  o.blocks_per_sm = by_threads;
  o.limited_by = "threads";
  for (auto [n, what] : {std::pair{by_blocks, "blocks"}, {by_registers, "registers"}, {by_shared, "shared memory"}})
    if (n < o.blocks_per_sm) o.blocks_per_sm = n, o.limited_by = what;
  o.warps_fraction = double(o.blocks_per_sm * warps) / double(limits.max_threads / kWarp);
  o.waves = o.blocks_per_sm == 0 ? std::numeric_limits<double>::infinity()
                                 : double(blocks) / (double(o.blocks_per_sm) * double(std::max(sm_count, 1)));
  return o;
}

double wave_fill(std::uint64_t units, std::uint64_t slots) {
  if (units == 0 || slots == 0) return 0;
  const std::uint64_t waves = (units + slots - 1) / slots;
  return double(units) / double(waves * slots);
}

double in_order_balance(const std::vector<double>& work, std::uint64_t slots) {
  if (work.empty() || slots == 0) return 0;
  // When each slot is next free; the grid's first blocks take the slots as they come.
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(slots, work.size()); ++i) free_at.push(0);
  double total = 0, end = 0;
  for (const double w : work) {
    const double start = free_at.top();
    free_at.pop();
    free_at.push(start + w);
    end = std::max(end, start + w);
    total += w;
  }
  return end > 0 ? total / (end * double(slots)) : 0;
}

double snake_balance(const std::vector<double>& work, std::uint64_t blocks) {
  if (work.empty() || blocks == 0) return 0;
  std::vector<double> per_block(std::min<std::uint64_t>(blocks, work.size()), 0.0);
  const std::uint64_t n = per_block.size();
  for (std::uint64_t i = 0; i < work.size(); ++i) {
    const std::uint64_t round = i / n, at = i % n;
    per_block[round % 2 ? n - 1 - at : at] += work[i];
  }
  return in_order_balance(per_block, n);
}

}  // namespace mojo
