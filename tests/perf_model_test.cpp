// The performance model against the CUDA occupancy calculator's rules and the H100 profiles of
// docs/gpu-results/ (threads, 4 register sub-partitions of 256-register units a warp, 128-byte shared
// memory units plus 1 KB a block).
#include <gtest/gtest.h>

#include <cmath>

#include "mojo/error.hpp"
#include "mojo/op.hpp"
#include "mojo/perf_model.hpp"

using namespace mojo;

TEST(PerfModel, TheReferenceDeviceOfEachTarget) {
  EXPECT_EQ(sm_limits(Target::parse("sm_90a")).sm_count, 132);
  EXPECT_EQ(sm_limits(Target::parse("sm_90")).gpu, "H100 SXM");
  EXPECT_EQ(sm_limits(Target::parse("sm_80")).sm_count, 108);
  EXPECT_EQ(sm_limits(Target::parse("sm_86")).max_threads, 1536);
  EXPECT_EQ(sm_limits(Target::parse("sm_100")).gpu, "B200");
  EXPECT_EQ(sm_limits(Target::parse("sm_103")).sm_count, 148) << "a newer target: the nearest older family's";
  EXPECT_EQ(sm_limits(Target::parse("sm_89")).gpu, "L4");
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

// The last wave's fill: how much of the slots the final wave of a grid keeps busy.
TEST(PerfModel, WaveFillIsTheShareOfTheWavesSlotsInUse) {
  EXPECT_DOUBLE_EQ(wave_fill(132, 132), 1.0);
  EXPECT_DOUBLE_EQ(wave_fill(264, 132), 1.0);
  EXPECT_DOUBLE_EQ(wave_fill(133, 132), 133.0 / 264);  // one tile past a wave: a second wave nearly empty
  EXPECT_DOUBLE_EQ(wave_fill(128, 132), 128.0 / 132);
  EXPECT_DOUBLE_EQ(wave_fill(24, 132), 24.0 / 132);  // the 128 x 256 tiles of the M = 128 qkv linear
  EXPECT_DOUBLE_EQ(wave_fill(192, 396), 192.0 / 396);  // the M = 128 linear's 64 x 64 blocks, 3 an SM
  EXPECT_DOUBLE_EQ(wave_fill(0, 132), 0.0);
  EXPECT_DOUBLE_EQ(wave_fill(5, 0), 0.0);
}

// Unequal blocks, each taken by the first slot to free: in launch order, a long block last leaves the other
// slots idle while it runs; first, the short ones fill in around it. Equal blocks: the waves' fill.
TEST(PerfModel, InOrderBalanceHandsBlocksToTheFirstFreeSlot) {
  EXPECT_DOUBLE_EQ(in_order_balance({1, 1, 1, 1, 4}, 2), 8.0 / (6 * 2));
  EXPECT_DOUBLE_EQ(in_order_balance({4, 1, 1, 1, 1}, 2), 1.0);
  EXPECT_DOUBLE_EQ(in_order_balance(std::vector<double>(133, 2.0), 132), wave_fill(133, 132));
  EXPECT_DOUBLE_EQ(in_order_balance({3}, 4), 0.25) << "one block on four slots";
  EXPECT_DOUBLE_EQ(in_order_balance({}, 4), 0.0);
  EXPECT_DOUBLE_EQ(in_order_balance({1, 2}, 0), 0.0);
}

// The roofline: the H100 figures this project measured (copy 3.0 TB/s, cuBLAS bf16 800 TFLOP/s), the bytes at
// copy speed or the FLOPs at the peak of the dtype's unit, whichever is longer.
TEST(PerfModel, RooflineTimeIsTheLongerOfBytesAndFlops) {
  const Roofline h100 = roofline(Target::parse("sm_90a"));
  EXPECT_DOUBLE_EQ(h100.copy_bytes_per_s, 3.0e12);
  EXPECT_DOUBLE_EQ(h100.tensor_flops_per_s, 800e12);
  const IdealCost gemm{3 * 4096.0 * 4096 * 2, 2 * 4096.0 * 4096 * 4096, 0};
  const RooflineTime bf16 = roofline_time(h100, gemm, DType::bf16);
  EXPECT_TRUE(bf16.compute_bound);
  EXPECT_NEAR(bf16.seconds * 1e6, 171.8, 0.1);
  EXPECT_NEAR(roofline_time(h100, gemm, DType::f32).seconds * 1e3, 2.051, 0.001) << "f32 on the CUDA cores (67 TFLOP/s)";
  const RooflineTime copy = roofline_time(h100, IdealCost{64e6, 0, 0}, DType::bf16);
  EXPECT_FALSE(copy.compute_bound);
  EXPECT_NEAR(copy.seconds * 1e6, 21.33, 0.01);
  EXPECT_DOUBLE_EQ(roofline(Target::parse("sm_80")).copy_bytes_per_s, 2.039e12);
  EXPECT_THROW(roofline(Target::parse("sm_75")), ArchError);
}

namespace {
IdealCost ideal_of(const char* op_name, DType dtype, const char* shapes, ScalarList scalars = {}) {
  const OpDef& op = find_op(op_name);
  std::vector<Tensor> tensors;
  for (const TensorSpec& s : op.specs_from_shapes(dtype, parse_shapes(op, std::string_view(shapes))))
    tensors.push_back({s, 0});
  return op.ideal_cost(tensors, scalars);
}
}  // namespace

// Each op's ideal bytes and FLOPs from its shapes: every tensor once, except what is gathered or scattered,
// and the products' and attention's FLOPs.
TEST(PerfModel, IdealCostOfEachKindOfOp) {
  const double mb = 4096.0 * 4096 * 2;  // a bf16 4096 x 4096 matrix
  IdealCost c = ideal_of("rms_norm", DType::bf16, "x=4096x4096");
  EXPECT_DOUBLE_EQ(c.bytes, 2 * mb + 4096 * 2) << "x read, out written, the weight";
  EXPECT_EQ(c.flops, 0);

  c = ideal_of("embedding", DType::bf16, "ids=4096 weight=151936x4096");
  EXPECT_DOUBLE_EQ(c.bytes, mb + 4096 * 8 + mb) << "the out rows, the ids, and only the weight rows the ids reach";

  c = ideal_of("linear", DType::bf16, "x=128x4096 weight=6144x4096");
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 128 * 6144 * 4096);
  EXPECT_DOUBLE_EQ(c.weight_bytes, 6144.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(c.bytes, (128.0 * 4096 + 6144.0 * 4096 + 128.0 * 6144) * 2);

  c = ideal_of("gemm", DType::bf16, "a=4096x4096 b=4096x4096");
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 4096 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(c.bytes, 3 * mb) << "beta 0: c only written";
  EXPECT_DOUBLE_EQ(ideal_of("gemm", DType::bf16, "a=4096x4096 b=4096x4096", {{"beta", 1.0}}).bytes, 4 * mb);

  // Causal GQA 32/8, D 128, 4096 tokens: 4096 * 4097 / 2 pairs a head, K and V read once.
  c = ideal_of("sdpa", DType::bf16, "q=4096x32x128 k=4096x8x128");
  EXPECT_DOUBLE_EQ(c.flops, 4.0 * (4096.0 * 4097 / 2) * 32 * 128);
  EXPECT_DOUBLE_EQ(c.weight_bytes, 2 * 4096.0 * 8 * 128 * 2);
  EXPECT_DOUBLE_EQ(ideal_of("sdpa", DType::bf16, "q=4096x32x128 k=4096x8x128", {{"causal", 0.0}}).flops,
                   4.0 * 4096 * 4096 * 32 * 128);

  // Decode over the whole block table: 32 sequences of 512 blocks of 16 keys, of a larger cache.
  c = ideal_of("paged_decode_gqa", DType::bf16, "q=32x32x128 k_cache=32768x16x8x128 block_tables=32x512");
  EXPECT_DOUBLE_EQ(c.weight_bytes, 2 * 32.0 * 512 * 16 * 8 * 128 * 2);
  EXPECT_DOUBLE_EQ(c.flops, 4.0 * 32 * 512 * 16 * 32 * 128);

  c = ideal_of("linear_cross_entropy_backward", DType::bf16, "hidden=256x512 weight=3000x512");
  EXPECT_DOUBLE_EQ(c.flops, 6.0 * 256 * 3000 * 512) << "the logits again, then both gradients";
}
