// The performance model against the CUDA occupancy calculator's rules and the H100 profiles of
// docs/gpu-results/ (threads, 4 register sub-partitions of 256-register units a warp, 128-byte shared
// memory units plus 1 KB a block).
#include <gtest/gtest.h>

#include <cmath>

#include "mojo/error.hpp"
#include "mojo/perf_model.hpp"

using namespace mojo;

TEST(PerfModel, TheReferenceDeviceOfEachTarget) {
  EXPECT_EQ(sm_limits(Target::parse("sm_90a")).sm_count, 132);
  EXPECT_EQ(sm_limits(Target::parse("sm_90")).gpu, "H100 SXM");
  EXPECT_EQ(sm_limits(Target::parse("sm_80")).sm_count, 108);
  EXPECT_EQ(sm_limits(Target::parse("sm_86")).max_threads, 1536);
  EXPECT_EQ(sm_limits(Target::parse("sm_100")).sm_count, 132) << "a newer target: the nearest older family's";
  EXPECT_THROW(sm_limits(Target::parse("sm_75")), ArchError);
}

TEST(PerfModel, ThreadsLimitSmallBlocks) {
  // 128 threads, 32 registers, no shared memory: 2048 / 128 = 16 blocks, every warp slot used.
  const Occupancy o = occupancy(sm_limits(Target::parse("sm_90a")), 128, 32, 0, 4096, 132);
  EXPECT_EQ(o.blocks_per_sm, 16);
  EXPECT_EQ(o.limited_by, "threads");
  EXPECT_DOUBLE_EQ(o.warps_fraction, 1.0);
  EXPECT_NEAR(o.waves, 4096.0 / (16 * 132), 1e-12);
  // 32-thread blocks: the 32 blocks an SM bind first.
  EXPECT_EQ(occupancy(sm_limits(Target::parse("sm_90a")), 32, 32, 0, 1, 132).limited_by, "blocks");
}

TEST(PerfModel, RegistersCountInQuartersOfTheFile) {
  // 36 registers round to 1280 a warp: 12 warps in each 16,384-register quarter (not 51 / 4 = 12.75), 48 warps.
  const Occupancy o = occupancy(sm_limits(Target::parse("sm_90a")), 128, 36, 0, 4096, 132);
  EXPECT_EQ(o.blocks_per_sm, 12);
  EXPECT_EQ(o.limited_by, "registers");
  EXPECT_DOUBLE_EQ(o.warps_fraction, 0.75);
}

TEST(PerfModel, TheH100Profiles) {
  const SmLimits h100 = sm_limits(Target::parse("sm_90a"));
  // The sm_90a causal prefill: 384 threads, 168 registers, 197,664 + 1,024 bytes of shared memory, 1024 blocks:
  // one block an SM, 7.76 waves (ncu: 1 block, 18.75% theoretical occupancy).
  Occupancy o = occupancy(h100, 384, 168, 197664 + 1024, 1024, 132);
  EXPECT_EQ(o.blocks_per_sm, 1);
  EXPECT_NEAR(o.waves, 7.76, 0.005);
  EXPECT_DOUBLE_EQ(o.warps_fraction, 12.0 / 64);
  // The M = 128 linear on the sm_80 path: 128 threads at 161 registers (5376 a warp: 3 warps a quarter), 192
  // blocks: three blocks an SM, 0.48 of a wave.
  o = occupancy(h100, 128, 161, 0, 192, 132);
  EXPECT_EQ(o.blocks_per_sm, 3);
  EXPECT_NEAR(o.waves, 0.48, 0.005);
}

TEST(PerfModel, SharedMemoryAndWhatDoesNotFit) {
  const SmLimits a100 = sm_limits(Target::parse("sm_80"));
  // 80 KB a block plus the reserved 1 KB: two fit in 164 KB.
  Occupancy o = occupancy(a100, 256, 64, 80 * 1024, 216, 108);
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_EQ(o.limited_by, "shared memory");
  EXPECT_DOUBLE_EQ(o.waves, 1.0);
  // More than an SM holds: nothing fits, and the waves say so.
  o = occupancy(a100, 256, 64, 200 * 1024, 1, 108);
  EXPECT_EQ(o.blocks_per_sm, 0);
  EXPECT_TRUE(std::isinf(o.waves));
}
