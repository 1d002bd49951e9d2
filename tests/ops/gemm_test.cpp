// gemm, gemm_batched and linear without a GPU: the tile each shape gets,
// validation messages, the CPU reference itself, and every layout compiling
// to PTX that ptxas takes with no local-memory spills.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "gemm_args.h"
#include "mojo/error.hpp"
#include "mojo/perf_model.hpp"
#include "mojo/runtime.hpp"
#include "ops/gemm_tile.hpp"
#include "op_test_util.hpp"
#include "reference/reference.hpp"
#include "test_util.hpp"

using namespace mojo;
using test::error_of;

namespace {

const Target kSm90 = Target::parse("sm_90");

std::vector<Tensor> specs(std::initializer_list<TensorSpec> list) {
  std::vector<Tensor> out;
  for (const TensorSpec& s : list) out.push_back({s, 0});
  return out;
}

Params gemm_params(std::int64_t m, std::int64_t n, std::int64_t k, ScalarList scalars = {}, DType dtype = DType::bf16) {
  return find_op("gemm").specialize(
      specs({TensorSpec(dtype, {m, n}), TensorSpec(dtype, {m, k}), TensorSpec(dtype, {k, n})}), scalars, kSm90);
}

}  // namespace

TEST(Gemm, TileFollowsTheMBucket) {
  const OpDef& op = find_op("gemm");
  Params decode = gemm_params(1, 4096, 4096), mid = gemm_params(48, 4096, 4096), big = gemm_params(4096, 4096, 4096);
  EXPECT_EQ(decode.get("bm"), 16);
  EXPECT_EQ(mid.get("bm"), 64);
  EXPECT_EQ(big.get("bm"), 128);
  EXPECT_EQ(big.get("vec"), 8);
  EXPECT_EQ(big.get("beta"), 0);
  // 4 stages of (128 + 128) x 32 bf16 = 64 KB: above the 48 KB default, so the Runtime opts in at load.
  EXPECT_EQ(op.max_dynamic_smem(big), 64u * 1024);
  auto tensors = specs({TensorSpec(DType::bf16, {4096, 4096}), TensorSpec(DType::bf16, {4096, 4096}),
                        TensorSpec(DType::bf16, {4096, 4096})});
  LaunchGeometry g = op.geometry(big, tensors);
  EXPECT_EQ(g.grid.x, 32u * 32u);
  EXPECT_EQ(g.block.x, 256u);
  EXPECT_EQ(g.dynamic_smem, 64u * 1024);
  // Every shape of one bucket shares the kernel: M, N, K are arguments.
  EXPECT_EQ(op.kernel_name(gemm_params(4095, 8192, 104)), op.kernel_name(gemm_params(8192, 8192, 8192)));
}

TEST(Gemm, NarrowerTilesWhenTheGridWouldLeaveSmsIdle) {
  // 128 x 4096 in 128 x 128 tiles is 32 blocks for 132 SMs: 64 x 64 tiles give 128.
  EXPECT_EQ(gemm_params(128, 4096, 4096).get("bm"), 64);
  EXPECT_EQ(gemm_params(128, 24576, 4096).get("bm"), 128) << "192 blocks of 128 x 128 already";
  // Decode: N = 4096 in 64-wide tiles is 64 blocks; 32-wide tiles give 128.
  EXPECT_EQ(gemm_params(1, 4096, 4096).get("bn"), 32);
  EXPECT_EQ(gemm_params(1, 24576, 4096).get("bn"), 64);
}

TEST(Gemm, UnalignedRowsTakeTheElementPath) {
  EXPECT_EQ(gemm_params(5, 9, 17).get("vec"), 1) << "lda = 17 elements: rows are not 16-byte aligned";
  const TensorSpec c(DType::f16, {8, 8}), a(DType::f16, {8, 64}), b(DType::f16, {64, 8});
  Params p = find_op("gemm").specialize({{c, 0}, {a, 0x1002}, {b, 0}}, {}, kSm90);
  EXPECT_EQ(p.get("vec"), 1) << "a 2-byte aligned pointer";
}

TEST(Gemm, F32IsExactOnCudaCoresOnAnyArch) {
  const OpDef& op = find_op("gemm");
  const TensorSpec f(DType::f32, {100, 100});
  Params p = op.specialize(specs({f, f, f}), {}, Target::parse("sm_75"));
  EXPECT_EQ(p.get("bm"), 64);
  EXPECT_EQ(p.get("stages"), 1);
  EXPECT_EQ(op.max_dynamic_smem(p), 0u) << "static shared memory only";
  EXPECT_EQ(op.geometry(p, specs({f, f, f})).block.x, 256u);
  // Tensor-core dtypes still need sm_80.
  const TensorSpec h(DType::f16, {100, 100});
  EXPECT_NE(error_of<ArchError>([&] {
              op.specialize(specs({h, h, h}), {}, Target::parse("sm_75"));
            }).find("(exact f32 runs anywhere)"),
            std::string::npos);
}

TEST(Gemm, Tf32IsAnOptInForF32) {
  const OpDef& op = find_op("gemm");
  const TensorSpec f(DType::f32, {4096, 4096}), h(DType::bf16, {64, 64});
  Params p = op.specialize(specs({f, f, f}), {{"tf32", 1}}, kSm90);
  EXPECT_EQ(p.get("tf32"), 1);
  EXPECT_EQ(p.get("bm"), 128) << "the tensor-core tiles";
  EXPECT_EQ(p.get("vec"), 8);
  EXPECT_EQ(op.max_dynamic_smem(p), 4u * (128 + 128) * 16 * 4) << "4 stages of 4-byte elements, BK 16";
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              op.specialize(specs({h, h, h}), {{"tf32", 1}}, kSm90);
            }),
            "gemm: tf32 = 1 applies to f32 inputs; these are bf16");
  EXPECT_NE(error_of<ArchError>([&] {
              op.specialize(specs({f, f, f}), {{"tf32", 1}}, Target::parse("sm_75"));
            }).find("sm_80 or later"),
            std::string::npos);
}

TEST(Gemm, TransposesAndBetaAreParams) {
  const OpDef& op = find_op("gemm");
  // a stored [K, M] = [64, 32], b stored [N, K] = [16, 64]: c is [32, 16].
  auto t =
      specs({TensorSpec(DType::bf16, {32, 16}), TensorSpec(DType::bf16, {64, 32}), TensorSpec(DType::bf16, {16, 64})});
  Params p = op.specialize(t, {{"trans_a", 1}, {"trans_b", 1}, {"beta", 0.5}}, kSm90);
  EXPECT_EQ(p.get("ta"), 1);
  EXPECT_EQ(p.get("tb"), 1);
  EXPECT_EQ(p.get("beta"), 1);
  EXPECT_EQ(op.geometry(p, t).grid.x, 1u) << "one 64x64 tile covers 32x16";
  EXPECT_EQ(gemm_params(32, 16, 64, {}, DType::f16).dtype("out"), DType::f16);
}

TEST(Gemm, BadInputIsAClearError) {
  const OpDef& op = find_op("gemm");
  auto bf = [](std::initializer_list<std::int64_t> s) { return TensorSpec(DType::bf16, s); };
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({bf({4, 8}), bf({4, 16}), bf({15, 8})}), {}, kSm90);
            }),
            "gemm: a is bf16[4, 16] and b is bf16[15, 8]: their K (16 and 15) differ");
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({bf({4, 9}), bf({4, 16}), bf({16, 8})}), {}, kSm90);
            }),
            "gemm: c is bf16[4, 9]; expected [4, 8]");
  EXPECT_NE(error_of<ArchError>([&] {
              op.specialize(specs({bf({4, 8}), bf({4, 16}), bf({16, 8})}), {}, Target::parse("sm_75"));
            }).find("sm_80 or later; the target is sm_75"),
            std::string::npos);
  const TensorSpec i(DType::i32, {4, 4});
  EXPECT_EQ(error_of<DTypeError>([&] {
              op.specialize(specs({i, i, i}), {}, kSm90);
            }),
            "gemm: a has dtype i32; supported: f32, f16, bf16");
  EXPECT_EQ(error_of<DTypeError>([&] {
              op.specialize(specs({TensorSpec(DType::f16, {4, 8}), bf({4, 16}), bf({16, 8})}), {}, kSm90);
            }),
            "gemm: c has dtype f16; expected bf16 (as a) or f32");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              op.specialize(specs({bf({4, 8}), bf({4, 16}), bf({16, 8})}), {{"trans_a", 2}}, kSm90);
            }),
            "gemm: trans_a is 2; expected 0 or 1");
  EXPECT_NE(error_of<ShapeError>([&] {
              find_op("gemm_batched").specialize(specs({bf({2, 4, 8}), bf({3, 4, 16}), bf({2, 16, 8})}), {}, kSm90);
            }).find("batch sizes differ"),
            std::string::npos);
}

TEST(Linear, EpilogueFlagsComeFromTheTensorsGiven) {
  const OpDef& op = find_op("linear");
  const TensorSpec x(DType::bf16, {3, 5, 64}), w(DType::bf16, {96, 64}), out(DType::bf16, {3, 5, 96}),
      bias(DType::bf16, {96});
  Params plain = op.specialize(specs({out, x, w, TensorSpec(), TensorSpec()}), {}, kSm90);
  EXPECT_EQ(plain.get("bias"), 0);
  EXPECT_EQ(plain.get("residual"), 0);
  EXPECT_EQ(plain.get("bm"), 16) << "M = 15 rows of x";
  Params fused = op.specialize(specs({out, x, w, bias, out}), {{"activation", 3}}, kSm90);
  EXPECT_EQ(fused.get("bias"), 1);
  EXPECT_EQ(fused.get("act"), 3);
  EXPECT_EQ(fused.get("residual"), 1);
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              op.specialize(specs({out, x, w, bias, out}), {{"activation", 4}}, kSm90);
            }),
            "linear: activation is 4; expected 0 (none), 1 (gelu), 2 (gelu tanh) or 3 (silu)");
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({out, x, TensorSpec(DType::bf16, {96, 65}), bias, TensorSpec()}), {}, kSm90);
            }),
            "linear: weight is bf16[96, 65]; expected [N, 64] (one row per output feature)");
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({out, x, w, TensorSpec(DType::bf16, {95}), TensorSpec()}), {}, kSm90);
            }),
            "linear: bias is bf16[95]; expected [96] contiguous, or absent");
}

// linear at M <= 4 takes the decode form (gemv.cuh) where W's rows are whole 16-byte chunks and nothing pins
// a path: a warp a column, KS warps splitting K while the grid's warps fill less than half of the SMs'
// warp slots and each lane keeps at least two chunks.
TEST(Linear, DecodeRowsTakeTheGemvForm) {
  const OpDef& op = find_op("linear");
  const Target sm90a = Target::parse("sm_90a");
  auto params = [&](std::int64_t m, std::int64_t n, std::int64_t k, DType d = DType::bf16, ScalarList s = {}) {
    const auto t = specs({TensorSpec(d, {m, n}), TensorSpec(d, {m, k}), TensorSpec(d, {n, k}), TensorSpec(),
                          TensorSpec()});
    return op.specialize(t, s, sm90a);
  };
  for (auto [m, rows] : {std::pair{1, 1}, {2, 2}, {3, 4}, {4, 4}}) EXPECT_EQ(params(m, 4096, 4096).get("gemv"), rows);
  EXPECT_EQ(params(5, 4096, 4096).get_or("gemv", 0), 0) << "five rows: the tiles";
  EXPECT_EQ(params(1, 4096, 4100).get_or("gemv", 0), 0) << "rows of 4100 bf16 are not whole 16-byte chunks";
  EXPECT_EQ(params(1, 4096, 4100, DType::f32).get("gemv"), 1) << "but 4100 f32 are";
  EXPECT_EQ(params(1, 4096, 4096, DType::bf16, {{"path", 80}}).get("bm"), 16) << "path 80 pins the tile";
  EXPECT_EQ(params(1, 4096, 4096, DType::f32, {{"tf32", 1}}).get_or("gemv", 0), 0) << "tf32 asks for tensor cores";
  // The split: 132 SMs, 64 warps each.
  const Params o_proj = params(1, 4096, 4096);
  EXPECT_EQ(o_proj.get("ks"), 2) << "4096 warps are less than half of 132 x 64";
  EXPECT_EQ(o_proj.get("cols"), 4);
  EXPECT_EQ(params(1, 6144, 4096).get("ks"), 1);
  EXPECT_EQ(params(1, 300, 12288).get("ks"), 8);
  EXPECT_EQ(params(1, 300, 1024).get("ks"), 2) << "1024 bf16: four chunks a lane, two after one split";
  const auto t = specs({TensorSpec(DType::bf16, {1, 4096}), TensorSpec(DType::bf16, {1, 4096}),
                        TensorSpec(DType::bf16, {4096, 4096}), TensorSpec(), TensorSpec()});
  const LaunchGeometry g = op.geometry(o_proj, t);
  EXPECT_EQ(g.grid.x, 1024u);
  EXPECT_EQ(g.block.x, 256u);
  EXPECT_EQ(g.dynamic_smem, 0u);
  EXPECT_FALSE(g.persistent);
  // Autotuning times the other splits and depths of the same form, then the tile each path takes with `path`
  // pinned, so that it finds the tile where the decode form is the slower.
  const auto candidates = op.tuning()->candidates(o_proj, t, {}, sm90a);
  EXPECT_EQ(candidates.front(), o_proj);
  ASSERT_EQ(candidates.size(), 10u) << "ks 1, 2, 4, 8 x chunks 8, 4, then the sm_80 and sm_90a tiles";
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(candidates[i].get("cols") * candidates[i].get("ks"), 8);
  EXPECT_EQ(candidates[8], op.specialize(t, {{"path", 80}}, sm90a));
  EXPECT_EQ(candidates[8].get("wgmma"), 0);
  EXPECT_EQ(candidates[9], op.specialize(t, {{"path", 90}}, sm90a));
  EXPECT_EQ(candidates[9].get("wgmma"), 1);
  EXPECT_EQ(op.tuning()->candidates(o_proj, t, {{"path", 90}}, sm90a).size(), 10u) << "path given or not";
  const Target sm80 = Target::parse("sm_80");
  const Params on_ampere = op.specialize(t, {}, sm80);
  EXPECT_EQ(op.tuning()->candidates(on_ampere, t, {}, sm80).back(), op.specialize(t, {{"path", 80}}, sm80))
      << "no sm_90a path on an A100: the sm_80 tile alone";
}

TEST(GroupGemm, ParamsAndErrors) {
  const OpDef& op = find_op("group_gemm");
  const TensorSpec x(DType::bf16, {4096, 4096}), w(DType::bf16, {64, 1536, 4096}), out(DType::bf16, {4096, 1536}),
      off64(DType::i64, {65}), off32(DType::i32, {65});
  Params p = op.specialize(specs({out, x, w, off64}), {}, kSm90);
  EXPECT_EQ(p.get("bm"), 64) << "64 rows per group on average";
  EXPECT_EQ(p.get("offsets"), 8);
  EXPECT_EQ(op.specialize(specs({out, x, w, off32}), {}, kSm90).get("offsets"), 4);
  LaunchGeometry g = op.geometry(p, specs({out, x, w, off64}));
  // One block a tile of the groups' rows, whatever their split: 4096 / 64 tiles, and 63 more where every group
  // ends in a partial tile; by N / 64 columns. (Before, each group had a grid for all rows: 64 x 64 x 24 blocks.)
  EXPECT_EQ(g.grid.z, 1u);
  EXPECT_EQ(g.grid.x, (4096u / 64u + 63u) * 24u);
  EXPECT_EQ(mojo_gemm::group_row_tiles(4096, 64, 64), 64 + 63);
  EXPECT_EQ(mojo_gemm::group_row_tiles(10, 64, 64), 10) << "at most one tile a row: no more non-empty groups";
  EXPECT_EQ(mojo_gemm::group_row_tiles(0, 64, 64), 0);
  EXPECT_EQ(mojo_gemm::group_row_tiles(128, 1, 64), 2);
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({out, x, w, TensorSpec(DType::i64, {64})}), {}, kSm90);
            }),
            "group_gemm: offsets is i64[64]; expected [65] (groups + 1)");
  // Gated (the MoE MLP's gate/up with silu-and-mul): half the columns out, the act code in the epilogue's.
  const TensorSpec half(DType::bf16, {4096, 768});
  EXPECT_EQ(op.specialize(specs({half, x, w, off64}), {{"gated_activation", 3}}, kSm90).get("act"), 3 + kGated);
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(specs({out, x, w, off64}), {{"gated_activation", 3}}, kSm90); }),
            "group_gemm: out is bf16[4096, 1536]; expected [4096, 768]");
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(specs({half, x, w, off64}), {}, kSm90); }),
            "group_gemm: out is bf16[4096, 768]; expected [4096, 1536]");
  // What the CLI, the Python layers and manifests allocate out by, where the call does not give it.
  const ShapeMap given = {{"x", {4096, 4096}}, {"weight", {64, 1536, 4096}}};
  EXPECT_EQ(op.specs_from_shapes(DType::bf16, given, {{"gated_activation", 3}})[0].str(), half.str());
  EXPECT_EQ(op.specs_from_shapes(DType::bf16, given, {})[0].str(), out.str());
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              op.specialize(specs({half, x, w, off64}), {{"gated_activation", 4}}, kSm90);
            }),
            "group_gemm: gated_activation is 4; expected 0 (none), 1 (gelu), 2 (gelu tanh) or 3 (silu)");
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({out, x, TensorSpec(DType::bf16, {64, 1536, 4095}), off64}), {}, kSm90);
            }),
            "group_gemm: weight is bf16[64, 1536, 4095]; expected contiguous [groups, N, 4096]");
  EXPECT_NE(error_of<DTypeError>([&] {
              op.specialize(specs({out, x, w, TensorSpec(DType::f32, {65})}), {}, kSm90);
            }).find("offsets has dtype f32"),
            std::string::npos);
  // The weights stored [groups, K, N] (another product's, for its input's gradient): B MN-major.
  const TensorSpec kn(DType::bf16, {64, 4096, 1536});
  EXPECT_EQ(op.specialize(specs({out, x, kn, off64}), {{"weight_kn", 1}}, kSm90).get("tb"), 0);
  EXPECT_EQ(op.specialize(specs({out, x, w, off64}), {}, kSm90).get("tb"), 1);
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({out, x, w, off64}), {{"weight_kn", 1}}, kSm90);
            }),
            "group_gemm: weight is bf16[64, 1536, 4096]; expected contiguous [groups, 4096, N] (weight_kn)");
  EXPECT_EQ(op.specs_from_shapes(DType::bf16, {{"x", {4096, 4096}}, {"weight", {64, 4096, 1536}}}, {{"weight_kn", 1}})
                .front()
                .str(),
            out.str());
}

// group_gemm's weights' gradient: a product a group over its rows, on the sm_80 path on every target.
TEST(GroupGemmWeightGrad, ParamsAndErrors) {
  const OpDef& op = find_op("group_gemm_weight_grad");
  const TensorSpec x(DType::bf16, {4096, 4096}), g(DType::bf16, {4096, 1536}), gw(DType::bf16, {64, 1536, 4096}),
      off(DType::i32, {65});
  const Params p = op.specialize(specs({gw, g, x, off}), {}, kSm90);
  EXPECT_EQ(p.get("wgmma"), 0);
  EXPECT_EQ(p.get("offsets"), 4);
  const LaunchGeometry geo = op.geometry(p, specs({gw, g, x, off}));
  EXPECT_EQ(geo.grid.z, 64u) << "one grid slice per group";
  EXPECT_EQ(geo.grid.x, unsigned((1536 / p.get("bm")) * (4096 / p.get("bn")))) << "the tiles of one [N, K] output";
  EXPECT_EQ(op.specs_from_shapes(DType::bf16, {{"grad_out", {4096, 1536}}, {"x", {4096, 4096}}, {"offsets", {65}}})
                .front()
                .str(),
            gw.str())
      << "grad_weight's shape from the others'";
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({gw, TensorSpec(DType::bf16, {4095, 1536}), x, off}), {}, kSm90);
            }),
            "group_gemm_weight_grad: grad_out is bf16[4095, 1536]; expected [4096, N] (x's rows)");
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({TensorSpec(DType::bf16, {64, 1536, 4095}), g, x, off}), {}, kSm90);
            }),
            "group_gemm_weight_grad: grad_weight is bf16[64, 1536, 4095]; expected contiguous [groups, 1536, 4096]");
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize(specs({gw, g, x, TensorSpec(DType::i32, {64})}), {}, kSm90);
            }),
            "group_gemm_weight_grad: offsets is i32[64]; expected [65] (groups + 1)");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              op.specialize(specs({gw, g, x, off}), {{"tf32", 1}}, kSm90);
            }),
            "group_gemm_weight_grad: tf32 = 1 applies to f32 inputs; these are bf16");
  // On sm_90a the wgmma path, its tiles [N, K] wide units of every group on a persistent grid; path 80 keeps the
  // sm_80 path's grid.z of groups. (Device pointers 0: aligned for TMA.)
  const Target sm90a = Target::parse("sm_90a");
  const Params hopper = op.specialize(specs({gw, g, x, off}), {}, sm90a);
  EXPECT_EQ(hopper.get("wgmma"), 1);
  EXPECT_EQ(hopper.get("bn") % 64, 0) << "x is MN-major: TMA loads it in boxes of 64 columns";
  const LaunchGeometry units = op.geometry(hopper, specs({gw, g, x, off}));
  EXPECT_TRUE(units.persistent);
  EXPECT_EQ(units.grid.x, unsigned(64 * ((1536 + hopper.get("bm") - 1) / hopper.get("bm")) *
                                   ((4096 + hopper.get("bn") - 1) / hopper.get("bn"))));
  EXPECT_EQ(op.specialize(specs({gw, g, x, off}), {{"path", 80}}, sm90a).get("wgmma"), 0);
}

TEST(GemmReference, SmallProductsAndTransposesAgree) {
  // [[1, 2], [3, 4]] x [[5, 6], [7, 8]] = [[19, 22], [43, 50]]; with alpha 2, beta 1 on c = 1.
  const auto a = reference::encode(DType::f32, {1, 2, 3, 4}), b = reference::encode(DType::f32, {5, 6, 7, 8});
  auto c = reference::encode(DType::f32, {1, 1, 1, 1});
  reference::gemm(DType::f32, DType::f32, a.data(), b.data(), c.data(), 1, 2, 2, 2, 2.0, 1.0, false, false);
  EXPECT_EQ(reference::decode(DType::f32, c), (std::vector<float>{39, 45, 87, 101}));
  // The same product from a^T and b^T stored, flagged as transposed.
  const auto at = reference::encode(DType::f32, {1, 3, 2, 4}), bt = reference::encode(DType::f32, {5, 7, 6, 8});
  std::vector<std::uint8_t> c2(16, 0xff);  // NaN: ignored with beta 0
  reference::gemm(DType::f32, DType::f32, at.data(), bt.data(), c2.data(), 1, 2, 2, 2, 1.0, 0.0, true, true);
  EXPECT_EQ(reference::decode(DType::f32, c2), (std::vector<float>{19, 22, 43, 50}));
  // linear: x [1, 2] . w [2, 2]^T + bias, then + residual.
  const auto x = reference::encode(DType::f32, {1, 2}), w = reference::encode(DType::f32, {1, 1, 2, -1}),
             bias = reference::encode(DType::f32, {0.5, 0}), res = reference::encode(DType::f32, {10, 20});
  std::vector<std::uint8_t> y(8);
  reference::linear(DType::f32, x.data(), w.data(), bias.data(), res.data(), y.data(), 1, 2, 2, Act::none);
  EXPECT_EQ(reference::decode(DType::f32, y), (std::vector<float>{13.5f, 20}));
}

// The gemm family through each compiler: a Runtime without a disk cache,
// and a scratch directory for the files ptxas reads.
struct GemmCompiles : ::testing::TestWithParam<std::string> {
  Runtime rt{op_test::memory_only(GetParam())};
  test::TempDir dir;
};

// Every layout and tile bucket: PTX that ptxas takes for sm_80 with no
// spills, and mma.sync (HMMA in SASS) in it.
TEST_P(GemmCompiles, EveryLayoutAndBucketWithoutSpills) {
  // (m, n) reaching every tile: 16 x 32, 16 x 64, 64 x 64 and 128 x 128.
  const std::pair<std::int64_t, std::int64_t> sizes[] = {{1, 256}, {1, 8192}, {48, 256}, {4096, 8192}};
  struct Kind {
    DType dtype;
    int tf32;
    const char* mma;  // the instruction it must use, or none
  };
  const Kind kinds[] = {{DType::f32, 0, nullptr},
                        {DType::f32, 1, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"},
                        {DType::f16, 0, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"},
                        {DType::bf16, 0, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"}};
  for (const Kind& kind : kinds)
    for (auto [m, n] : sizes)
      for (int ta : {0, 1})
        for (int tb : {0, 1}) {
          const DType dtype = kind.dtype;
          SCOPED_TRACE(
              fmt::format("{} tf32 {} m {} n {} trans_a {} trans_b {}", dtype_name(dtype), kind.tf32, m, n, ta, tb));
          const std::int64_t k = 512;
          auto t = specs({TensorSpec(dtype, {m, n}), ta ? TensorSpec(dtype, {k, m}) : TensorSpec(dtype, {m, k}),
                          tb ? TensorSpec(dtype, {n, k}) : TensorSpec(dtype, {k, n})});
          Artifact art = rt.compile("gemm", t, {{"trans_a", ta}, {"trans_b", tb}, {"tf32", kind.tf32}},
                                    Target::parse("sm_80"), Emit::ptx);
          EXPECT_EQ(art.binary->find("mma.sync") != std::string::npos, kind.mma != nullptr);
          if (kind.mma) EXPECT_NE(art.binary->find(kind.mma), std::string::npos);
          test::write_file(dir.path() / "g.ptx", *art.binary);
          auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -v -arch=sm_80 " +
                                     (dir.path() / "g.ptx").string() + " -o " + (dir.path() / "g.cubin").string());
          ASSERT_EQ(r.exit_code, 0) << r.output;
          EXPECT_NE(r.output.find("0 bytes spill stores, 0 bytes spill loads"), std::string::npos) << r.output;
        }
  // group_gemm and its weights' gradient with both offset types, and linear with the whole epilogue, on sm_90a too.
  for (DType offsets : {DType::i32, DType::i64}) {
    const TensorSpec gx(DType::bf16, {512, 256}), gg(DType::bf16, {512, 384}), gw(DType::bf16, {8, 384, 256});
    Artifact art = rt.compile("group_gemm_weight_grad", specs({gw, gg, gx, TensorSpec(offsets, {9})}), {},
                              Target::parse("sm_80"), Emit::ptx);
    test::write_file(dir.path() / "wg.ptx", *art.binary);
    auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -v -arch=sm_80 " + (dir.path() / "wg.ptx").string() +
                               " -o " + (dir.path() / "wg.cubin").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("0 bytes spill stores"), std::string::npos) << r.output;
  }
  for (DType offsets : {DType::i32, DType::i64}) {
    const TensorSpec gx(DType::bf16, {512, 256}), gw(DType::bf16, {8, 384, 256}), gy(DType::bf16, {512, 384});
    Artifact art =
        rt.compile("group_gemm", specs({gy, gx, gw, TensorSpec(offsets, {9})}), {}, Target::parse("sm_80"), Emit::ptx);
    test::write_file(dir.path() / "gg.ptx", *art.binary);
    auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -v -arch=sm_80 " + (dir.path() / "gg.ptx").string() +
                               " -o " + (dir.path() / "gg.cubin").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("0 bytes spill stores"), std::string::npos) << r.output;
  }
  // linear's decode form at each of its row counts and dtypes, the whole epilogue, K split or not: no stack, and
  // at most 64 registers (four blocks of 256 an SM: gemv.cuh).
  for (const char* arch : {"sm_80", "sm_90a"})
    for (DType d : {DType::f32, DType::f16, DType::bf16})
      for (std::int64_t m : {1, 2, 4})
        for (std::int64_t n : {300, 6144}) {
          SCOPED_TRACE(fmt::format("gemv {} {} m {} n {}", arch, dtype_name(d), m, n));
          const TensorSpec gx(d, {m, 4096}), gw(d, {n, 4096}), gy(d, {m, n}), gb(d, {n});
          Artifact art =
              rt.compile("linear", specs({gy, gx, gw, gb, gy}), {{"activation", 3}}, Target::parse(arch), Emit::ptx);
          EXPECT_NE(art.binary->find("_gemv_"), std::string::npos) << "the decode form";
          test::write_file(dir.path() / "v.ptx", *art.binary);
          auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -v -arch=" + arch + " " +
                                     (dir.path() / "v.ptx").string() + " -o " + (dir.path() / "v.cubin").string());
          ASSERT_EQ(r.exit_code, 0) << r.output;
          EXPECT_NE(r.output.find("0 bytes spill stores, 0 bytes spill loads"), std::string::npos) << r.output;
          const auto at = r.output.find("Used ");
          ASSERT_NE(at, std::string::npos) << r.output;
          EXPECT_LE(std::stoi(r.output.substr(at + 5)), 64) << r.output;
        }
  const TensorSpec x(DType::bf16, {4096, 4096}), w(DType::bf16, {12288, 4096}), y(DType::bf16, {4096, 12288}),
      bias(DType::bf16, {12288});
  for (const char* arch : {"sm_80", "sm_90a"}) {
    Artifact art = rt.compile("linear", specs({y, x, w, bias, y}), {{"activation", 3}}, Target::parse(arch), Emit::ptx);
    test::write_file(dir.path() / "l.ptx", *art.binary);
    auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -v -arch=" + arch + " " +
                               (dir.path() / "l.ptx").string() + " -o " + (dir.path() / "l.cubin").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("0 bytes spill stores"), std::string::npos) << r.output;
  }
}

// Decode (M <= 16) splits K over warp groups when the grid alone would leave
// too few loads in flight per SM; each group keeps at least two k tiles.
TEST(Gemm, DecodeSplitsKAcrossWarpGroups) {
  const OpDef& linear = find_op("linear");
  auto params = [&](std::int64_t m, std::int64_t n, std::int64_t k) {  // the tiles (M <= 4 would take gemv)
    const TensorSpec x(DType::bf16, {m, k}), w(DType::bf16, {n, k}), y(DType::bf16, {m, n});
    return linear.specialize(specs({y, x, w, TensorSpec(), TensorSpec()}), {{"path", 80}}, kSm90);
  };
  const Params down = params(1, 4096, 12288);  // 128 blocks of 16 x 32
  EXPECT_EQ(down.get("ks"), 4);
  const TensorSpec x(DType::bf16, {1, 12288}), w(DType::bf16, {4096, 12288}), y(DType::bf16, {1, 4096});
  const LaunchGeometry g = linear.geometry(down, specs({y, x, w, TensorSpec(), TensorSpec()}));
  EXPECT_EQ(g.block.x, 4u * 64u) << "four groups of two warps";
  EXPECT_EQ(g.dynamic_smem, 4u * 4u * (16 + 32) * 64 * 2) << "a ring per group";
  EXPECT_EQ(params(16, 6144, 4096).get("ks"), 2);
  EXPECT_EQ(params(16, 24576, 4096).get("ks"), 1) << "384 blocks already fill the SMs";
  EXPECT_EQ(params(1, 4096, 128).get("ks"), 1) << "two k tiles: nothing to split";
  EXPECT_EQ(params(1, 4096, 300).get("ks"), 2);
  EXPECT_EQ(params(64, 4096, 4096).get("ks"), 1) << "only decode tiles split";
}

// The sm_90a path: which problems take it, and what each compiles to.
TEST(Gemm, HopperPathForSixteenBitOperandsInAnyLayout) {
  const Target sm90a = Target::parse("sm_90a");
  const OpDef &gemm = find_op("gemm"), &linear = find_op("linear");
  auto bf = [](std::vector<std::int64_t> shape) { return TensorSpec(DType::bf16, shape); };
  const auto nt = specs({bf({4096, 4096}), bf({4096, 4096}), bf({4096, 4096})});
  Params p = gemm.specialize(nt, {{"trans_b", 1}}, sm90a);
  EXPECT_EQ(p.get("wgmma"), 1);
  EXPECT_EQ(p.str(),
            "dtype=bf16 out=bf16 bm=128 bn=256 bk=64 wm=2 wn=1 stages=4 ks=1 swizzle=8 splits=1 ta=0 tb=1 vec=8 beta=0 "
            "tf32=0 wgmma=1");
  LaunchGeometry g = gemm.geometry(p, nt);
  EXPECT_EQ(g.grid.x, 32u * 16u) << "every tile; the Runtime caps a persistent grid at the SM count";
  EXPECT_TRUE(g.persistent);
  EXPECT_EQ(g.block.x, 384u) << "a producer and two consumer warpgroups";
  EXPECT_EQ(g.dynamic_smem, 4u * (128 + 256) * 64 * 2 + 4 * 16 + 1024);
  EXPECT_EQ(gemm.max_dynamic_smem(p), g.dynamic_smem);

  EXPECT_EQ(gemm.specialize(nt, {}, sm90a).get("wgmma"), 1) << "B [K, N]: MN-major, read transposed";
  EXPECT_EQ(gemm.specialize(nt, {{"trans_a", 1}, {"trans_b", 1}}, sm90a).get("wgmma"), 1) << "A [K, M]";
  EXPECT_EQ(gemm.specialize(nt, {{"trans_b", 1}}, kSm90).get("wgmma"), 0) << "sm_90 without 'a' has no wgmma";
  EXPECT_EQ(gemm.specialize({nt[0], {nt[1].spec, 0x1008}, nt[2]}, {{"trans_b", 1}}, sm90a).get("wgmma"), 0)
      << "TMA needs 16-byte aligned rows";
  const TensorSpec f(DType::f32, {4096, 4096});
  EXPECT_EQ(gemm.specialize(specs({f, f, f}), {{"trans_b", 1}, {"tf32", 1}}, sm90a).get("wgmma"), 0);
  // Every M above 16 takes it: 32 rows in 64-row tiles (one consumer warpgroup) 32 wide, for 128 tiles on 132
  // SMs; mid-size M in 128 x 128, the pipeline as deep as shared memory allows. Decode (M <= 16) keeps the
  // sm_80 path's 16-row tiles, K split (measured faster on an H200: gemm_tile.hpp).
  const TensorSpec w(DType::bf16, {4096, 4096});
  const auto small_m = specs({bf({32, 4096}), bf({32, 4096}), w, TensorSpec(), TensorSpec()});
  Params small = linear.specialize(small_m, {}, sm90a);
  EXPECT_EQ(small.get("wgmma"), 1);
  EXPECT_EQ(small.get("bm"), 64);
  EXPECT_EQ(small.get("bn"), 32);
  EXPECT_EQ(small.get("stages"), 18) << "12 KB a stage, 4 KB of it weights: 72 KB of weights in flight an SM";
  EXPECT_EQ(linear.geometry(small, small_m).block.x, 256u) << "a producer and one consumer warpgroup";
  Params decode = linear.specialize(specs({bf({16, 4096}), bf({16, 4096}), w, TensorSpec(), TensorSpec()}), {}, sm90a);
  EXPECT_EQ(decode.get("wgmma"), 0);
  EXPECT_EQ(decode.get("bm"), 16);
  EXPECT_EQ(decode.get("ks"), 4) << "K split 4 ways: 512 warp groups of loads for 132 SMs";
  EXPECT_EQ(linear.specialize(specs({bf({16, 4096}), bf({16, 4096}), w, TensorSpec(), TensorSpec()}),
                              {{"path", 90}}, sm90a)
                .get("wgmma"),
            1)
      << "path = 90 pins the sm_90a path at any M";
  Params mid = linear.specialize(specs({bf({512, 4096}), bf({512, 4096}), w, TensorSpec(), TensorSpec()}), {}, sm90a);
  EXPECT_EQ(mid.get("wgmma"), 1);
  EXPECT_EQ(mid.get("bn"), 128);
  EXPECT_EQ(mid.get("stages"), 7);
  EXPECT_EQ(linear.specialize(specs({bf({16, 4096}), bf({16, 4096}), w, TensorSpec(), TensorSpec()}),
                              {{"path", 80}}, sm90a)
                .get("wgmma"),
            0)
      << "path = 80 pins the sm_80 path";
  // B [K, N] is MN-major: TMA loads it in boxes of 64 columns, so the widths are multiples of 64.
  EXPECT_EQ(gemm.specialize(specs({bf({32, 4096}), bf({32, 4096}), bf({4096, 4096})}), {}, sm90a).get("bn"), 64);
  // Batches apart from each other: TMA walks them by stride.
  const auto batched = specs({bf({8, 1024, 1024}), bf({8, 1024, 512}), bf({8, 1024, 512})});
  EXPECT_EQ(find_op("gemm_batched").specialize(batched, {{"trans_b", 1}}, sm90a).get("wgmma"), 1);
  // group_gemm: MoE prefill-sized groups take it; decode-sized ones the sm_80 path.
  const OpDef& group = find_op("group_gemm");
  const TensorSpec experts(DType::bf16, {64, 1536, 4096}), offsets(DType::i64, {65});
  auto group_params = [&](std::int64_t rows) {
    return group.specialize(specs({bf({rows, 1536}), bf({rows, 4096}), experts, offsets}), {}, sm90a);
  };
  EXPECT_EQ(group_params(32768).get("wgmma"), 1);
  EXPECT_EQ(group_params(4096).get("wgmma"), 0) << "64 rows per expert";
  // Autotuning tries both sm_90a tiles and the sm_80 ones, and the heuristic's path with K split 2, 4 and 8 ways.
  const std::vector<Params> candidates = gemm.tuning()->candidates(p, nt, {{"trans_b", 1}}, sm90a);
  EXPECT_EQ(std::count_if(candidates.begin(), candidates.end(),
                          [](const Params& c) { return c.get("wgmma") == 1 && c.get("splits") == 1; }),
            2);
  for (std::int64_t splits : {2, 4, 8})
    EXPECT_EQ(std::count_if(candidates.begin(), candidates.end(),
                            [&](const Params& c) { return c.get("wgmma") == 1 && c.get("splits") == splits; }),
              1)
        << splits;
  EXPECT_GT(candidates.size(), 4u);
}

// The issue-27 model test: every linear of Qwen3-8B (qkv, o, gate_up, down), from a 128-token chunk to
// prefill, takes the sm_90a path on sm_90a with a tile that leaves at least 0.9 of its last wave of SMs busy, as the
// performance model counts it (a persistent block per SM looping over tiles). The old fixed tiles gave
// 0.18 (qkv, M = 128: 24 tiles of 128 x 256) and the sm_80 path 0.48 waves; both ran at a third of cuBLAS.
TEST(Linear, EveryQwen3LinearFillsTheLastWaveOnHopper) {
  const OpDef& linear = find_op("linear");
  const Target sm90a = Target::parse("sm_90a");
  const int sms = reference_sm_count(sm90a);
  const std::int64_t features[][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}};  // N, K
  for (std::int64_t m : {1, 16, 128, 512, 2048, 4096})
    for (auto [n, k] : features) {
      SCOPED_TRACE(fmt::format("M {} N {} K {}", m, n, k));
      const auto t = specs({TensorSpec(DType::bf16, {m, n}), TensorSpec(DType::bf16, {m, k}),
                            TensorSpec(DType::bf16, {n, k}), TensorSpec(), TensorSpec()});
      const Params p = linear.specialize(t, {}, sm90a);
      // One row: the decode form, whose warps fill at least half of every SM's warp slots.
      if (m <= kGemvMaxRows) {
        ASSERT_EQ(p.get("gemv"), 1) << p.str();
        const LaunchGeometry g = linear.geometry(p, t);
        EXPECT_GE(g.grid.x * g.block.x / 32, std::uint64_t(32 * sms)) << p.str();
        continue;
      }
      // Decode: the sm_80 path's 16-row tiles, K split to fill the SMs, but for gate_up's 192-wide sm_90a tile.
      if (m <= kSm80PathMaxRows && n != 24576) {
        EXPECT_EQ(p.get("wgmma"), 0) << p.str();
        EXPECT_EQ(p.get("bm"), 16) << p.str();
        EXPECT_GE(linear.geometry(p, t).grid.x * p.get("ks"), std::uint64_t(sms)) << p.str() << ": a K slice an SM";
        continue;
      }
      ASSERT_EQ(p.get("wgmma"), 1) << p.str();
      if (m <= kSm80PathMaxRows) EXPECT_GE(p.get("bn"), kDecodeWgmmaMinCols) << p.str();
      const LaunchGeometry g = linear.geometry(p, t);
      ASSERT_TRUE(g.persistent);
      const std::uint64_t tiles = g.grid.x;
      EXPECT_EQ(tiles, std::uint64_t((m + p.get("bm") - 1) / p.get("bm") * ((n + p.get("bn") - 1) / p.get("bn"))));
      EXPECT_GE(wave_fill(tiles, std::uint64_t(sms)), 0.9) << p.str() << ": " << tiles << " tiles";
      EXPECT_EQ(p.get("splits"), 1) << p.str() << ": the tiles fill the SMs unsplit";
      EXPECT_LE(g.dynamic_smem, 227u * 1024) << "fits the H100's opt-in shared memory";
      EXPECT_GE(p.get("stages"), 4) << "a pipeline at least 4 deep";
    }
}

// K split over blocks where the tiles alone leave SMs idle (gemm_tile.hpp's model): Qwen3-8B's k and v projections
// (N 1024) at M 64 make 64 of the sm_90a path's narrowest tiles, half the H100's SMs; split in two, 128 units
// fill 0.97 of one wave. On an A100 target the sm_80 path's 64 x 64 tiles make 64 blocks of o_proj at M 32 for 108
// SMs. A requested split picks the tile for tiles x splits units; K too short for a split's 8 k steps stays whole.
TEST(Linear, SplitsKWhereTheTilesLeaveSmsIdle) {
  const OpDef& linear = find_op("linear");
  auto tensors = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    return specs({TensorSpec(DType::bf16, {m, n}), TensorSpec(DType::bf16, {m, k}), TensorSpec(DType::bf16, {n, k}),
                  TensorSpec(), TensorSpec()});
  };
  const Target sm90a = Target::parse("sm_90a"), sm80 = Target::parse("sm_80");
  const auto kv = tensors(64, 1024, 4096);
  const Params p = linear.specialize(kv, {}, sm90a);
  EXPECT_EQ(p.get("wgmma"), 1) << p.str();
  EXPECT_EQ(p.get("splits"), 2) << p.str();
  const std::vector<Params> plan = linear.plan(p);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(linear.entry_macro(plan[0]), "MOJO_KERNEL_linear_sm90");
  EXPECT_EQ(linear.entry_macro(plan[1]), "MOJO_KERNEL_linear_reduce");
  const LaunchGeometry product = linear.geometry(plan[0], kv), reduce = linear.geometry(plan[1], kv);
  EXPECT_EQ(product.grid.x, 128u) << "64 tiles, each K in two";
  EXPECT_GE(wave_fill(product.grid.x, 132), 0.9);
  EXPECT_EQ(std::uint64_t(reduce.grid.x) * reduce.block.x, 64u * 1024 / 2) << "a thread a pair of columns";
  EXPECT_EQ(linear.max_dynamic_smem(plan[1]), 0u);
  EXPECT_EQ(linear.workspace_bytes(p, kv), 2u * 64 * 1024 * sizeof(float));

  const Params a100 = linear.specialize(tensors(32, 4096, 4096), {}, sm80);
  EXPECT_GT(a100.get("splits"), 1) << a100.str();
  EXPECT_GE(64 * a100.get("splits"), 97) << a100.str() << ": at least 0.9 of 108 SMs get a block";

  // Asked for: o_proj at M 32 in four, 32 tiles of 128 columns (not 128 of 32), 128 units.
  const Params asked = linear.specialize(tensors(32, 4096, 4096), {{"splits", 4}}, sm90a);
  EXPECT_EQ(asked.get("splits"), 4) << asked.str();
  EXPECT_EQ(asked.get("bn"), 128) << asked.str();
  EXPECT_EQ(linear.specialize(tensors(32, 4096, 4096), {{"splits", 1}}, sm90a).get("bn"), 32);
  EXPECT_EQ(linear.specialize(tensors(64, 1024, 512), {}, sm90a).get("splits"), 1) << "8 k steps: too few to split";
  EXPECT_EQ(linear.specialize(tensors(0, 1024, 4096), {}, sm90a).get("splits"), 1) << "no rows: nothing to split";
  EXPECT_EQ(linear.specialize(tensors(1 << 29, 1 << 29, 4096), {{"splits", 16}}, sm90a).get("splits"), 2)
      << "2^58 outputs: the workspace stays within a tensor's 2^59 elements";
  const TensorSpec c16(DType::bf16, {40000, 16, 16}), a16(DType::bf16, {40000, 16, 256}),
      b16(DType::bf16, {40000, 256, 16});
  EXPECT_EQ(find_op("gemm_batched").specialize(specs({c16, a16, b16}), {{"splits", 2}}, sm80).get("splits"), 1)
      << "the sm_80 path's grid.z holds 65,535 batches and splits";
  EXPECT_EQ(linear.specialize(tensors(2, 1024, 4096), {}, sm90a).get("gemv"), 2) << "decode: the gemv form";
  EXPECT_EQ(linear.specialize(tensors(2, 1024, 4096), {{"splits", 2}}, sm90a).get("splits"), 2)
      << "a split asked for takes the tile";

  for (double bad : {-1.0, 17.0, 2.5})
    EXPECT_NE(error_of<InvalidArgumentError>([&] {
                linear.specialize(kv, {{"splits", bad}}, sm90a);
              }).find("expected 0 (the heuristic's choice) or a whole number from 1 to 16"),
              std::string::npos)
        << bad;

  // The product writes f32 sums to the workspace with no epilogue; the reduce reads them and writes out.
  const DevicePtr out = 0x10000, x = 0x20000, w = 0x30000, bias = 0x40000, workspace = 0x50000;
  const TensorSpec y(DType::bf16, {32, 64}), xs(DType::bf16, {32, 4096}), ws(DType::bf16, {64, 4096}),
      bs(DType::bf16, {64});
  const std::vector<Tensor> t = {{y, out}, {xs, x}, {ws, w}, {bs, bias}, {TensorSpec(), 0}};
  const std::vector<Params> steps = linear.plan(linear.specialize(t, {{"splits", 2}, {"path", 80}}, sm80));
  ASSERT_EQ(steps.size(), 2u);
  KernelArgs product_args, reduce_args;
  linear.pack_args(steps[0], t, {}, Workspace{.scratch = workspace}, product_args);
  const auto& g = op_test::packed<mojo_gemm::Args<void, void>>(product_args).out;
  EXPECT_EQ(g.c, ptr(workspace));
  EXPECT_EQ(g.bias, nullptr);
  EXPECT_EQ(g.ldc, 64);
  EXPECT_EQ(g.batch_c, 2 * 32 * 64);
  linear.pack_args(steps[1], t, {}, Workspace{.scratch = workspace}, reduce_args);
  const auto& r = op_test::packed<mojo_gemm::OutputArgs<void>>(reduce_args);
  EXPECT_EQ(r.c, ptr(out));
  EXPECT_EQ(r.bias, ptr(bias));
  EXPECT_EQ(r.partials, ptr<const float>(workspace));
  EXPECT_EQ(r.batches, 1);
}

// Both paths through each compiler to a cubin: no local memory, and the SASS
// has the right tensor-core instruction (HGMMA for sm_90a, left asynchronous
// with setmaxnreg kept; HMMA for sm_80) when nvdisasm is at hand.
TEST_P(GemmCompiles, HopperPathIsHgmmaAndSm80PathIsHmma) {
  bool disassembled = false;
  auto bf = [](std::vector<std::int64_t> shape) { return TensorSpec(DType::bf16, shape); };
  auto hf = [](std::vector<std::int64_t> shape) { return TensorSpec(DType::f16, shape); };
  struct Case {
    const char* what;
    const char* op;
    std::vector<Tensor> tensors;
    std::vector<ScalarArg> scalars;
    const char* arch;
    int wgmma;
  };
  const std::vector<Case> cases = {
      {"linear bf16 128x256, bias + silu + residual",
       "linear",
       specs({bf({4096, 12288}), bf({4096, 4096}), bf({12288, 4096}), bf({12288}), bf({4096, 12288})}),
       {{"activation", 3}},
       "sm_90a",
       1},
      {"linear f16 128x128",
       "linear",
       specs({hf({512, 4096}), hf({512, 4096}), hf({4096, 4096}), TensorSpec(), TensorSpec()}),
       {},
       "sm_90a",
       1},
      {"gemm bf16 -> f32 with beta",
       "gemm",
       specs({TensorSpec(DType::f32, {4096, 4096}), bf({4096, 4096}), bf({4096, 4096})}),
       {{"trans_b", 1}, {"beta", 0.5}},
       "sm_90a",
       1},
      {"gemm_batched f16",
       "gemm_batched",
       specs({hf({8, 1024, 1024}), hf({8, 1024, 512}), hf({8, 1024, 512})}),
       {{"trans_b", 1}},
       "sm_90a",
       1},
      {"gemm bf16 A [M, K], B [K, N] (MN-major B)",
       "gemm",
       specs({bf({4096, 4096}), bf({4096, 4096}), bf({4096, 4096})}),
       {},
       "sm_90a",
       1},
      {"gemm f16 A [K, M], B [K, N] (both MN-major), 128x128",
       "gemm",
       specs({hf({1024, 2048}), hf({1024, 1024}), hf({1024, 2048})}),
       {{"trans_a", 1}},
       "sm_90a",
       1},
      {"group_gemm bf16 (MoE prefill)",
       "group_gemm",
       specs({bf({32768, 1536}), bf({32768, 4096}), bf({64, 1536, 4096}), TensorSpec(DType::i32, {65})}),
       {},
       "sm_90a",
       1},
      {"linear bf16 M = 32, 64 x 48 (one consumer warpgroup)",
       "linear",
       specs({bf({32, 6144}), bf({32, 4096}), bf({6144, 4096}), TensorSpec(), TensorSpec()}),
       {},
       "sm_90a",
       1},
      {"linear f16 M = 128, 64 x 96, bias + gelu",
       "linear",
       specs({hf({128, 6144}), hf({128, 4096}), hf({6144, 4096}), hf({6144}), TensorSpec()}),
       {{"activation", 1}},
       "sm_90a",
       1},
      {"gemm bf16 -> f32 M = 32, B [K, N] (MN-major) 64 x 64",
       "gemm",
       specs({TensorSpec(DType::f32, {32, 4096}), bf({32, 4096}), bf({4096, 4096})}),
       {},
       "sm_90a",
       1},
      {"linear bf16 M = 128, 64 x 64, the ring as deep as shared memory allows",
       "linear",
       specs({bf({128, 4096}), bf({128, 4096}), bf({4096, 4096}), TensorSpec(), TensorSpec()}),
       {},
       "sm_90a",
       1},
      {"gemm bf16 on sm_80", "gemm", specs({bf({4096, 4096}), bf({4096, 4096}), bf({4096, 4096})}), {}, "sm_80", 0},
      {"linear bf16 M = 32, K split 4 ways (f32 sums, then the reduce with bias + silu)",
       "linear",
       specs({bf({32, 4096}), bf({32, 4096}), bf({4096, 4096}), bf({4096}), TensorSpec()}),
       {{"activation", 3}, {"splits", 4}},
       "sm_90a",
       1},
      {"gemm bf16 -> f32 with beta on sm_80, K split 4 ways",
       "gemm",
       specs({TensorSpec(DType::f32, {32, 4096}), bf({32, 4096}), bf({4096, 4096})}),
       {{"trans_b", 1}, {"beta", 1}, {"splits", 4}},
       "sm_80",
       0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Target target = Target::parse(c.arch);
    ASSERT_EQ(find_op(c.op).specialize(c.tensors, c.scalars, target).get("wgmma"), c.wgmma);
    Artifact ptx = rt.compile(c.op, c.tensors, c.scalars, target, Emit::ptx);
    EXPECT_EQ(ptx.binary->find("wgmma.mma_async") != std::string::npos, c.wgmma == 1);
    EXPECT_EQ(ptx.binary->find("cp.async.bulk.tensor") != std::string::npos, c.wgmma == 1);
    EXPECT_EQ(ptx.binary->find(".local"), std::string::npos) << "the TMA descriptors stay in param space";
    Artifact cubin = rt.compile(c.op, c.tensors, c.scalars, target, Emit::cubin);
    EXPECT_GT(cubin.resources.registers, 0);
    EXPECT_EQ(cubin.resources.stack_bytes, 0u) << "no spills";
    const Params p = find_op(c.op).specialize(c.tensors, c.scalars, target);
    EXPECT_LE(cubin.resources.static_shared_bytes + find_op(c.op).max_dynamic_smem(p), 227u * 1024)
        << p.str() << ": static and dynamic shared memory within a block's opt-in";
    const auto sass = test::sass_facts(*cubin.binary);
    if (!sass) continue;
    disassembled = true;
    if (c.wgmma) test::expect_whole_program_wgmma(*sass);
    EXPECT_EQ(sass->hgmma > 0, c.wgmma == 1) << "HGMMA in SASS";
    EXPECT_EQ(sass->hmma > 0, c.wgmma == 0) << "HMMA in SASS";
    EXPECT_EQ(sass->tma_loads > 0, c.wgmma == 1) << "TMA loads in SASS";
    EXPECT_EQ(sass->local_memory, 0);
  }
  if (!disassembled)
    GTEST_SKIP() << "compiled and checked for spills; no nvdisasm to read the SASS (tools/setup.sh installs one)";
}

INSTANTIATE_TEST_SUITE_P(Compilers, GemmCompiles, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });

// Autotuning's inputs (the timing itself needs a GPU): the candidates, the
// bucket a result stands for, and when the tensors may be launched repeatedly.
TEST(GemmAutotune, CandidatesBucketsAndSafety) {
  const OpDef& op = find_op("gemm");
  ASSERT_NE(op.tuning(), nullptr);
  EXPECT_EQ(find_op("rms_norm").tuning(), nullptr) << "only the tile ops have choices to time";
  const TensorSpec a(DType::bf16, {100, 5000}), b(DType::bf16, {5000, 3000}), c(DType::bf16, {100, 3000});
  const Params chosen = op.specialize(specs({c, a, b}), {}, kSm90);
  const std::vector<Params> candidates = op.tuning()->candidates(chosen, specs({c, a, b}), {}, kSm90);
  ASSERT_GE(candidates.size(), 5u);
  EXPECT_EQ(candidates.front(), chosen) << "the heuristic's choice comes first";
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    EXPECT_FALSE(candidates[i] == chosen);
    EXPECT_EQ(candidates[i].get("vec"), chosen.get("vec")) << "only the tile changes";
    EXPECT_LE(op.max_dynamic_smem(candidates[i]), 227u * 1024);
  }
  EXPECT_EQ(op.tuning()->bucket(specs({c, a, b})), "m<=128 n<=4096 k<=8192");
  EXPECT_EQ(op.tuning()->bucket(specs({c, TensorSpec(DType::bf16, {5000, 100}), b})), "m<=128 n<=4096 k<=8192")
      << "transposed a: the same problem";
  EXPECT_TRUE(op.tuning()->safe(specs({c, a, b}), {}));
  EXPECT_FALSE(op.tuning()->safe(specs({c, a, b}), {{"beta", 1}})) << "c is read: repeated launches would change it";

  const TensorSpec f(DType::f32, {64, 64});
  const auto fff = specs({f, f, f});
  EXPECT_TRUE(op.tuning()->candidates(op.specialize(fff, {}, kSm90), fff, {}, kSm90).empty()) << "exact f32: one tile";
  EXPECT_EQ(op.tuning()->candidates(op.specialize(fff, {{"tf32", 1}}, kSm90), fff, {{"tf32", 1}}, kSm90).back().get("bk"),
            16);

  const OpDef& linear = find_op("linear");
  const TensorSpec x(DType::bf16, {8, 64}), w(DType::bf16, {32, 64}), y(DType::bf16, {8, 32});
  EXPECT_FALSE(linear.tuning()->safe({{y, 0x1000}, {x, 0x2000}, {w, 0x3000}, {TensorSpec(), 0}, {y, 0x1000}}, {}))
      << "residual is the output";
  EXPECT_TRUE(linear.tuning()->safe({{y, 0x1000}, {x, 0x2000}, {w, 0x3000}, {TensorSpec(), 0}, {y, 0x4000}}, {}));

  // Every candidate compiles for sm_80 without spills.
  RuntimeOptions o;
  o.disk_cache = false;
  Runtime rt(o);
  test::TempDir dir;
  auto nvrtc = make_compiler("nvrtc");
  for (const Params& p : candidates) {
    SCOPED_TRACE(p.str());
    const std::string unit = rt.templates().expand(op.template_file()) + "\n" + op.entry_line(p) + "\n";
    const std::string ptx = nvrtc->compile({"gemm.cu", unit, Target::parse("sm_80"), Emit::ptx, p.str()}).binary;
    test::write_file(dir.path() / "c.ptx", ptx);
    auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -v -arch=sm_80 " + (dir.path() / "c.ptx").string() +
                               " -o " + (dir.path() / "c.cubin").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("0 bytes spill stores"), std::string::npos) << r.output;
  }
}

// gemm.cu's sm_80 kernels all take one mojo_gemm::Args (gemm_args.h): the inputs, then the output side every
// path shares; every op fills it the same way.
TEST(Gemm, EveryOpPacksOneArgsStruct) {
  const TensorSpec m(DType::bf16, {64, 64}), v(DType::bf16, {64}), w3(DType::bf16, {2, 64, 64}),
      b3(DType::bf16, {2, 64, 64}), off(DType::i64, {3});
  const DevicePtr c = 0x10000, a = 0x20000, b = 0x30000, x = 0x40000, y = 0x50000;
  struct Case {
    const char* op;
    std::vector<Tensor> tensors;
  };
  const Case cases[] = {{"gemm", {{m, c}, {m, a}, {m, b}}},
                        {"gemm_batched", {{b3, c}, {b3, a}, {b3, b}}},
                        {"linear", {{m, c}, {m, a}, {m, b}, {v, x}, {m, y}}},
                        {"group_gemm", {{m, c}, {m, a}, {w3, b}, {off, x}}}};
  for (const Case& t : cases) {
    SCOPED_TRACE(t.op);
    const OpDef& op = find_op(t.op);
    KernelArgs args;
    const Params p = op.specialize(t.tensors, {}, kSm90);
    ASSERT_EQ(p.get("wgmma"), 0) << "sm_90 (not sm_90a): the sm_80 path";
    op.pack_args(p, t.tensors, {}, {}, args);
    const auto& packed = op_test::packed<mojo_gemm::Args<void, void>>(args);
    const auto& in = packed.in;
    const auto& g = packed.out;
    EXPECT_EQ(g.c, ptr(c));
    EXPECT_EQ(in.a, ptr(a));
    EXPECT_EQ(in.b, ptr(b));
    EXPECT_FLOAT_EQ(g.alpha, 1.f);
    EXPECT_FLOAT_EQ(g.beta, 0.f);
    EXPECT_EQ(g.m, 64);
    EXPECT_EQ(g.n, 64);
    EXPECT_EQ(g.k, 64);
    EXPECT_EQ(in.lda, 64);
    EXPECT_EQ(in.ldb, 64);
    EXPECT_EQ(g.ldc, 64);
    const bool linear = t.op == std::string("linear"), group = t.op == std::string("group_gemm");
    EXPECT_EQ(g.bias, linear ? ptr(x) : nullptr);
    EXPECT_EQ(g.residual, linear ? ptr(y) : nullptr);
    EXPECT_EQ(g.ldr, linear ? 64 : 0);
    EXPECT_EQ(g.offsets, group ? ptr(x) : nullptr);
    EXPECT_EQ(g.total_rows, group ? 64 : 0);
    const bool batched = t.op == std::string("gemm_batched");
    EXPECT_EQ(in.batch_a, batched ? 64 * 64 : 0);
    EXPECT_EQ(in.batch_b, batched || group ? 64 * 64 : 0) << "group_gemm: one weight matrix per group";
    EXPECT_EQ(g.batch_c, batched ? 64 * 64 : 0);
    EXPECT_EQ(g.batches, batched || group ? 2 : 1);
  }
}
