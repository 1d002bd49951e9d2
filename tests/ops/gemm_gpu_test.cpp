// gemm, gemm_batched and linear on the GPU against the float64 CPU reference,
// with each compiler: odd shapes (M = 1, 17, 4095; K not a multiple of the
// tile), both transposes, alpha/beta, f32 output, every epilogue, strided
// and unaligned inputs. Where there is no GPU they run on the CPU device, the
// sm_90a path on one emulating sm_90a at smaller shapes (the heuristic takes
// it there at every M).
//
// Tolerance: a dot product of K terms accumulated in fp32 (tensor cores for
// f16/bf16, FMAs for f32) vs float64: |gpu - cpu| <= rtol * |cpu| + atol *
// max|cpu| with the output dtype's rounding (gpu_util.hpp) and atol grown by
// sqrt(K) / 16 for the accumulation (inputs in ±[0.05, 2], so |c| ~ sqrt(K)).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <span>

#include "gpu_util.hpp"
#include "mojo/error.hpp"

using namespace mojo;
using test::GpuTensor;

namespace {

struct GpuGemm : test::GpuTest, ::testing::WithParamInterface<std::string> {
  std::string compiler() const override { return GetParam(); }
};

// The gemm ops' own tolerance (OpDef::tolerance) for a product of k terms into `out`.
test::Tolerance gemm_tolerance(DType out, std::int64_t k) {
  const std::vector<TensorSpec> specs = {TensorSpec(out, {1, 1}), TensorSpec(out, {1, k}), TensorSpec(out, {1, k})};
  return find_check("linear").tolerance(out, specs, {});
}

std::vector<std::uint8_t> random_matrix(DType d, std::int64_t n, std::uint32_t seed) {
  return reference::encode(d, test::random_values(std::size_t(n), seed));
}

struct Case {
  std::int64_t m, n, k;
  bool ta, tb;
};

// path: the gemm "path" scalar (0: the heuristic's choice, 90: the sm_90a path); splits: its "splits" (0: the
// heuristic's choice).
void check_gemm(Runtime& rt, DType in, DType out, Case s, double alpha, double beta, std::int64_t batch = 1,
                bool tf32 = false, int path = 0, int splits = 0) {
  SCOPED_TRACE(fmt::format("{}->{} batch {} m {} n {} k {} ta {} tb {} alpha {} beta {} splits {}", dtype_name(in),
                           dtype_name(out), batch, s.m, s.n, s.k, s.ta, s.tb, alpha, beta, splits));
  const bool batched = batch > 1;
  auto shape = [&](std::int64_t r, std::int64_t c) {
    return batched ? std::vector<std::int64_t>{batch, r, c} : std::vector<std::int64_t>{r, c};
  };
  const TensorSpec a(in, shape(s.ta ? s.k : s.m, s.ta ? s.m : s.k)), b(in, shape(s.tb ? s.n : s.k, s.tb ? s.k : s.n)),
      c(out, shape(s.m, s.n));
  const auto ah = random_matrix(in, a.numel(), 1), bh = random_matrix(in, b.numel(), 2),
             ch = random_matrix(out, c.numel(), 3);
  GpuTensor ad(a, ah), bd(b, bh), cd(c, ch);
  rt.launch(batched ? "gemm_batched" : "gemm", {cd, ad, bd},
            {{"alpha", alpha},
             {"beta", beta},
             {"trans_a", s.ta ? 1 : 0},
             {"trans_b", s.tb ? 1 : 0},
             {"tf32", tf32 ? 1 : 0},
             {"path", path},
             {"splits", splits}});
  rt.device().synchronize();
  auto want = ch;
  reference::gemm(in, out, ah.data(), bh.data(), want.data(), batch, s.m, s.n, s.k, alpha, beta, s.ta, s.tb);
  // tf32 keeps 10 of f32's 23 mantissa bits: inputs carry bf16-like error (2^-11 relative) into the sums.
  test::expect_close(out, cd.read(), want, "c", gemm_tolerance(tf32 ? DType::bf16 : out, s.k));
  EXPECT_EQ(ad.read(), ah);
}

// An sm_90a tile: bm x bn.
struct Sm90Tile {
  std::int64_t bm = 0, bn = 0;
};

// The heuristic (or the path scalar) picks the sm_90a path with this tile for these tensors.
void expect_wgmma(Runtime& rt, std::string_view op, TensorList tensors, ScalarList scalars, Sm90Tile tile) {
  const Params p = rt.get_kernel(op, tensors, scalars).params();
  EXPECT_EQ(p.get("wgmma"), 1) << p.str();
  EXPECT_EQ(p.get("bm"), tile.bm) << p.str();
  EXPECT_EQ(p.get("bn"), tile.bn) << p.str();
}

// linear on random inputs vs the reference; `wgmma_tile` given: it must take
// the sm_90a path with that tile.
void check_linear(Runtime& rt, DType d, std::int64_t m, std::int64_t n, std::int64_t k, int act, bool bias,
                  bool residual, Sm90Tile wgmma_tile = {}, int path = 0, int splits = 0) {
  SCOPED_TRACE(fmt::format("linear {} m {} n {} k {} act {} bias {} residual {} splits {}", dtype_name(d), m, n, k, act,
                           bias, residual, splits));
  const TensorSpec x(d, {m, k}), w(d, {n, k}), y(d, {m, n}), bs(d, {n});
  const auto xh = random_matrix(d, x.numel(), 6), wh = random_matrix(d, w.numel(), 7), bh = random_matrix(d, n, 8),
             rh = random_matrix(d, y.numel(), 9);
  GpuTensor xd(x, xh), wd(w, wh), yd(y), bd(bs, bh), rd(y, rh);
  const Tensor absent{TensorSpec(), 0};
  const std::vector<Tensor> tensors{yd, xd, wd, bias ? bd.tensor() : absent, residual ? rd.tensor() : absent};
  const std::vector<ScalarArg> scalars = {{"activation", act}, {"path", path}, {"splits", splits}};
  if (wgmma_tile.bn > 0) expect_wgmma(rt, "linear", tensors, scalars, wgmma_tile);
  rt.launch("linear", tensors, scalars);
  rt.device().synchronize();
  std::vector<std::uint8_t> want(y.nbytes());
  reference::linear(d, xh.data(), wh.data(), bias ? bh.data() : nullptr, residual ? rh.data() : nullptr, want.data(), m,
                    n, k, Act(act));
  test::expect_close(d, yd.read(), want, "out", gemm_tolerance(d, k));
}

}  // namespace

TEST_P(GpuGemm, OddShapesAndTransposes) {
  const Case cases[] = {{1, 1, 1, false, false},       {1, 4096, 4096, false, true}, {17, 33, 100, false, false},
                        {17, 33, 100, true, true},     {64, 64, 64, true, false},    {4095, 257, 72, false, true},
                        {256, 384, 520, false, false}, {130, 1000, 1024, true, true}};
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (const Case& s : cases) check_gemm(*rt, in, in, s, 1.0, 0.0);
}

TEST_P(GpuGemm, Tf32OnTensorCores) {
  for (const Case& s : {Case{1, 1, 1, false, false}, Case{17, 33, 100, true, true}, Case{300, 260, 72, false, true},
                        Case{256, 384, 520, true, false}})
    check_gemm(*rt, DType::f32, DType::f32, s, 1.0, 0.0, 1, true);
  check_gemm(*rt, DType::f32, DType::f32, {64, 96, 128, false, false}, 0.5, 2.0, 3, true);
}

TEST_P(GpuGemm, AlphaBetaAndF32Output) {
  for (DType in : {DType::bf16, DType::f16}) {
    check_gemm(*rt, in, in, {96, 80, 64, false, false}, 0.5, 2.0);
    check_gemm(*rt, in, DType::f32, {96, 80, 200, false, true}, 1.0, 0.0);
    check_gemm(*rt, in, DType::f32, {33, 17, 48, true, false}, -1.5, 0.25);
  }
}

TEST_P(GpuGemm, Batched) {
  check_gemm(*rt, DType::bf16, DType::bf16, {64, 96, 128, false, false}, 1.0, 0.0, 3);
  check_gemm(*rt, DType::f16, DType::f32, {17, 40, 56, true, true}, 1.0, 1.0, 5);
  check_gemm(*rt, DType::f32, DType::f32, {33, 65, 70, false, true}, 2.0, 0.5, 2);
}

TEST_P(GpuGemm, UnalignedLeadingDimTakesTheElementPath) {
  // K = 17: rows of a are 34 bytes apart, so no 16-byte chunk loads.
  check_gemm(*rt, DType::bf16, DType::bf16, {40, 24, 17, false, false}, 1.0, 0.0);
  check_gemm(*rt, DType::f16, DType::f16, {40, 24, 17, false, true}, 1.0, 0.0);
}

TEST_P(GpuGemm, BetaZeroIgnoresNanInC) {
  const TensorSpec a(DType::bf16, {32, 64}), b(DType::bf16, {64, 48}), c(DType::bf16, {32, 48});
  const auto ah = random_matrix(DType::bf16, a.numel(), 4), bh = random_matrix(DType::bf16, b.numel(), 5);
  GpuTensor ad(a, ah), bd(b, bh), cd(c);  // c starts as NaN
  rt->launch("gemm", {cd, ad, bd});
  rt->device().synchronize();
  std::vector<std::uint8_t> want(c.nbytes());
  reference::gemm(DType::bf16, DType::bf16, ah.data(), bh.data(), want.data(), 1, 32, 48, 64, 1.0, 0.0, false, false);
  test::expect_close(DType::bf16, cd.read(), want, "c", gemm_tolerance(DType::bf16, 64));
}

TEST_P(GpuGemm, LinearWithEveryEpilogue) {
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    for (std::int64_t m : {1, 17, 300})
      for (int act : {0, 1, 2, 3})
        for (bool bias : {false, true})
          for (bool residual : {false, true}) check_linear(*rt, d, m, 136, 264, act, bias, residual);
}

TEST_P(GpuGemm, LinearResidualMayBeTheOutputItself) {
  const std::int64_t m = 64, n = 128, k = 192;
  const TensorSpec x(DType::bf16, {m, k}), w(DType::bf16, {n, k}), y(DType::bf16, {m, n});
  const auto xh = random_matrix(DType::bf16, x.numel(), 10), wh = random_matrix(DType::bf16, w.numel(), 11),
             yh = random_matrix(DType::bf16, y.numel(), 12);
  GpuTensor xd(x, xh), wd(w, wh), yd(y, yh);
  rt->launch("linear", {yd, xd, wd, Tensor{TensorSpec(), 0}, yd});  // y += x w^T
  rt->device().synchronize();
  std::vector<std::uint8_t> want(y.nbytes());
  reference::linear(DType::bf16, xh.data(), wh.data(), nullptr, yh.data(), want.data(), m, n, k, Act::none);
  test::expect_close(DType::bf16, yd.read(), want, "out", gemm_tolerance(DType::bf16, k));
}

// linear's decode form (M <= 4: gemv.cuh) at each row count and dtype: K split over 1 to 8 warps, N not a
// multiple of the block's columns, K one chunk a lane or several rounds, the whole epilogue.
TEST_P(GpuGemm, GemvAgainstTheReference) {
  struct GemvCase {
    std::int64_t m, n, k, ks;
  };
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    for (const GemvCase& c : {GemvCase{1, 37, 1032, 2}, {2, 300, 12288, 8}, {3, 9, 256, 1}, {4, 40, 8200, 8}}) {
      const std::int64_t k = c.k;
      const std::vector<Tensor> t = {{TensorSpec(d, {c.m, c.n}), 0x1000},
                                     {TensorSpec(d, {c.m, k}), 0x1000},
                                     {TensorSpec(d, {c.n, k}), 0x1000},
                                     {TensorSpec(), 0},
                                     {TensorSpec(), 0}};
      const Params p = rt->get_kernel("linear", t, {}).params();
      EXPECT_EQ(p.get_or("gemv", 0), c.m == 3 ? 4 : c.m) << p.str();
      EXPECT_EQ(p.get_or("ks", 0), c.ks) << p.str();
      check_linear(*rt, d, c.m, c.n, k, 3, true, true);
      check_linear(*rt, d, c.m, c.n, k, 0, false, false);
    }
}

// Decode shapes whose K is split over 2 or 4 warp groups, with k tiles that
// do not divide evenly among the groups (and K not a multiple of 64), on the
// sm_80 path (pinned: on Hopper the sm_90a path takes decode).
TEST_P(GpuGemm, DecodeSplitK) {
  for (auto [m, n, k] : {std::array<std::int64_t, 3>{1, 4096, 4168}, {16, 4096, 1000}, {5, 6144, 520}, {3, 200, 300}}) {
    const std::vector<Tensor> t = {{TensorSpec(DType::bf16, {m, n}), 0x1000},
                                   {TensorSpec(DType::bf16, {m, k}), 0x1000},
                                   {TensorSpec(DType::bf16, {n, k}), 0x1000}};
    const std::vector<ScalarArg> scalars = {{"trans_b", 1}, {"path", 80}};
    EXPECT_GE(rt->get_kernel("gemm", t, scalars).params().get("ks"), 2) << m << "x" << n << "x" << k << ": K is split";
    check_gemm(*rt, DType::bf16, DType::bf16, {m, n, k, false, true}, 1.0, 0.0, 1, false, 80);
    check_gemm(*rt, DType::f16, DType::f32, {m, n, k, false, true}, 0.5, 1.0, 1, false, 80);
  }
}

// The sm_90a path (TMA + wgmma, warp-specialised, persistent) on Hopper:
// tiles of 64 and 128 rows and widths from 16 to 256 (the heuristic's pick,
// each case's tile), every layout (K-major and MN-major operands), K not a
// multiple of 64 and K below one step, M and N not tile multiples, beta and
// an f32 output, batches, and linear's whole epilogue.
namespace {
struct HopperCase {
  DType in, out;
  Case shape;
  double alpha, beta;
  std::int64_t batch;
  Sm90Tile tile;  // the tile the heuristic must pick
};
const HopperCase kHopperCases[] = {{DType::bf16, DType::bf16, {1100, 1000, 136, false, true}, 1.0, 0.0, 1, {64, 160}},
                                   {DType::f16, DType::f32, {1100, 1000, 136, false, true}, 0.5, 2.0, 1, {64, 160}},
                                   {DType::bf16, DType::bf16, {1024, 4352, 72, false, true}, 1.0, 0.0, 1, {128, 144}},
                                   {DType::f16, DType::f16, {4095, 2000, 8, false, true}, -1.0, 0.0, 1, {128, 256}},
                                   {DType::f16, DType::f16, {700, 1000, 200, false, true}, 1.0, 0.5, 3, {64, 256}},
                                   // MN-major operands (read transposed by wgmma): B [K, N], A [K, M], both.
                                   {DType::bf16, DType::bf16, {1100, 1000, 136, false, false}, 1.0, 0.0, 1, {64, 192}},
                                   {DType::f16, DType::f32, {1024, 4352, 200, true, true}, 1.0, 0.5, 1, {128, 144}},
                                   {DType::bf16, DType::bf16, {1000, 1104, 72, true, false}, 2.0, 0.0, 1, {64, 192}},
                                   {DType::f16, DType::f16, {704, 1000, 200, true, false}, 1.0, 0.0, 3, {64, 256}}};
// The same features at shapes the CPU device emulates in moments (MN-major
// operands keep 16-byte aligned rows: M or N a multiple of 8).
const HopperCase kEmulatedHopperCases[] = {
    {DType::bf16, DType::bf16, {200, 300, 136, false, true}, 1.0, 0.0, 1, {64, 16}},
    {DType::f16, DType::f32, {130, 128, 136, false, true}, 0.5, 2.0, 1, {64, 16}},
    {DType::bf16, DType::bf16, {192, 1024, 72, false, true}, 1.0, 0.0, 1, {128, 16}},
    {DType::f16, DType::f16, {24, 6144, 72, false, true}, -1.0, 0.0, 1, {64, 48}},  // M > 16: decode is sm_80
    {DType::f16, DType::f16, {300, 200, 8, false, true}, -1.0, 0.0, 1, {64, 16}},
    {DType::f16, DType::f16, {140, 100, 200, false, true}, 1.0, 0.5, 3, {64, 16}},
    {DType::bf16, DType::bf16, {200, 104, 136, false, false}, 1.0, 0.0, 1, {64, 64}},
    {DType::f16, DType::f32, {128, 320, 200, true, true}, 1.0, 0.5, 1, {64, 16}},
    {DType::bf16, DType::bf16, {200, 144, 72, true, false}, 2.0, 0.0, 1, {64, 64}},
    {DType::f16, DType::f16, {136, 104, 200, true, false}, 1.0, 0.0, 3, {64, 64}}};

void check_hopper_gemm(Runtime& rt, const HopperCase& c) {
  const bool batched = c.batch > 1;
  auto shape = [&](std::int64_t r, std::int64_t cols) {
    return batched ? std::vector<std::int64_t>{c.batch, r, cols} : std::vector<std::int64_t>{r, cols};
  };
  const Case& s = c.shape;
  const std::vector<Tensor> t = {{TensorSpec(c.out, shape(s.m, s.n)), 0x1000},
                                 {TensorSpec(c.in, s.ta ? shape(s.k, s.m) : shape(s.m, s.k)), 0x1000},
                                 {TensorSpec(c.in, s.tb ? shape(s.n, s.k) : shape(s.k, s.n)), 0x1000}};
  const std::vector<ScalarArg> scalars = {{"trans_a", s.ta ? 1 : 0}, {"trans_b", s.tb ? 1 : 0}, {"beta", c.beta}};
  expect_wgmma(rt, batched ? "gemm_batched" : "gemm", t, scalars, c.tile);
  check_gemm(rt, c.in, c.out, c.shape, c.alpha, c.beta, c.batch);
}
}  // namespace

TEST_P(GpuGemm, HopperPathAgainstTheReference) {
  Runtime* h = hopper();
  if (h == nullptr) GTEST_SKIP() << "the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)";
  const bool cpu = h->device().is_cpu();
  for (const HopperCase& c : cpu ? std::span<const HopperCase>(kEmulatedHopperCases) : std::span<const HopperCase>(kHopperCases)) check_hopper_gemm(*h, c);
  const std::int64_t m = cpu ? 200 : 1000, n = cpu ? 1500 : 4352;
  const Sm90Tile tile = cpu ? Sm90Tile{64, 48} : Sm90Tile{128, 144};
  for (DType d : {DType::bf16, DType::f16}) {
    check_linear(*h, d, m, n, cpu ? 72 : 200, 0, false, false, tile);  // the plain product
    check_linear(*h, d, m, n, cpu ? 72 : 200, 3, true, true, tile);    // bias + silu + residual fused
  }
}

// One sm_90a shape: what tools/gpu_check.sh runs under compute-sanitizer racecheck.
TEST_P(GpuGemm, HopperPathOneShape) {
  Runtime* h = hopper();
  if (h == nullptr) GTEST_SKIP() << "the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)";
  check_hopper_gemm(*h, h->device().is_cpu() ? kEmulatedHopperCases[0] : kHopperCases[0]);
}

// K split over blocks (the "splits" scalar) on both paths: each split's f32 sums, then the reduce step adding
// them in split order through the epilogue. K not a multiple of a split's k tiles (the last split short, or
// empty: its sums are zeros), more splits than k tiles (clamped to them), linear's whole epilogue, gemm's alpha, beta and f32 output, batches,
// transposes, the exact f32 path; and the same bytes from a second launch (the sums meet in a fixed order).
TEST_P(GpuGemm, SplitKAgainstTheReference) {
  for (int splits : {2, 3}) {
    check_linear(*rt, DType::bf16, 17, 136, 1000, 3, true, true, {}, 80, splits);
    check_gemm(*rt, DType::bf16, DType::f32, {33, 72, 520, false, true}, 0.5, 1.0, 1, false, 80, splits);
    check_gemm(*rt, DType::f16, DType::f16, {20, 40, 300, true, false}, 1.0, 0.0, 3, false, 80, splits);
    check_gemm(*rt, DType::f32, DType::f32, {9, 24, 200, false, false}, 1.0, 0.0, 1, false, 0, splits);
  }
  const std::vector<Tensor> few_k = {{TensorSpec(DType::f16, {5, 64}), 0x1000},
                                     {TensorSpec(DType::f16, {5, 96}), 0x1000},
                                     {TensorSpec(DType::f16, {64, 96}), 0x1000},
                                     {TensorSpec(), 0},
                                     {TensorSpec(), 0}};
  const Params few = rt->get_kernel("linear", few_k, {{"path", 80}, {"splits", 16}}).params();
  EXPECT_EQ(few.get("splits"), (96 + few.get("bk") - 1) / few.get("bk")) << few.str() << ": a k tile a split at most";
  check_linear(*rt, DType::f16, 5, 64, 96, 1, true, false, {}, 80, 16);
  check_linear(*rt, DType::bf16, 17, 64, 160, 0, true, false, {}, 80, 4);  // 5 k tiles of 32 in 2, 2, 1 and none

  // The same bytes twice: a split's sums are added in split order, whichever block ends first.
  const TensorSpec x(DType::bf16, {24, 2000}), w(DType::bf16, {40, 2000}), y(DType::bf16, {24, 40});
  GpuTensor xd(x, random_matrix(DType::bf16, x.numel(), 20)), wd(w, random_matrix(DType::bf16, w.numel(), 21)), yd(y);
  const Tensor absent{TensorSpec(), 0};
  const std::vector<ScalarArg> four = {{"path", 80}, {"splits", 4}};
  rt->launch("linear", {yd, xd, wd, absent, absent}, four);
  rt->device().synchronize();
  const auto first = yd.read();
  rt->launch("linear", {yd, xd, wd, absent, absent}, four);
  rt->device().synchronize();
  EXPECT_EQ(yd.read(), first);

  Runtime* h = hopper();
  if (h == nullptr) return;  // the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)
  for (int splits : {2, 3}) {
    check_linear(*h, DType::bf16, 100, 48, 1000, 3, true, true, {}, 90, splits);
    check_gemm(*h, DType::f16, DType::f32, {72, 64, 600, true, false}, 0.5, 1.0, 2, false, 90, splits);
  }
  check_linear(*h, DType::bf16, 8, 32, 128, 0, false, false, {}, 90, 16);  // 2 k tiles: 2 splits
  check_linear(*h, DType::bf16, 70, 32, 320, 2, true, true, {}, 90, 4);    // 5 k tiles of 64 in 2, 2, 1 and none
}

namespace {
// group_gemm over `offsets` (rows of out outside every group stay poisoned;
// rows of x outside every group are NaN, which tiles read past a group's end
// and must not store) vs the reference; `wgmma`: the path the heuristic must pick.
void check_group_gemm(Runtime& rt, DType d, DType index, std::int64_t rows, std::int64_t n, std::int64_t k,
                      const std::vector<std::int64_t>& offsets, int wgmma, int path = 0) {
  SCOPED_TRACE(fmt::format("{} offsets {}, {} groups", dtype_name(d), dtype_name(index), offsets.size() - 1));
  const std::int64_t groups = std::int64_t(offsets.size()) - 1;
  const TensorSpec x(d, {rows, k}), w(d, {groups, n, k}), y(d, {rows, n}), off(index, {groups + 1});
  auto xh = random_matrix(d, x.numel(), 13);
  const auto wh = random_matrix(d, w.numel(), 14);
  const std::size_t row_bytes = std::size_t(k) * dtype_size(d);
  std::fill(xh.begin(), xh.begin() + std::ptrdiff_t(std::size_t(offsets.front()) * row_bytes), 0xff);
  std::fill(xh.begin() + std::ptrdiff_t(std::size_t(offsets.back()) * row_bytes), xh.end(), 0xff);
  GpuTensor xd(x, xh), wd(w, wh), yd(y), od(off, test::index_bytes(index, offsets));
  const std::vector<Tensor> tensors = {yd, xd, wd, od};
  const std::vector<ScalarArg> scalars = {{"path", path}};
  EXPECT_EQ(rt.get_kernel("group_gemm", tensors, scalars).params().get("wgmma"), wgmma);
  rt.launch("group_gemm", tensors, scalars);
  rt.device().synchronize();
  std::vector<std::uint8_t> want(y.nbytes(), 0xff);
  reference::group_gemm(d, xh.data(), wh.data(), offsets.data(), want.data(), groups, n, k);
  const auto got = yd.read();
  const std::size_t first = std::size_t(offsets.front() * n) * dtype_size(d),
                    last = std::size_t(offsets.back() * n) * dtype_size(d);
  EXPECT_TRUE(std::all_of(got.begin(), got.begin() + std::ptrdiff_t(first), [](auto b) { return b == 0xff; }));
  EXPECT_TRUE(std::all_of(got.begin() + std::ptrdiff_t(last), got.end(), [](auto b) { return b == 0xff; }));
  test::expect_close(
      d, std::vector<std::uint8_t>(got.begin() + std::ptrdiff_t(first), got.begin() + std::ptrdiff_t(last)),
      std::vector<std::uint8_t>(want.begin() + std::ptrdiff_t(first), want.begin() + std::ptrdiff_t(last)), "out",
      gemm_tolerance(d, k));
}

// Offsets of `groups` groups from row `first`, a quarter of them empty and the rest of 0 to `most` rows, at random.
std::vector<std::int64_t> random_groups(int groups, std::int64_t most, std::int64_t first) {
  std::vector<std::int64_t> offsets = {first};
  std::uint64_t state = 7;
  for (int g = 0; g < groups; ++g) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::int64_t size = std::int64_t(state >> 33) % 4 == 0 ? 0 : std::int64_t(state >> 40) % (most + 1);
    offsets.push_back(offsets.back() + size);
  }
  return offsets;
}
}  // namespace

TEST_P(GpuGemm, GroupGemmOverUnevenGroups) {
  // 6 groups: empty, one row, 100, all the rest, empty, 37; rows before the
  // first and after the last group stay untouched (poisoned).
  const std::vector<std::int64_t> offsets = {3, 3, 4, 104, 560, 560, 597};
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    for (DType index : {DType::i64, DType::i32}) check_group_gemm(*rt, d, index, 600, 136, 200, offsets, 0);
  // 77 groups (3 a lane of the warp that finds a block's group), sized at random from 0 to 90 rows: many
  // empty, some over a tile. Each block's group is found from the offsets, the grid bounding any split.
  const std::vector<std::int64_t> many = random_groups(77, 90, 5);
  check_group_gemm(*rt, DType::bf16, DType::i32, many.back() + 2, 40, 24, many, 0);
}

// MoE prefill on the sm_90a path: groups of 0, 1, 20 and several hundred
// rows (tiles past a group's rows skipped, rows of the next group loaded but
// never stored), untouched rows around them; and the sm_80 path on the same groups.
TEST_P(GpuGemm, HopperGroupGemm) {
  Runtime* h = hopper();
  if (h == nullptr) GTEST_SKIP() << "the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)";
  if (h->device().is_cpu()) {
    const std::vector<std::int64_t> offsets = {0, 0, 130, 140, 300, 301, 419, 420};
    for (DType d : {DType::bf16, DType::f16})
      for (DType index : {DType::i64, DType::i32}) check_group_gemm(*h, d, index, 420, 256, 72, offsets, 1, 90);
    // Rows past the last group (NaN) inside its last tile: the emulator compares operands bit for bit.
    check_group_gemm(*h, DType::bf16, DType::i64, 430, 256, 64, offsets, 1, 90);
    // 45 groups of up to 24 rows (2 a lane of the warps that find each unit's group).
    const std::vector<std::int64_t> many = random_groups(45, 24, 3);
    check_group_gemm(*h, DType::bf16, DType::i32, many.back() + 5, 64, 64, many, 1, 90);
    return;
  }
  const std::vector<std::int64_t> offsets = {0, 0, 500, 520, 1100, 1101, 1800, 2399, 2400};
  for (DType d : {DType::bf16, DType::f16})
    for (DType index : {DType::i64, DType::i32}) check_group_gemm(*h, d, index, 2400, 1536, 200, offsets, 1);
  check_group_gemm(*h, DType::bf16, DType::i64, 2400, 1536, 200, offsets, 0, 80);
}

// group_gemm's weights' gradient over the same uneven groups: the rows outside every group hold NaN in grad_out
// and x and must reach no sum; an empty group's gradient is written as zeros over poisoned memory.
namespace {
// group_gemm_weight_grad over `offsets` of `rows` (grad_out and x hold NaN in the rows outside every group, which
// must reach no sum; an empty group's gradient is written as zeros over poisoned memory) vs the reference;
// `wgmma`: the path the heuristic must pick.
void check_group_weight_grad(Runtime& rt, DType d, DType index, std::int64_t rows, std::int64_t n, std::int64_t k,
                             const std::vector<std::int64_t>& offsets, double tf32, int wgmma, int path = 0) {
  SCOPED_TRACE(fmt::format("{} offsets {} tf32 {} path {}", dtype_name(d), dtype_name(index), tf32, path));
  const std::int64_t groups = std::int64_t(offsets.size()) - 1;
  const TensorSpec g(d, {rows, n}), x(d, {rows, k}), gw(d, {groups, n, k}), off(index, {groups + 1});
  auto gh = random_matrix(d, g.numel(), 17), xh = random_matrix(d, x.numel(), 18);
  for (auto [h, cols] : {std::pair{&gh, n}, std::pair{&xh, k}}) {
    const std::size_t row_bytes = std::size_t(cols) * dtype_size(d);
    std::fill(h->begin(), h->begin() + std::ptrdiff_t(std::size_t(offsets.front()) * row_bytes), 0xff);
    std::fill(h->begin() + std::ptrdiff_t(std::size_t(offsets.back()) * row_bytes), h->end(), 0xff);
  }
  GpuTensor gd(g, gh), xd(x, xh), gwd(gw, std::vector<std::uint8_t>(gw.nbytes(), 0xff)),
      od(off, test::index_bytes(index, offsets));
  const std::vector<Tensor> tensors = {gwd, gd, xd, od};
  const std::vector<ScalarArg> scalars = {{"tf32", tf32}, {"path", path}};
  EXPECT_EQ(rt.get_kernel("group_gemm_weight_grad", tensors, scalars).params().get("wgmma"), wgmma);
  rt.launch("group_gemm_weight_grad", tensors, scalars);
  rt.device().synchronize();
  std::vector<std::uint8_t> want(gw.nbytes());
  reference::group_gemm_weight_grad(d, gh.data(), xh.data(), offsets.data(), want.data(), groups, n, k);
  std::int64_t most = 0;  // the longest sum: the largest group's rows
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i) most = std::max(most, offsets[i + 1] - offsets[i]);
  test::expect_close(d, gwd.read(), want, "grad_weight",
                     tf32 != 0 ? gemm_tolerance(DType::bf16, most) : gemm_tolerance(d, most));
}
}  // namespace

TEST_P(GpuGemm, GroupGemmWeightGradOverUnevenGroups) {
  const std::vector<std::int64_t> offsets = {3, 3, 4, 104, 560, 560, 597};
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    for (DType index : {DType::i64, DType::i32})
      for (double tf32 : {0.0, 1.0})
        if (tf32 == 0 || d == DType::f32) check_group_weight_grad(*rt, d, index, 600, 136, 200, offsets, tf32, 0);
}

// The sm_90a path over the same groups: each group's last k tile (1, 36, 8 and 37 rows) copied with cp.async and
// zeros past the group, its full ones by TMA (boxes past N = 136 and K = 200 zero-filled).
TEST_P(GpuGemm, HopperGroupGemmWeightGrad) {
  Runtime* h = hopper();
  if (h == nullptr) GTEST_SKIP() << "the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)";
  const std::vector<std::int64_t> offsets = {3, 3, 4, 104, 560, 560, 597};
  for (DType d : {DType::bf16, DType::f16})
    for (DType index : {DType::i64, DType::i32})
      check_group_weight_grad(*h, d, index, 600, 136, 200, offsets, 0, 1, 90);
}

// More batches than the sm_80 path's grid.z holds: the op's ShapeError before any launch, not the driver's.
TEST_P(GpuGemm, BatchesPastTheGridsLimitAreAClearError) {
  const TensorSpec a(DType::bf16, {70000, 1, 8}), b(DType::bf16, {70000, 8, 1}), c(DType::bf16, {70000, 1, 1});
  GpuTensor ad(a), bd(b), cd(c);
  EXPECT_EQ(test::error_of<ShapeError>([&] {
              rt->launch("gemm_batched", {cd, ad, bd}, {{"path", 80}});
            }),
            "gemm_batched: these shapes need a grid of [1, 1, 70000] blocks; CUDA takes at most 2147483647 in x "
            "and 65535 in y and z");
}

TEST_P(GpuGemm, GroupGemmDebugCheckNamesBadOffsets) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  const TensorSpec x(DType::bf16, {10, 64}), w(DType::bf16, {2, 32, 64}), y(DType::bf16, {10, 32}),
      off(DType::i64, {3});
  GpuTensor xd(x, random_matrix(DType::bf16, x.numel(), 15)), wd(w, random_matrix(DType::bf16, w.numel(), 16)), yd(y),
      od(off, test::index_bytes(DType::i64, {0, 7, 5}));
  const std::string msg = test::error_of<InvalidArgumentError>([&] { checked.launch("group_gemm", {yd, xd, wd, od}); });
  EXPECT_EQ(msg, "group_gemm: offsets[1..2] = 7, 5 are not a non-decreasing range within the 10 rows of x");
}

// Autotune's timing path: every candidate tile is compiled, launched and timed
// on the tensors themselves; the winner's result is right, and a second
// Runtime on the same cache reuses the choice without timing anything.
TEST_P(GpuGemm, AutotuneTimesEveryCandidateAndKeepsTheWinner) {
  RuntimeOptions o = options();
  o.autotune = true;
  Runtime tuned(o);
  check_linear(tuned, DType::bf16, 17, 136, 200, 3, true, false);
  EXPECT_GE(tuned.stats().compiles, 3u) << "the candidates were compiled to be timed";
  const std::vector<DiskEntryInfo> entries = DiskCache(cache.path()).list();
  ASSERT_EQ(std::count_if(entries.begin(), entries.end(),
                          [](const DiskEntryInfo& e) { return e.kind == EntryKind::tuning(); }),
            1)
      << "one tuning record, its own kind of entry";
  Runtime again(o);
  check_linear(again, DType::bf16, 17, 136, 200, 3, true, false);
  EXPECT_EQ(again.stats().compiles, 0u) << "the tuning record and the winner came from the disk cache";
}

// Autotune when a shape's first launch is captured into a CUDA graph: the candidates cannot be timed there
// (their launches would be captured too, and the thread may not wait on an event), so the capture gets the
// heuristic's choice, nothing is recorded, and the replay is right.
TEST_P(GpuGemm, AutotuneInsideAGraphCaptureKeepsTheHeuristicsChoice) {
  RuntimeOptions o = options();
  o.autotune = true;
  Runtime tuned(o);
  const DType d = DType::bf16;
  const std::int64_t m = 17, n = 136, k = 200;
  const TensorSpec x(d, {m, k}), w(d, {n, k}), y(d, {m, n});
  const auto xh = random_matrix(d, x.numel(), 6), wh = random_matrix(d, w.numel(), 7);
  GpuTensor xd(x, xh), wd(w, wh), yd(y);
  const Tensor absent{TensorSpec(), 0};
  const std::vector<Tensor> tensors{yd, xd, wd, absent, absent};
  Stream stream;
  const Graph graph = Graph::capture(stream, [&] { tuned.launch("linear", tensors, {}, stream); });
  EXPECT_EQ(tuned.stats().compiles, 1u) << "the heuristic's choice alone was compiled";
  const std::vector<DiskEntryInfo> entries = DiskCache(cache.path()).list();
  EXPECT_EQ(std::count_if(entries.begin(), entries.end(),
                          [](const DiskEntryInfo& e) { return e.kind == EntryKind::tuning(); }),
            0)
      << "no tuning record";
  graph.launch(stream);
  stream.synchronize();
  std::vector<std::uint8_t> want(y.nbytes());
  reference::linear(d, xh.data(), wh.data(), nullptr, nullptr, want.data(), m, n, k, Act(0));
  test::expect_close(d, yd.read(), want, "out", gemm_tolerance(d, k));
}

INSTANTIATE_TEST_SUITE_P(Compilers, GpuGemm, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
