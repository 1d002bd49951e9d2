// The performance model that needs no GPU: how many blocks of a kernel fit on
// one SM of a target's reference GPU (from its threads, registers and shared
// memory, as the CUDA occupancy calculator counts them), how many waves a
// grid then takes, and the least time an op's bytes and FLOPs can take there
// (the roofline). `mojo-jit describe` prints it for every kernel of a plan,
// with the registers and stack read from the compiled cubin.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "mojo/target.hpp"
#include "mojo/tensor.hpp"

namespace mojo {

// What one SM of a target's reference GPU holds at once.
struct SmLimits {
  std::string_view gpu;              // the reference GPU, e.g. "H100 SXM"
  int sm_count;                      // SMs on that GPU
  int max_threads, max_blocks;       // resident threads and blocks per SM
  int registers;                     // 32-bit registers per SM, in 4 sub-partitions
  unsigned shared_bytes;             // shared memory per SM (the largest carveout)
  unsigned reserved_shared_bytes;    // per block, kept by the system
};
// The limits of a target's family: sm_80 (A100), sm_86 (A10), sm_89 (L4), sm_90 and sm_90a (H100 SXM),
// sm_100 (B200); a newer target takes the nearest older family's. ArchError for one older than sm_80.
SmLimits sm_limits(const Target& target);
// The dynamic shared memory one block may opt into on `target` (the CUDA C++ Programming Guide's table): what a
// kernel's ring or row cache may take at most, less its static shared memory.
unsigned max_shared_per_block(const Target& target);
// The SMs a kernel's grid is sized for on `target`: its reference GPU's (100 for a target older than
// sm_80, which has none). Params come from the target alone (they are part of the cache key), so a
// choice made on this count is the same on every machine: not a device query.
int reference_sm_count(const Target& target);

// What the reference GPU of a target's family moves and computes a second at best.
struct Roofline {
  double copy_bytes_per_s;    // DRAM, as a copy kernel reaches it
  double tensor_flops_per_s;  // dense f16/bf16 MMA with f32 accumulation
  double fp32_flops_per_s;    // FMA on the CUDA cores (the exact f32 paths)
  std::string_view source;    // where the figures come from
};
Roofline roofline(const Target& target);

// What an op's shapes need at the least: the bytes it must move and the FLOPs it must compute.
struct IdealCost {
  double bytes = 0;         // each tensor read once and written once (an in-out one both); a gathered or
                            // scattered one only the rows its indices can reach
  double flops = 0;         // of the products and attention (a multiply-add is 2); 0 for memory-bound ops
  double weight_bytes = 0;  // of `bytes`: the weights (products) or K/V (attention)
};
// The least time `cost` takes on `roof`: its bytes at copy speed or its FLOPs at the peak of `dtype`'s unit
// (tensor cores for f16/bf16, the CUDA cores for f32), whichever is longer.
struct RooflineTime {
  double seconds = 0;
  bool compute_bound = false;
};
RooflineTime roofline_time(const Roofline& roof, const IdealCost& cost, DType dtype);

struct Occupancy {
  int blocks_per_sm = 0;          // 0: one block does not fit an SM
  std::string_view limited_by;    // "threads", "blocks", "registers" or "shared memory"
  double warps_fraction = 0;      // resident warps / the SM's most
  double waves = 0;               // blocks / (blocks_per_sm * SMs); infinite when nothing fits
};
// `blocks` blocks of `threads` threads, each using `registers` registers (as ptxas allocated them) and
// `shared_bytes` of shared memory (static and dynamic), on `sm_count` SMs of `limits`.
Occupancy occupancy(const SmLimits& limits, unsigned threads, int registers, std::uint64_t shared_bytes,
                    std::uint64_t blocks, int sm_count);

// The share of its waves' slots a grid of `units` keeps busy, when `slots` of them run at once and each takes
// as long: units / (ceil(units / slots) * slots). 1 when the last wave is as full as the others; 0.5 for one
// unit past a wave. For a persistent kernel, the units are its tiles and the slots its SMs.
double wave_fill(std::uint64_t units, std::uint64_t slots);

// wave_fill for blocks that differ: `work` gives each block's cost in launch order, and each slot, as it
// frees, takes the next block (as the GPU hands them out). The ideal time (all the work spread evenly over
// the slots) over the time the last slot ends: 1 when they all end together.
double in_order_balance(const std::vector<double>& work, std::uint64_t slots);

// The same for a persistent grid of `blocks` that take the units of `work` round by round, one each a round, in
// snake order: block b takes unit b of even rounds and unit blocks - 1 - b of odd ones (as the sm_90a prefill's
// persistent grid does). Units sorted longest first then even out: the block with a round's longest takes the
// next round's shortest.
double snake_balance(const std::vector<double>& work, std::uint64_t blocks);

}  // namespace mojo
