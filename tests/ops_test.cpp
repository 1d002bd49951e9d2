// The operator library without a GPU: every op's params from shapes and
// alignment, its errors by content, and the CPU references checked against
// facts that do not depend on them (known values, sums, a finite-difference
// gradient), since the GPU tests trust them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mojo/error.hpp"
#include "mojo/op.hpp"
#include "reference/reference.hpp"
#include "test_util.hpp"

using namespace mojo;
using test::error_of;

namespace {
const Target kSm90 = Target::parse("sm_90");

std::vector<Tensor> example(const OpDef& op, DType dtype, std::string_view shapes) {
  std::vector<Tensor> out;
  for (const TensorSpec& s : op.specs_from_shapes(dtype, parse_shapes(op, shapes))) out.push_back({s, 0});
  return out;
}
Params params(std::string_view op, DType dtype, std::string_view shapes, ScalarList scalars = {}) {
  const OpDef& def = find_op(op);
  return def.specialize(example(def, dtype, shapes), scalars, kSm90);
}
}  // namespace

TEST(Ops, EveryOpHasAWorkingExampleAndDocumentedTensors) {
  for (const OpDef* op : all_ops()) {
    SCOPED_TRACE(std::string(op->name()));
    auto tensors = example(*op, DType::bf16, op->example_shapes());
    EXPECT_EQ(tensors.size(), op->tensor_args().size());
    Params p = op->specialize(tensors, {}, kSm90);
    EXPECT_EQ(p.dtype("dtype"), DType::bf16);
    const std::string kernel = op->kernel_name(p);
    EXPECT_EQ(op->entry_line(p).rfind(fmt::format("struct {}_p {{ using dtype = mojo::bf16;", kernel), 0), 0u);
    EXPECT_NE(op->entry_line(p).find(fmt::format("\nMOJO_KERNEL_{}", op->name())), std::string::npos);
    LaunchGeometry g = op->geometry(p, tensors);
    EXPECT_GT(g.grid.x, 0u);
    EXPECT_GT(g.block.x, 0u);
    EXPECT_LE(g.block.x, 1024u);
    for (const TensorArgInfo& t : op->tensor_args()) EXPECT_FALSE(t.doc.empty()) << t.name;
  }
}

TEST(Ops, ExampleShapesReadAsCommandLineOptions) {
  EXPECT_EQ(shapes_as_options("q=1x2  k=3"), "--shape q=1x2 --shape k=3");
  EXPECT_EQ(error_of<ShapeError>([] { parse_shapes(find_op("softmax"), "y=3"); }),
            "softmax has no tensor 'y'; its tensors: out, x");
  EXPECT_EQ(error_of<ShapeError>([] { find_op("embedding").specs_from_shapes(DType::f16, {}); }),
            "embedding: give the shape of ids, e.g. --shape ids=32 --shape weight=151936x4096");
}

TEST(AddRmsNormOp, ResidualIsInOutAndShapesMustMatch) {
  Params p = params("add_rms_norm", DType::bf16, "x=32x4096");
  EXPECT_EQ(p.str(), "dtype=bf16 hidden=4096 vec=8 threads=128 rows=1");
  EXPECT_EQ(find_op("add_rms_norm").tensor_args()[1].role, "inout");
  EXPECT_EQ(error_of<ShapeError>([] { params("add_rms_norm", DType::bf16, "x=32x4096 residual=32x4095"); }),
            "add_rms_norm: residual has shape [32, 4095] but x has shape [32, 4096]; they must match");
}

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

TEST(LayerNormBackwardOp, ColumnBlocksFollowTheRowBlocks) {
  const OpDef& op = find_op("layer_norm_backward");
  auto t = example(op, DType::bf16, "x=100x4096");
  Params p = op.specialize(t, {}, kSm90);
  LaunchGeometry g = op.geometry(p, t);
  EXPECT_EQ(g.grid.x, 100u + 4096u / 32u) << "100 row blocks, then 128 blocks of 32 columns";
  EXPECT_EQ(g.block.x % 32u, 0u);
}

TEST(SoftmaxOp, VocabularyRowsUseWholeBlocks) {
  Params p = params("softmax", DType::bf16, "x=32x151936");
  EXPECT_EQ(p.str(), "dtype=bf16 cols=151936 vec=8 threads=1024 rows=1 log=0");
  EXPECT_EQ(params("log_softmax", DType::f32, "x=4x31").str(), "dtype=f32 cols=31 vec=1 threads=32 rows=4 log=1");
  EXPECT_EQ(params("softmax", DType::f16, "x=1000x8").str(), "dtype=f16 cols=8 vec=8 threads=1 rows=128 log=0");
  EXPECT_EQ(error_of<ShapeError>([] { params("softmax", DType::f16, "x=4x2000000"); }),
            "softmax: the last dim of x is 2000000; supported: 1 to 1048576");
}

TEST(ActivationOps, GatedHalvesAndVectorWidths) {
  EXPECT_EQ(params("swiglu", DType::bf16, "x=4x24576").str(), "dtype=bf16 d=12288 vec=8");
  EXPECT_EQ(params("gelu_and_mul", DType::f16, "x=4x6", {{"approximate", 1}}).str(), "dtype=f16 act=2 d=3 vec=1");
  EXPECT_EQ(params("gelu", DType::f32, "x=10").str(), "dtype=f32 act=1 vec=2");
  EXPECT_EQ(params("silu", DType::f32, "x=7").get("vec"), 1);
  EXPECT_EQ(error_of<ShapeError>([] { params("swiglu", DType::bf16, "x=4x7"); }),
            "swiglu: x is bf16[4, 7]; its last dim must be even (the two halves a and b)");
  EXPECT_EQ(error_of<ShapeError>([] { params("swiglu", DType::bf16, "x=4x8 out=4x8"); }),
            "swiglu: out is bf16[4, 8] but x is bf16[4, 8]; out must be x with the last dim halved");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { params("gelu", DType::f32, "x=4", {{"approximate", 2}}); }),
            "gelu: approximate is 2; expected 0 (erf) or 1 (tanh)");
}

TEST(RotaryOp, ViewsOfQkvAndPartialRotary) {
  const OpDef& op = find_op("rotary_embedding");
  // q and k as views of a fused [tokens, (32 + 8 + 8) * 128] qkv tensor.
  std::int64_t q_shape[] = {5, 32, 128}, k_shape[] = {5, 8, 128}, strides[] = {48 * 128, 128, 1};
  TensorSpec q(DType::bf16, q_shape, strides), k(DType::bf16, k_shape, strides);
  TensorSpec pos(DType::i32, {5}), cache(DType::f32, {4096, 64});
  std::vector<Tensor> t = {{q, 0x10000}, {k, 0x10000 + 32 * 128 * 2}, {pos, 0x90000}, {cache, 0xa0000}};
  Params p = op.specialize(t, {{"neox", 0}}, kSm90);
  EXPECT_EQ(p.str(),
            "dtype=bf16 cache=f32 pos=i32 head_dim=128 rot_dim=64 heads=32 kv_heads=8 neox=0 threads=512");
  KernelArgs a;
  op.pack_args(p, t, {}, a);
  EXPECT_EQ(*static_cast<long long*>(a.data()[5]), 48 * 128) << "q token stride";
  EXPECT_EQ(*static_cast<long long*>(a.data()[7]), 4096) << "max_pos";
  EXPECT_EQ(error_of<ShapeError>([] { params("rotary_embedding", DType::bf16, "q=4x32x128 k=4x8x128 cos_sin_cache=64x130"); }),
            "rotary_embedding: cos_sin_cache is f32[64, 130]; expected [max_pos, rot_dim] with rot_dim even and at most "
            "head_dim (128)");
  EXPECT_EQ(error_of<ShapeError>([] { params("rotary_embedding", DType::bf16, "q=4x32x128 k=3x8x128 cos_sin_cache=64x128"); }),
            "rotary_embedding: k is bf16[3, 8, 128] but q is bf16[4, 32, 128]; they need the same tokens and head_dim");
  std::int64_t bad_strides[] = {48 * 128, 1, 32};  // heads interleaved: not [heads, head_dim] row-major
  TensorSpec scattered(DType::bf16, q_shape, bad_strides);
  EXPECT_NE(error_of<ShapeError>([&] { op.specialize({{scattered}, {k}, {pos}, {cache}}, {}, kSm90); })
                .find("needs each token's heads contiguous"),
            std::string::npos);
}

TEST(EmbeddingOp, IdsAreIndexTypesAndOutHasOneRowPerId) {
  EXPECT_EQ(params("embedding", DType::bf16, "ids=2x16 weight=151936x4096").str(),
            "dtype=bf16 ids=i64 hidden=4096 vec=8 threads=128 rows=1");
  const OpDef& op = find_op("embedding");
  TensorSpec ids(DType::f32, {4}), w(DType::f16, {10, 8}), out(DType::f16, {4, 8});
  EXPECT_EQ(error_of<DTypeError>([&] { op.specialize({{out}, {ids}, {w}}, {}, kSm90); }),
            "embedding: ids has dtype f32; supported: i32, i64");
  TensorSpec ids32(DType::i32, {4}), short_out(DType::f16, {3, 8});
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize({{short_out}, {ids32}, {w}}, {}, kSm90); }),
            "embedding: out is f16[3, 8]; expected 4 rows of 8 (one per id)");
}

TEST(StoreKvCacheOp, RowsAreHeadsTimesHeadDim) {
  EXPECT_EQ(params("store_kv_cache", DType::bf16, "k_cache=2048x16x8x128 k=32x8x128").str(),
            "dtype=bf16 slots=i64 row=1024 vec=8 threads=32 rows=4");
  EXPECT_EQ(error_of<ShapeError>([] { params("store_kv_cache", DType::bf16, "k_cache=2048x16x8x128 k=32x4x128"); }),
            "store_kv_cache: k is bf16[32, 4, 128]; expected [tokens, 8, 128] to match the cache");
  EXPECT_EQ(error_of<ShapeError>([] { params("store_kv_cache", DType::bf16, "k_cache=16x8x128 k=32x8x128"); }),
            "store_kv_cache: k_cache is bf16[16, 8, 128]; expected [num_blocks, block_size, kv_heads, head_dim]");
}

// ---- the CPU references ----------------------------------------------------------

TEST(Reference, ActivationsAtKnownPoints) {
  EXPECT_NEAR(reference::activate(Act::silu, 1.0), 0.7310585786300049, 1e-12);
  EXPECT_NEAR(reference::activate(Act::gelu, 1.0), 0.8413447460685429, 1e-12);
  EXPECT_NEAR(reference::activate(Act::gelu_tanh, 1.0), 0.8411919906082768, 1e-12);
  EXPECT_NEAR(reference::activate(Act::gelu, -3.0), -0.004049694, 1e-8);
}

TEST(Reference, SoftmaxRowsSumToOneAndLogSoftmaxAgrees) {
  std::vector<float> x = {1, 2, 3, -1e4f, 0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<float> y(8), ly(8);
  reference::softmax(DType::f32, x.data(), y.data(), 2, 4, false);
  reference::softmax(DType::f32, x.data(), ly.data(), 2, 4, true);
  EXPECT_NEAR(y[0] + y[1] + y[2] + y[3], 1.0, 1e-6);
  EXPECT_EQ(y[3], 0.f);
  EXPECT_FLOAT_EQ(y[4], 0.25f);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(std::exp(double(ly[i])), y[i], 1e-6);
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
    reference::layer_norm(DType::f32, xs.data(), ws.data(), bs.data(), out.data(), nullptr, nullptr, rows, hidden, 1e-5);
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

TEST(Reference, SoftmaxBackwardMatchesFiniteDifferences) {
  std::vector<float> x = {0.3f, -1.2f, 2.0f, 0.1f}, g = {0.5f, -0.25f, 1.0f, 0.75f}, y(4), dx(4);
  reference::softmax(DType::f32, x.data(), y.data(), 1, 4, false);
  reference::softmax_backward(DType::f32, g.data(), y.data(), dx.data(), 1, 4);
  for (std::size_t i = 0; i < 4; ++i) {
    auto loss = [&](float delta) {
      std::vector<float> xs = x, ys(4);
      xs[i] += delta;
      reference::softmax(DType::f32, xs.data(), ys.data(), 1, 4, false);
      double l = 0;
      for (int j = 0; j < 4; ++j) l += double(ys[j]) * g[j];
      return l;
    };
    EXPECT_NEAR(dx[i], (loss(1e-3f) - loss(-1e-3f)) / 2e-3, 1e-3) << i;
  }
}

TEST(Reference, RotaryNeoxAndGptjRotateTheirPairs) {
  // One token at position 1, angle pi/2 for the first pair and 0 for the second:
  // cos_sin row 1 = [cos0, cos1, sin0, sin1] = [0, 1, 1, 0].
  std::vector<float> cache = {1, 1, 0, 0, 0, 1, 1, 0};
  std::int64_t pos = 1;
  std::vector<float> q = {1, 2, 3, 4}, k = {1, 2, 3, 4};
  reference::rotary_embedding(DType::f32, q.data(), k.data(), &pos, cache.data(), 1, 1, 1, 4, 4, 2, true);
  EXPECT_EQ(q, (std::vector<float>{-3, 2, 1, 4})) << "neox pairs (0, 2) rotated by 90 degrees, (1, 3) unchanged";
  q = {1, 2, 3, 4};
  reference::rotary_embedding(DType::f32, q.data(), k.data(), &pos, cache.data(), 1, 1, 1, 4, 4, 2, false);
  EXPECT_EQ(q, (std::vector<float>{-2, 1, 3, 4})) << "gpt-j pair (0, 1) rotated, (2, 3) unchanged";
  pos = 2;  // past the cache: untouched
  q = {1, 2, 3, 4};
  reference::rotary_embedding(DType::f32, q.data(), k.data(), &pos, cache.data(), 1, 1, 1, 4, 4, 2, false);
  EXPECT_EQ(q, (std::vector<float>{1, 2, 3, 4}));
}
