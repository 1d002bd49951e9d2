// rms_norm's OpDef: params derived from specs and alignment, and every bad
// input rejected with a message that names the problem.
#include <gtest/gtest.h>

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
  EXPECT_EQ(p.str(), "dtype=bf16 hidden=4096 vec=8 threads=128 rows=1");
  EXPECT_EQ(params(DType::f32, 4096, 4096).get("vec"), 4);
  EXPECT_EQ(op().kernel_name(p), "rms_norm_bf16_hidden_4096_vec_8_threads_128_rows_1");
  EXPECT_EQ(op().entry_line(p),
            "struct rms_norm_bf16_hidden_4096_vec_8_threads_128_rows_1_p { using dtype = mojo::bf16; "
            "static constexpr int hidden = 4096, vec = 8, threads = 128, rows = 1; };\n"
            "MOJO_KERNEL_rms_norm(rms_norm_bf16_hidden_4096_vec_8_threads_128_rows_1, "
            "rms_norm_bf16_hidden_4096_vec_8_threads_128_rows_1_p)");
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
  Params q = params(DType::f16, 3, 127);  // 127 vectors of 1
  EXPECT_EQ(q.get("threads"), 32);
  EXPECT_EQ(q.get("rows"), 4);
}

TEST(RmsNormOp, WideRowsUseUpTo1024Threads) {
  EXPECT_EQ(params(DType::f32, 1, 8192).get("threads"), 512);
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
  EXPECT_EQ(g.block.x, 256u);
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
  op().pack_args(p, t, {{"eps", 1e-5f}}, 0, a);
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
  op().pack_args(p, t, {}, 0, d);
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
  op().pack_args(p, t, {}, 0, a);
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
  EXPECT_EQ(error_of<PointerError>([&] { op().pack_args(p, t, {}, 0, a); }), "rms_norm: weight is a null pointer");
  t[2].data = 0x7200004;  // the vec=8 kernel needs 16-byte alignment
  EXPECT_EQ(error_of<PointerError>([&] { op().pack_args(p, t, {}, 0, a); }),
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
            "unknown op 'rmsnorm'; known ops: rms_norm, add_rms_norm, layer_norm, layer_norm_backward, softmax, "
            "log_softmax, softmax_backward, silu, gelu, swiglu, gelu_and_mul, rotary_embedding, embedding, "
            "store_kv_cache, gemm, gemm_batched, linear, group_gemm, sdpa, paged_prefill_gqa, paged_decode_gqa, "
            "apply_penalties_temperature, sample, reject_sample, moe_gate, moe_dispatch, moe_combine, moe_mlp, "
            "linear_cross_entropy, linear_cross_entropy_backward");
}

TEST(AddRmsNormOp, ResidualIsInOutAndShapesMustMatch) {
  Params p = params("add_rms_norm", DType::bf16, "x=32x4096");
  EXPECT_EQ(p.str(), "dtype=bf16 hidden=4096 vec=8 threads=128 rows=1");
  EXPECT_EQ(find_op("add_rms_norm").tensor_args()[1].role, "inout");
  EXPECT_EQ(error_of<ShapeError>([] { params("add_rms_norm", DType::bf16, "x=32x4096 residual=32x4095"); }),
            "add_rms_norm: residual has shape [32, 4095] but x has shape [32, 4096]; they must match");
}

struct RmsNormGpu : GpuOps {};

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
