// layer_norm: params and errors without a GPU, the CPU reference against facts that do not
// depend on it, and the device output against the reference (the GPU, or the CPU device).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mojo/perf_model.hpp"
#include "mojo/runtime.hpp"
#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(LayerNormOp, StatsAreOptionalButComeInPairs) {
  EXPECT_EQ(params("layer_norm", DType::f16, "x=8x4096").get("stats"), 0);
  EXPECT_EQ(params("layer_norm", DType::f16, "x=8x4096 mean=8 rstd=8").get("stats"), 1);
  EXPECT_EQ(error_of<ShapeError>([] { params("layer_norm", DType::f16, "x=8x4096 mean=8"); }),
            "layer_norm: give both mean and rstd, or neither");
  EXPECT_EQ(error_of<ShapeError>([] { params("layer_norm", DType::f16, "x=8x4096 mean=7 rstd=8"); }),
            "layer_norm: mean is f32[7]; expected a contiguous f32 tensor of 8 elements (one per row)");
  EXPECT_EQ(error_of<ShapeError>([] { params("layer_norm", DType::f16, "x=8x4096 bias=4095"); }),
            "layer_norm: bias has shape [4095]; expected [4096] (the last dim of x)");
}

// Issue 28: the norms' blocks fill an SM's warp slots (two vectors of a row a thread, launch bounds asking
// for a full SM, 32 registers and no spills), so that 4096 rows of 4096 fill 0.97 of their last wave on
// the H100 by the performance model. Before: 12 (rms_norm) and 10 (layer_norm) blocks of 128 an SM, 0.86
// and 0.78 of the last wave; measured 85% and 79% of copy bandwidth (2026-11-24); 16,384 rows, 0.94 by
// the model, measured 95%. NVRTC cubins for sm_90a, each dtype, the hidden sizes of common models.
TEST(Norms, FillEveryWarpSlotOfAnSm) {
  RuntimeOptions o;
  o.disk_cache = false;
  Runtime rt(o);
  const Target sm90a = Target::parse("sm_90a");
  const SmLimits limits = sm_limits(sm90a);
  for (const char* name : {"rms_norm", "add_rms_norm", "layer_norm"})
    for (DType dtype : {DType::bf16, DType::f16, DType::f32})
      for (std::int64_t hidden : {1024, 2048, 3072, 4096, 5120, 8192}) {
        SCOPED_TRACE(fmt::format("{} {} hidden {}", name, dtype_name(dtype), hidden));
        const OpDef& op = find_op(name);
        const auto t = example(op, dtype, fmt::format("x=4096x{}", hidden));
        const Params p = op.specialize(t, {}, sm90a);
        const Artifact cubin = rt.compile(name, t, {}, sm90a, Emit::cubin);
        EXPECT_EQ(cubin.resources.stack_bytes, 0u) << "no spills";
        const LaunchGeometry g = op.geometry(p, t);
        const unsigned threads = g.block.x;
        const Occupancy occ = occupancy(limits, threads, cubin.resources.registers,
                                        cubin.resources.static_shared_bytes, g.grid.x, limits.sm_count);
        if (2048 % threads == 0) {
          EXPECT_EQ(occ.blocks_per_sm * int(threads), 2048) << threads << " threads, " << cubin.resources.registers
                                                             << " registers";
        }
        if (hidden == 4096)
          EXPECT_GE(wave_fill(g.grid.x, std::uint64_t(occ.blocks_per_sm) * limits.sm_count), 0.95);
      }
}

// Rows whose columns fit a thread's registers: a plan of two steps, the rows over one wave of blocks (three
// blocks of 256 an SM, 132 SMs; fewer when there are fewer rows) writing a partial each, then 32 columns a
// block adding them. Wider rows: row blocks, then 32-column blocks reading the rows again.
TEST(LayerNormBackwardOp, PartialsPlanOrRowAndColumnBlocks) {
  const OpDef& op = find_op("layer_norm_backward");
  auto t = example(op, DType::bf16, "x=100x4096");
  Params p = op.specialize(t, {}, kSm90);
  EXPECT_EQ(p.str(), "dtype=bf16 hidden=4096 vec=8 threads=256 rows=1 partials=1 min_blocks=3 max_parts=396");
  const std::vector<Params> steps = op.plan(p);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(op.geometry(steps[0], t).grid.x, 100u) << "a block a row: fewer rows than SMs";
  EXPECT_EQ(op.geometry(steps[0], t).block.x, 256u);
  EXPECT_EQ(op.geometry(steps[1], t).grid.x, 4096u / 32u);
  EXPECT_EQ(op.workspace_bytes(p, t), 2u * 100 * 4096 * 4) << "grad_weight's and grad_bias's partial of each block";
  auto blocks = [&](const char* shapes, const Target& target = kSm90) {
    t = example(op, DType::bf16, shapes);
    return op.geometry(op.plan(op.specialize(t, {}, target))[0], t).grid.x;
  };
  EXPECT_EQ(blocks("x=16384x4096"), 396u) << "a wave: 3 blocks on each of 132 SMs, 41 or 42 rows each";
  EXPECT_EQ(blocks("x=4096x4096"), 256u) << "16 rows a block (the partials would cost more than the rows)";
  EXPECT_EQ(blocks("x=1000x4096"), 132u) << "at least a block an SM";
  EXPECT_EQ(blocks("x=16384x4096", Target::parse("sm_80")), 324u) << "the A100's 108 SMs";
  EXPECT_EQ(op.specialize(example(op, DType::bf16, "x=4096x1024"), {}, kSm90).str(),
            "dtype=bf16 hidden=1024 vec=8 threads=32 rows=8 partials=2 min_blocks=2 max_parts=264")
      << "narrow rows: 8 a block, 4 vectors a thread: 64 sums and 32 registers of x and grad_out, the weight "
         "read again at each row (ptxas spilled 8 bytes when it held it at 128 registers: 2 blocks an SM)";
  EXPECT_EQ(op.specialize(example(op, DType::bf16, "x=8x16384"), {}, kSm90).get("partials"), 2)
      << "32 bf16 columns a thread";

  t = example(op, DType::bf16, "x=100x20000");
  p = op.specialize(t, {}, kSm90);
  EXPECT_EQ(p.get("partials"), 0) << "40 columns a thread: too many registers";
  EXPECT_EQ(op.specialize(example(op, DType::f32, "x=8x16384"), {}, kSm90).get("partials"), 0)
      << "32 f32 columns a thread, and their vectors of x and grad_out: too many registers";
  EXPECT_EQ(p.get("min_blocks"), 1);
  const std::vector<Params> wide = op.plan(p);
  ASSERT_EQ(wide.size(), 2u);
  EXPECT_EQ(op.geometry(wide[0], t).grid.x, 100u) << "a block a row";
  EXPECT_EQ(op.geometry(wide[1], t).grid.x, 20000u / 32u) << "then 625 blocks of 32 columns";
  EXPECT_EQ(op.geometry(wide[1], t).block.x, 256u);
  EXPECT_EQ(op.workspace_bytes(p, t), 0u) << "the column step reads the forward's mean and rstd";
}

TEST(Reference, LayerNormBackwardMatchesFiniteDifferences) {
  // loss = sum(out * g) for a fixed g: d loss / d x, w, b by central differences.
  const std::int64_t rows = 3, hidden = 5;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(rows * hidden), w(hidden), b(hidden), g(rows * hidden);
  for (auto* v : {&x, &w, &b, &g})
    for (float& f : *v) f = u(rng);
  auto loss = [&](const std::vector<float>& xs, const std::vector<float>& ws, const std::vector<float>& bs) {
    std::vector<float> out(x.size());
    reference::layer_norm(DType::f32, xs.data(), ws.data(), bs.data(), out.data(), nullptr, nullptr, rows, hidden,
                          1e-5);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += double(out[i]) * g[i];
    return l;
  };
  std::vector<float> out(x.size()), mean(rows), rstd(rows), dx(x.size()), dw(hidden), db(hidden);
  reference::layer_norm(DType::f32, x.data(), w.data(), b.data(), out.data(), mean.data(), rstd.data(), rows, hidden,
                        1e-5);
  reference::layer_norm_backward(DType::f32, g.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(),
                                 dw.data(), db.data(), rows, hidden);
  const float h = 1e-2f;
  auto numeric = [&](std::vector<float>& v, std::size_t i) {
    const float keep = v[i];
    v[i] = keep + h;
    const double up = loss(x, w, b);
    v[i] = keep - h;
    const double down = loss(x, w, b);
    v[i] = keep;
    return (up - down) / (2 * h);
  };
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dx[i], numeric(x, i), 2e-3) << "x " << i;
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(dw[i], numeric(w, i), 2e-3) << "w " << i;
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(db[i], numeric(b, i), 2e-3) << "b " << i;
}

struct LayerNormGpu : GpuOps {};

TEST_P(LayerNormGpu, LayerNormWithAndWithoutMeanAndRstd) {
  for (DType d : kFloatTypes)
    for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{2, 4097}, Rows{4, 4096}, Rows{1, 151936}})
      for (bool stats : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} stats={}", dtype_name(d), str(s), stats));
        const std::int64_t n = s.rows * s.cols;
        const TensorSpec x(d, {s.rows, s.cols}), v(d, {s.cols}), st(DType::f32, {s.rows});
        const auto xh = random_tensor(d, n, 4), wh = random_tensor(d, s.cols, 5), bh = random_tensor(d, s.cols, 6);
        GpuTensor out(x), xin(x, xh), weight(v, wh), bias(v, bh), mean(st), rstd(st);
        const Tensor absent{TensorSpec(), 0};
        rt->launch("layer_norm",
                   {out, stats ? mean.tensor() : absent, stats ? rstd.tensor() : absent, xin, weight, bias},
                   {{"eps", 1e-5f}});
        sync();
        std::vector<std::uint8_t> want(x.nbytes());
        std::vector<float> want_mean(std::size_t(s.rows)), want_rstd(std::size_t(s.rows));
        reference::layer_norm(d, xh.data(), wh.data(), bh.data(), want.data(), want_mean.data(), want_rstd.data(),
                              s.rows, s.cols, 1e-5);
        test::expect_close(d, out.read(), want, "out");
        if (stats) {
          test::expect_close(DType::f32, mean.read(), reference::encode(DType::f32, want_mean), "mean");
          test::expect_close(DType::f32, rstd.read(), reference::encode(DType::f32, want_rstd), "rstd");
        } else {
          EXPECT_EQ(mean.read(), std::vector<std::uint8_t>(st.nbytes(), 0xff)) << "absent mean: nothing written";
        }
        EXPECT_EQ(xin.read(), xh);
      }
}

TEST_P(LayerNormGpu, LayerNormBackwardIsCorrectAndDeterministic) {
  for (DType d : kFloatTypes)
    // Narrow rows (several a block), rows over one block each, 140 rows over a wave of 132 blocks (some take
    // two), rows whose weight is read again at each row (12288 f32, 16384 16-bit columns; and 1024 16-bit
    // ones, 8 a block), and 20000 columns (the wide rows' form).
    for (Rows s : {Rows{1, 2}, Rows{3, 31}, Rows{7, 4097}, Rows{64, 4096}, Rows{1000, 64}, Rows{140, 4100},
                   Rows{3, d == DType::f32 ? 12288 : 16384}, Rows{20, 1024}, Rows{3, 20000}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d), str(s)));
      const std::int64_t n = s.rows * s.cols;
      const TensorSpec x(d, {s.rows, s.cols}), v(d, {s.cols}), st(DType::f32, {s.rows});
      const auto xh = random_tensor(d, n, 7), gh = random_tensor(d, n, 8), wh = random_tensor(d, s.cols, 9);
      // mean and rstd as the forward pass made them.
      std::vector<std::uint8_t> y(x.nbytes());
      const auto zero_bias = reference::encode(d, std::vector<float>(std::size_t(s.cols), 0.f));
      std::vector<float> mean_h(std::size_t(s.rows)), rstd_h(std::size_t(s.rows));
      reference::layer_norm(d, xh.data(), wh.data(), zero_bias.data(), y.data(), mean_h.data(), rstd_h.data(), s.rows,
                            s.cols, 1e-5);
      const auto mean_bytes = reference::encode(DType::f32, mean_h), rstd_bytes = reference::encode(DType::f32, rstd_h);
      GpuTensor grad_out(x, gh), xin(x, xh), weight(v, wh), mean(st, mean_bytes), rstd(st, rstd_bytes);
      std::vector<std::uint8_t> first_weight_grad;
      for (int run = 0; run < 2; ++run) {
        GpuTensor grad_x(x), grad_weight(v), grad_bias(v);
        rt->launch("layer_norm_backward", {grad_x, grad_weight, grad_bias, grad_out, xin, weight, mean, rstd});
        sync();
        std::vector<std::uint8_t> want_x(x.nbytes()), want_w(v.nbytes()), want_b(v.nbytes());
        reference::layer_norm_backward(d, gh.data(), xh.data(), wh.data(), mean_h.data(), rstd_h.data(), want_x.data(),
                                       want_w.data(), want_b.data(), s.rows, s.cols);
        double terms = 0;  // the largest rstd |grad_out * weight|
        for (std::int64_t i = 0; i < n; ++i)
          terms = std::max(terms, double(rstd_h[std::size_t(i / s.cols)]) *
                                      std::abs(reference::load(d, gh.data(), std::size_t(i)) *
                                               reference::load(d, wh.data(), std::size_t(i % s.cols))));
        test::expect_close(d, grad_x.read(), want_x, "grad_x", cancelling_tolerance(d, terms, want_x));
        const Tolerance sums = column_sum_tolerance(d, s.rows);
        test::expect_close(d, grad_weight.read(), want_w, "grad_weight", sums);
        test::expect_close(d, grad_bias.read(), want_b, "grad_bias", sums);
        if (run == 0)
          first_weight_grad = grad_weight.read();
        else
          EXPECT_EQ(grad_weight.read(), first_weight_grad) << "grad_weight differs between two runs";
      }
      EXPECT_EQ(mean.read(), mean_bytes);
    }
}

INSTANTIATE_TEST_SUITE_P(Compilers, LayerNormGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });

// Both norms' backward row steps keep a thread's data in registers only where it fits (norm_backward.cpp's
// count of them): no stack at the widths where each form starts and ends, f32 and bf16, with add_rms_norm's
// residual too.
struct NormBackwardCompiles : ::testing::TestWithParam<std::string> {};

TEST_P(NormBackwardCompiles, RowsDoNotSpill) {
  Runtime rt(memory_only(GetParam()));
  for (const char* op : {"layer_norm_backward", "rms_norm_backward"})
    for (DType d : {DType::f32, DType::bf16})
      for (std::int64_t cols : {1024, 3072, 5120, 12288, 16384, 20480, 24576, 32768, 65536}) {
        const std::string shapes = fmt::format("x=64x{}", cols) +
                                   (std::string_view(op) == "rms_norm_backward" && cols == 20480
                                        ? fmt::format(" grad_residual=64x{}", cols)
                                        : "");
        const std::vector<Tensor> t = example(find_op(op), d, shapes);
        const Artifact a = rt.compile(op, t, {}, kSm90, Emit::cubin);
        EXPECT_EQ(a.resources.stack_bytes, 0u) << op << " " << a.params.str();
      }
}

INSTANTIATE_TEST_SUITE_P(Compilers, NormBackwardCompiles, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
