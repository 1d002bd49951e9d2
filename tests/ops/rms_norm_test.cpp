// rms_norm's OpDef: params derived from specs and alignment, and every bad
// input rejected with a message that names the problem; add_rms_norm and
// rms_norm_backward against the reference on the device.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mojo/error.hpp"
#include "mojo/op.hpp"
#include "mojo/runtime.hpp"
#include "op_test_util.hpp"
#include "rms_norm_args.h"
#include "test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

namespace {
const OpDef& op() { return find_op("rms_norm"); }

std::vector<Tensor> args(DType d, std::int64_t rows, std::int64_t hidden, DevicePtr base = 0) {
  TensorSpec x(d, {rows, hidden}), w(d, {hidden});
  return {{x, base ? base : 0}, {x, base ? base + 0x100000 : 0}, {w, base ? base + 0x200000 : 0}};
}
Params params(DType d, std::int64_t rows, std::int64_t hidden, DevicePtr base = 0) {
  return op().specialize(args(d, rows, hidden, base), {}, kSm90);
}
}  // namespace

TEST(RmsNormOp, HiddenIsACompileTimeParamAndVectorsAre16Bytes) {
  Params p = params(DType::bf16, 4096, 4096);
  EXPECT_EQ(p.str(), "dtype=bf16 hidden=4096 vec=8 threads=256 rows=1");
  EXPECT_EQ(params(DType::f32, 4096, 4096).get("vec"), 4);
  EXPECT_EQ(op().kernel_name(p), "rms_norm_bf16_hidden_4096_vec_8_threads_256_rows_1");
  EXPECT_EQ(op().entry_line(p),
            "struct rms_norm_bf16_hidden_4096_vec_8_threads_256_rows_1_p { using dtype = mojo::bf16; "
            "static constexpr int hidden = 4096, vec = 8, threads = 256, rows = 1; };\n"
            "MOJO_KERNEL_rms_norm(rms_norm_bf16_hidden_4096_vec_8_threads_256_rows_1, "
            "rms_norm_bf16_hidden_4096_vec_8_threads_256_rows_1_p)");
}

// The template reads its params by name: one it misspells (or one the op
// stops giving) is a compile error that names it, not a silent swap.
TEST(RmsNormOp, AParamTheTemplateMisspellsIsACompileErrorNamingIt) {
  test::TempDir dir;
  ASSERT_EQ(test::write_template_variant(dir.path(), "rms_norm.cu", "P::hidden, P::vec, P::threads, P::rows, false",
                                         "P::hiden, P::vec, P::threads, P::rows, false"),
            1);
  RuntimeOptions o;
  o.disk_cache = false;
  o.template_paths = {dir.path()};
  Runtime rt(o);
  const std::string msg =
      error_of<CompileError>([&] { rt.compile("rms_norm", args(DType::bf16, 4, 4096), {}, kSm90, Emit::ptx); });
  EXPECT_NE(msg.find("hiden"), std::string::npos) << msg;
}

TEST(RmsNormOp, RowCountDoesNotChangeTheSpecialization) {
  EXPECT_EQ(params(DType::f16, 1, 5120), params(DType::f16, 16384, 5120));
}

TEST(RmsNormOp, OddHiddenSizesFallBackToNarrowerVectors) {
  EXPECT_EQ(params(DType::bf16, 3, 127).get("vec"), 1);
  EXPECT_EQ(params(DType::bf16, 3, 8200).get("vec"), 8);
  EXPECT_EQ(params(DType::bf16, 3, 8198).get("vec"), 2);
  EXPECT_EQ(params(DType::f32, 3, 1).get("vec"), 1);
}

TEST(RmsNormOp, NarrowRowsShareABlock) {
  Params p = params(DType::f32, 3, 1);
  EXPECT_EQ(p.get("threads"), 1);
  EXPECT_EQ(p.get("rows"), 128);
  Params q = params(DType::f16, 3, 127);  // 127 vectors of 1, two a thread
  EXPECT_EQ(q.get("threads"), 64);
  EXPECT_EQ(q.get("rows"), 1);
  Params r = params(DType::f16, 3, 63);  // 63 vectors of 1: one warp a row, four rows a block
  EXPECT_EQ(r.get("threads"), 32);
  EXPECT_EQ(r.get("rows"), 4);
}

// Two vectors a thread (rows::kNormVectorsPerThread), up to 1024 threads.
TEST(RmsNormOp, WideRowsUseUpTo1024Threads) {
  EXPECT_EQ(params(DType::f32, 1, 4096).get("threads"), 512);
  EXPECT_EQ(params(DType::f32, 1, 8192).get("threads"), 1024);
  EXPECT_EQ(params(DType::f32, 1, 1 << 20).get("threads"), 1024);
}

TEST(RmsNormOp, MisalignedPointerGetsNarrowerVectors) {
  // 0x1000002 is only 2-byte aligned: a bf16 kernel must load one element at a time.
  TensorSpec x(DType::bf16, {4, 4096}), w(DType::bf16, {4096});
  std::vector<Tensor> t = {{x, 0x1000000}, {x, 0x2000002}, {w, 0x3000000}};
  EXPECT_EQ(op().specialize(t, {}, kSm90).get("vec"), 1);
  t[1].data = 0x2000008;  // 8-byte aligned: 4 bf16 per load
  EXPECT_EQ(op().specialize(t, {}, kSm90).get("vec"), 4);
}

TEST(RmsNormOp, GeometryCoversEveryRow) {
  auto t = args(DType::f32, 4097, 4096);
  LaunchGeometry g = op().geometry(op().specialize(t, {}, kSm90), t);
  EXPECT_EQ(g.grid.x, 4097u);
  EXPECT_EQ(g.block.x, 512u);
  auto narrow = args(DType::f32, 1000, 1);
  g = op().geometry(op().specialize(narrow, {}, kSm90), narrow);
  EXPECT_EQ(g.grid.x, 8u);  // ceil(1000 / 128)
  EXPECT_EQ(g.block.x, 128u);
}

TEST(RmsNormOp, AnyRankFlattensLeadingDims) {
  TensorSpec x(DType::bf16, {2, 3, 5, 64}), w(DType::bf16, {64});
  std::vector<Tensor> t = {{x}, {x}, {w}};
  LaunchGeometry g = op().geometry(op().specialize(t, {}, kSm90), t);
  Params p = op().specialize(t, {}, kSm90);
  EXPECT_EQ(p.get("hidden"), 64);
  EXPECT_EQ(std::int64_t(g.grid.x) * p.get("rows"), 32) << "30 rows, 4 per block -> 8 blocks";
}

TEST(RmsNormOp, PacksOneArgsStruct) {
  auto t = args(DType::f16, 10, 256, 0x7000000);
  Params p = op().specialize(t, {}, kSm90);
  KernelArgs a;
  op().pack_args(p, t, {{"eps", 1e-5f}}, {}, a);
  const auto& args = packed<mojo_rms_norm::Args<void>>(a);
  EXPECT_EQ(args.out, ptr(0x7000000));
  EXPECT_EQ(args.residual, nullptr) << "rms_norm has no residual";
  EXPECT_EQ(args.x, ptr(0x7100000));
  EXPECT_EQ(args.weight, ptr(0x7200000));
  EXPECT_FLOAT_EQ(args.eps, 1e-5f);
  EXPECT_EQ(args.rows, 10);
  EXPECT_EQ(args.out_stride, 256);
  EXPECT_EQ(args.x_stride, 256);
  KernelArgs d;
  op().pack_args(p, t, {}, {}, d);
  EXPECT_FLOAT_EQ(packed<mojo_rms_norm::Args<void>>(d).eps, 1e-6f) << "eps defaults to 1e-6";
}

TEST(RmsNormOp, DTypeErrors) {
  TensorSpec x(DType::bf16, {4, 64}), w16(DType::f16, {64}), xi(DType::i32, {4, 64});
  std::string msg = error_of<DTypeError>([&] { op().specialize({{x}, {x}, {w16}}, {}, kSm90); });
  EXPECT_EQ(msg, "rms_norm: weight has dtype f16 but x has dtype bf16; they must match");
  msg = error_of<DTypeError>([&] { op().specialize({{xi}, {xi}, {TensorSpec(DType::i32, {64})}}, {}, kSm90); });
  EXPECT_EQ(msg, "rms_norm: x has dtype i32; supported: f32, f16, bf16");
}

TEST(RmsNormOp, ShapeErrors) {
  TensorSpec x(DType::f32, {4, 64}), out(DType::f32, {4, 32}), w(DType::f32, {64}), w2(DType::f32, {63});
  EXPECT_EQ(error_of<ShapeError>([&] {
              op().specialize({{out}, {x}, {w}}, {}, kSm90);
            }),
            "rms_norm: out has shape [4, 32] but x has shape [4, 64]; they must match");
  EXPECT_EQ(error_of<ShapeError>([&] {
              op().specialize({{x}, {x}, {w2}}, {}, kSm90);
            }),
            "rms_norm: weight has shape [63]; expected [64] (the last dim of x)");
  TensorSpec empty_rows(DType::f32, {4, 0});
  EXPECT_NE(error_of<ShapeError>([&] {
              op().specialize({{empty_rows}, {empty_rows}, {TensorSpec(DType::f32, {0})}}, {}, kSm90);
            }).find("rms_norm: the last dim of x is 0; supported: 1 to"),
            std::string::npos);
}

TEST(RmsNormOp, StridedRowsAreTakenOverlappingOrScatteredAreNot) {
  std::int64_t shape[] = {4, 64}, strides[] = {128, 1};
  TensorSpec strided(DType::f32, shape, strides), x(DType::f32, {4, 64}), w(DType::f32, {64});
  std::vector<Tensor> t = {{x, 0x7000000}, {strided, 0x7100000}, {w, 0x7200000}};
  Params p = op().specialize(t, {}, kSm90);
  KernelArgs a;
  op().pack_args(p, t, {}, {}, a);
  EXPECT_EQ(packed<mojo_rms_norm::Args<void>>(a).out_stride, 64);
  EXPECT_EQ(packed<mojo_rms_norm::Args<void>>(a).x_stride, 128);
  // A row stride of 66 floats leaves odd rows 8-byte aligned: vec 2, not 4.
  std::int64_t odd_strides[] = {66, 1};
  TensorSpec odd(DType::f32, shape, odd_strides);
  EXPECT_EQ(op().specialize({{x}, {odd}, {w}}, {}, kSm90).get("vec"), 2);

  std::int64_t overlap_strides[] = {32, 1}, column_strides[] = {1, 4};
  TensorSpec overlap(DType::f32, shape, overlap_strides), column(DType::f32, shape, column_strides);
  EXPECT_EQ(error_of<ShapeError>([&] {
              op().specialize({{x}, {overlap}, {w}}, {}, kSm90);
            }),
            "rms_norm: x f32[4, 64] strides [32, 1] has strides this op cannot take: the last dim needs unit stride "
            "and the rows an even stride of at least the row length");
  EXPECT_NE(error_of<ShapeError>([&] {
              op().specialize({{x}, {column}, {w}}, {}, kSm90);
            }).find("cannot take"),
            std::string::npos);
}

TEST(RmsNormOp, NullAndMisalignedPointersAreRejectedAtLaunch) {
  auto t = args(DType::bf16, 4, 4096, 0x7000000);
  Params p = op().specialize(t, {}, kSm90);
  KernelArgs a;
  t[2].data = 0;
  EXPECT_EQ(error_of<PointerError>([&] { op().pack_args(p, t, {}, {}, a); }), "rms_norm: weight is a null pointer");
  t[2].data = 0x7200004;  // the vec=8 kernel needs 16-byte alignment
  EXPECT_EQ(error_of<PointerError>([&] { op().pack_args(p, t, {}, {}, a); }),
            "rms_norm: weight at 0x7200004 is not 16-byte aligned as this kernel needs");
}

TEST(RmsNormOp, WrongArgumentCountsAndScalars) {
  TensorSpec x(DType::f32, {4, 64});
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              op().specialize({{x}, {x}}, {}, kSm90);
            }),
            "rms_norm takes 3 tensors (out, x, weight), got 2");
  auto t = args(DType::f32, 4, 64);
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              op().specialize(t, {{"epsilon", 1e-5}}, kSm90);
            }),
            "rms_norm: unknown scalar 'epsilon'; it takes: eps");
}

TEST(Ops, UnknownOpListsTheKnownOnes) {
  EXPECT_EQ(error_of<UnknownOpError>([] { find_op("rmsnorm"); }),
            "unknown op 'rmsnorm'; known ops: rms_norm, add_rms_norm, rms_norm_backward, layer_norm, "
            "layer_norm_backward, softmax, "
            "log_softmax, softmax_backward, silu, gelu, swiglu, gelu_and_mul, rotary_embedding, embedding, "
            "store_kv_cache, gemm, gemm_batched, linear, group_gemm, group_gemm_weight_grad, sdpa, sdpa_backward, "
            "paged_prefill_gqa, "
            "paged_decode_gqa, "
            "apply_penalties_temperature, sample, reject_sample, moe_gate, moe_dispatch, moe_combine, moe_mlp, "
            "linear_cross_entropy, linear_cross_entropy_backward");
}

TEST(AddRmsNormOp, ResidualIsInOutAndShapesMustMatch) {
  Params p = params("add_rms_norm", DType::bf16, "x=32x4096");
  EXPECT_EQ(p.str(), "dtype=bf16 hidden=4096 vec=8 threads=256 rows=1");
  EXPECT_EQ(find_op("add_rms_norm").tensor_args()[1].role, "inout");
  EXPECT_EQ(error_of<ShapeError>([] { params("add_rms_norm", DType::bf16, "x=32x4096 residual=32x4095"); }),
            "add_rms_norm: residual has shape [32, 4095] but x has shape [32, 4096]; they must match");
}

// layer_norm_backward's plan (norm_backward.cu) with one column sum instead of two: rows up to twice as
// wide keep theirs in registers. Wider rows: row blocks that also write each row's rstd, then column blocks.
TEST(RmsNormBackwardOp, PartialsPlanOrRowsThenColumns) {
  const OpDef& op = find_op("rms_norm_backward");
  auto t = example(op, DType::bf16, "x=100x4096");
  Params p = op.specialize(t, {}, kSm90);
  EXPECT_EQ(p.str(),
            "dtype=bf16 hidden=4096 vec=8 threads=256 rows=1 partials=1 min_blocks=3 max_parts=396 residual=0");
  std::vector<Params> steps = op.plan(p);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(op.geometry(steps[0], t).grid.x, 100u) << "a block a row: fewer rows than SMs";
  EXPECT_EQ(op.geometry(steps[1], t).grid.x, 4096u / 32u);
  EXPECT_EQ(op.workspace_bytes(p, t), 100u * 4096 * 4) << "grad_weight's partial of each block";
  t = example(op, DType::bf16, "x=16384x4096");
  EXPECT_EQ(op.geometry(op.plan(op.specialize(t, {}, kSm90))[0], t).grid.x, 396u) << "a wave: 3 blocks an SM (80 registers)";
  EXPECT_EQ(params("rms_norm_backward", DType::bf16, "x=100x4096 grad_residual=100x4096").get("residual"), 1);
  EXPECT_EQ(params("rms_norm_backward", DType::f32, "x=8x12288").get("partials"), 2)
      << "24 f32 columns a thread: 24 sums, 48 registers of grad_out and x and 48 more (4 a vector): the weight "
         "is read again at each row";
  EXPECT_EQ(params("rms_norm_backward", DType::bf16, "x=8x20480").get("partials"), 2) << "40 bf16 columns a thread";
  EXPECT_EQ(params("rms_norm_backward", DType::f32, "x=8x16384").get("partials"), 0)
      << "32 f32 columns a thread: 152 registers without the weight (ptxas spilled 72 bytes at 128)";

  t = example(op, DType::bf16, "x=3x40000");
  p = op.specialize(t, {}, kSm90);
  EXPECT_EQ(p.get("partials"), 0) << "80 columns a thread: too many registers";
  steps = op.plan(p);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(op.geometry(steps[0], t).grid.x, 3u) << "a block a row";
  EXPECT_EQ(op.geometry(steps[1], t).grid.x, 40000u / 32u) << "then 1250 blocks of 32 columns";
  EXPECT_EQ(op.workspace_bytes(p, t), 3u * 4) << "each row's rstd, for the column step";
}

TEST(RmsNormBackwardOp, GradResidualMustMatchX) {
  EXPECT_EQ(error_of<ShapeError>([] { params("rms_norm_backward", DType::bf16, "x=8x4096 grad_residual=8x4095"); }),
            "rms_norm_backward: grad_residual has shape [8, 4095] but x has shape [8, 4096]; they must match");
  const OpDef& op = find_op("rms_norm_backward");
  auto t = example(op, DType::bf16, "x=8x4096 grad_residual=8x4096");
  t[5].spec = TensorSpec(DType::f16, {8, 4096});
  EXPECT_EQ(error_of<DTypeError>([&] { op.specialize(t, {}, kSm90); }),
            "rms_norm_backward: grad_residual has dtype f16 but x has dtype bf16; they must match");
}

TEST(Reference, RmsNormBackwardMatchesFiniteDifferences) {
  // add_rms_norm: h = residual + x, out = rms_norm(h); loss = sum(out * g) + sum(h * gr) for fixed g and gr,
  // so d loss / d x = rms_norm_backward(g, h) + gr. Without the residual, rms_norm's: loss = sum(out * g).
  const std::int64_t rows = 3, hidden = 5;
  const double eps = 1e-5;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(rows * hidden), r(x.size()), w(hidden), g(x.size()), gr(x.size());
  for (auto* v : {&x, &r, &w, &g, &gr})
    for (float& f : *v) f = u(rng);
  for (bool residual : {false, true}) {
    SCOPED_TRACE(residual ? "add_rms_norm" : "rms_norm");
    auto loss = [&](const std::vector<float>& xs, const std::vector<float>& ws) {
      std::vector<float> h = r, out(x.size());
      if (residual)
        reference::add_rms_norm(DType::f32, h.data(), xs.data(), ws.data(), out.data(), rows, hidden, eps);
      else
        reference::rms_norm(DType::f32, xs.data(), ws.data(), out.data(), rows, hidden, eps);
      double l = 0;
      for (std::size_t i = 0; i < out.size(); ++i) l += double(out[i]) * g[i] + (residual ? double(h[i]) * gr[i] : 0);
      return l;
    };
    std::vector<float> h = x, dx(x.size()), dw(hidden);
    if (residual)
      for (std::size_t i = 0; i < h.size(); ++i) h[i] += r[i];
    reference::rms_norm_backward(DType::f32, g.data(), h.data(), w.data(), residual ? gr.data() : nullptr, dx.data(),
                                 dw.data(), rows, hidden, eps);
    const float step = 1e-2f;
    auto numeric = [&](std::vector<float>& v, std::size_t i) {
      const float keep = v[i];
      v[i] = keep + step;
      const double up = loss(x, w);
      v[i] = keep - step;
      const double down = loss(x, w);
      v[i] = keep;
      return (up - down) / (2 * step);
    };
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dx[i], numeric(x, i), 2e-3) << "x " << i;
    for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(dw[i], numeric(w, i), 2e-3) << "w " << i;
  }
}

struct RmsNormGpu : GpuOps {};

TEST_P(RmsNormGpu, RmsNormBackwardIsCorrectAndDeterministic) {
  const Tensor absent{TensorSpec(), 0};
  for (DType d : kFloatTypes)
    // Narrow rows (several a block), rows over one block each, 140 rows over a wave of blocks (some take two),
    // rows whose weight is read again at each row (12288 f32, 20480 16-bit columns), and 40000 columns (the
    // wide rows' form).
    for (Rows s : {Rows{1, 2}, Rows{3, 31}, Rows{7, 4097}, Rows{1000, 64}, Rows{140, 4100},
                   Rows{3, d == DType::f32 ? 12288 : 20480}, Rows{3, 40000}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d), str(s)));
      const std::int64_t n = s.rows * s.cols;
      const TensorSpec x(d, {s.rows, s.cols}), v(d, {s.cols});
      const auto xh = random_tensor(d, n, 7), gh = random_tensor(d, n, 8), wh = random_tensor(d, s.cols, 9);
      const auto residual_h = random_tensor(d, n, 10);
      double terms = 0;  // the largest rstd |grad_out * weight|
      for (std::int64_t r = 0; r < s.rows; ++r) {
        double sum_sq = 0, largest = 0;
        for (std::int64_t c = 0; c < s.cols; ++c) {
          const std::size_t i = std::size_t(r * s.cols + c);
          sum_sq += std::pow(reference::load(d, xh.data(), i), 2);
          largest = std::max(largest, double(std::abs(reference::load(d, gh.data(), i) *
                                                      reference::load(d, wh.data(), std::size_t(c)))));
        }
        terms = std::max(terms, largest / std::sqrt(sum_sq / double(s.cols) + 1e-5));
      }
      GpuTensor grad_out(x, gh), xin(x, xh), weight(v, wh);
      std::vector<std::uint8_t> want_x(x.nbytes()), want_w(v.nbytes()), first_weight_grad;
      reference::rms_norm_backward(d, gh.data(), xh.data(), wh.data(), nullptr, want_x.data(), want_w.data(), s.rows,
                                   s.cols, 1e-5);
      for (int run = 0; run < 2; ++run) {
        GpuTensor grad_x(x), grad_weight(v);
        rt->launch("rms_norm_backward", {grad_x, grad_weight, grad_out, xin, weight, absent}, {{"eps", 1e-5f}});
        sync();
        test::expect_close(d, grad_x.read(), want_x, "grad_x", cancelling_tolerance(d, terms, want_x));
        test::expect_close(d, grad_weight.read(), want_w, "grad_weight", column_sum_tolerance(d, s.rows));
        if (run == 0)
          first_weight_grad = grad_weight.read();
        else
          EXPECT_EQ(grad_weight.read(), first_weight_grad) << "grad_weight differs between two runs";
      }
      // add_rms_norm's: grad_residual added to grad_x, in place (grad_x is grad_residual's memory).
      reference::rms_norm_backward(d, gh.data(), xh.data(), wh.data(), residual_h.data(), want_x.data(),
                                   want_w.data(), s.rows, s.cols, 1e-5);
      GpuTensor accumulated(x, residual_h), grad_weight(v);
      rt->launch("rms_norm_backward", {accumulated, grad_weight, grad_out, xin, weight, accumulated},
                 {{"eps", 1e-5f}});
      sync();
      test::expect_close(d, accumulated.read(), want_x, "grad_x + grad_residual",
                         cancelling_tolerance(d, terms, want_x));
      EXPECT_EQ(grad_weight.read(), first_weight_grad) << "grad_residual changes grad_x only";
      EXPECT_EQ(xin.read(), xh) << "x is read only";
      EXPECT_EQ(grad_out.read(), gh) << "grad_out is read only";
    }
}

TEST_P(RmsNormGpu, RmsNormBackwardWillNotWriteOverItsInputs) {
  const TensorSpec x(DType::bf16, {4, 64}), v(DType::bf16, {64});
  GpuTensor grad(x, random_tensor(DType::bf16, 256, 1)), xin(x, random_tensor(DType::bf16, 256, 2)),
      weight(v, random_tensor(DType::bf16, 64, 3)), grad_weight(v);
  const Tensor absent{TensorSpec(), 0};
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              rt->launch("rms_norm_backward", {grad, grad_weight, grad, xin, weight, absent});
            }),
            "rms_norm_backward: grad_x and grad_out share memory; give grad_x memory of its own (or exactly "
            "grad_residual's, to write it in place)");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              rt->launch("rms_norm_backward", {xin, grad_weight, grad, xin, weight, absent});
            }),
            "rms_norm_backward: grad_x and x share memory; give grad_x memory of its own (or exactly grad_residual's, "
            "to write it in place)");
}

// Every pointer null: the launch names the first null one, not memory they all "share" at address 0.
TEST_P(RmsNormGpu, NullPointersAreNamedAsSuch) {
  const TensorSpec x(DType::bf16, {4, 64}), w(DType::bf16, {64});
  EXPECT_EQ(error_of<PointerError>([&] {
              rt->launch("rms_norm", {{x, 0}, {x, 0}, {w, 0}});
            }),
            "rms_norm: out is a null pointer");
}

TEST_P(RmsNormGpu, AddRmsNormUpdatesResidualInPlace) {
  for (DType d : kFloatTypes)
    for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{5, 4097}, Rows{4, 4096}, Rows{2, 262148}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d), str(s)));
      const std::int64_t n = s.rows * s.cols;
      const TensorSpec x(d, {s.rows, s.cols}), w(d, {s.cols});
      const auto xh = random_tensor(d, n, 1), rh = random_tensor(d, n, 2), wh = random_tensor(d, s.cols, 3);
      GpuTensor out(x), residual(x, rh), xin(x, xh), weight(w, wh);
      rt->launch("add_rms_norm", {out, residual, xin, weight}, {{"eps", 1e-5f}});
      sync();
      std::vector<std::uint8_t> want_out(x.nbytes()), want_residual = rh;
      reference::add_rms_norm(d, want_residual.data(), xh.data(), wh.data(), want_out.data(), s.rows, s.cols, 1e-5);
      test::expect_close(d, residual.read(), want_residual, "residual");
      test::expect_close(d, out.read(), want_out, "out");
      EXPECT_EQ(xin.read(), xh) << "x is read only";
      EXPECT_EQ(weight.read(), wh) << "weight is read only";
    }
}

INSTANTIATE_TEST_SUITE_P(Compilers, RmsNormGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
