// rotary_embedding: params and errors without a GPU, the CPU reference against facts that do not
// depend on it, and the device output against the reference (the GPU, or the CPU device).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "op_test_util.hpp"
#include "rotary_embedding_args.h"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(RotaryOp, ViewsOfQkvAndPartialRotary) {
  const OpDef& op = find_op("rotary_embedding");
  // q and k as views of a fused [tokens, (32 + 8 + 8) * 128] qkv tensor.
  std::int64_t q_shape[] = {5, 32, 128}, k_shape[] = {5, 8, 128}, strides[] = {48 * 128, 128, 1};
  TensorSpec q(DType::bf16, q_shape, strides), k(DType::bf16, k_shape, strides);
  TensorSpec pos(DType::i32, {5}), cache(DType::f32, {4096, 64});
  std::vector<Tensor> t = {{q, 0x10000}, {k, 0x10000 + 32 * 128 * 2}, {pos, 0x90000}, {cache, 0xa0000}};
  Params p = op.specialize(t, {{"neox", 0}}, kSm90);
  EXPECT_EQ(p.str(), "dtype=bf16 cache=f32 pos=i32 head_dim=128 rot_dim=64 heads=32 kv_heads=8 neox=0 vec=8 cvec=4 threads=64 hpb=8")
      << "16-byte vectors of 4 pairs, 8 vectors a rotated head: 8 heads a block of 64 threads";
  KernelArgs a;
  op.pack_args(p, t, {}, {}, a);
  const auto& args = packed<mojo_rotary::Args<void, void, void>>(a);
  EXPECT_EQ(args.k, ptr(0x10000 + 32 * 128 * 2)) << "k: a view into qkv";
  EXPECT_EQ(args.q_stride, 48 * 128) << "q token stride";
  EXPECT_EQ(args.k_stride, 48 * 128) << "k token stride";
  EXPECT_EQ(args.max_pos, 4096);
  EXPECT_EQ(
      error_of<ShapeError>(
          [] { params("rotary_embedding", DType::bf16, "q=4x32x128 k=4x8x128 cos_sin_cache=64x130"); }),
      "rotary_embedding: cos_sin_cache is f32[64, 130]; expected [max_pos, rot_dim] with rot_dim even and at most "
      "head_dim (128)");
  EXPECT_EQ(error_of<ShapeError>(
                [] { params("rotary_embedding", DType::bf16, "q=4x32x128 k=3x8x128 cos_sin_cache=64x128"); }),
            "rotary_embedding: k is bf16[3, 8, 128] but q is bf16[4, 32, 128]; they need the same tokens and head_dim");
  std::int64_t bad_strides[] = {48 * 128, 1, 32};  // heads interleaved: not [heads, head_dim] row-major
  TensorSpec scattered(DType::bf16, q_shape, bad_strides);
  EXPECT_NE(error_of<ShapeError>([&] {
              op.specialize({{scattered}, {k}, {pos}, {cache}}, {}, kSm90);
            }).find("needs each token's heads contiguous"),
            std::string::npos);
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

struct RotaryEmbeddingGpu : GpuOps {};

TEST_P(RotaryEmbeddingGpu, RotaryEmbeddingNeoxAndGptjInPlace) {
  struct Shape {
    std::int64_t tokens, heads, kv_heads, head_dim, rot_dim;
  };
  const std::int64_t max_pos = 4096;
  for (DType d : kFloatTypes)
    // Heads of 66 features (132 bytes: 4-byte vectors, or single elements for NeoX's halves of 33), blocks
    // whose last takes fewer heads (6 and 40 heads), partial rotary.
    for (Shape s : {Shape{1, 1, 1, 2, 2}, Shape{3, 3, 1, 66, 66}, Shape{5, 4, 2, 64, 64}, Shape{7, 32, 8, 128, 64},
                    Shape{33, 32, 8, 128, 128}})
      for (bool neox : {true, false})
        for (DType pos_type : {DType::i64, DType::i32}) {
          SCOPED_TRACE(fmt::format("{} tokens {} heads {}/{} head_dim {} rot_dim {} neox {} positions {}",
                                   dtype_name(d), s.tokens, s.heads, s.kv_heads, s.head_dim, s.rot_dim, neox,
                                   dtype_name(pos_type)));
          const TensorSpec q(d, {s.tokens, s.heads, s.head_dim}), k(d, {s.tokens, s.kv_heads, s.head_dim}),
              pos(pos_type, {s.tokens}), cache(DType::f32, {max_pos, s.rot_dim});
          const auto qh = random_tensor(d, q.numel(), 15), kh = random_tensor(d, k.numel(), 16);
          std::vector<float> cos_sin(std::size_t(max_pos * s.rot_dim));
          for (std::int64_t p = 0; p < max_pos; ++p)
            for (std::int64_t i = 0; i < s.rot_dim / 2; ++i) {
              const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(s.rot_dim));
              cos_sin[std::size_t(p * s.rot_dim + i)] = float(std::cos(angle));
              cos_sin[std::size_t(p * s.rot_dim + s.rot_dim / 2 + i)] = float(std::sin(angle));
            }
          std::vector<std::int64_t> positions(std::size_t(s.tokens));
          for (std::size_t t = 0; t < positions.size(); ++t) positions[t] = std::int64_t((t * 977 + 3) % max_pos);
          if (s.tokens > 2) positions[1] = max_pos;  // out of range: the token is left alone
          GpuTensor qd(q, qh), kd(k, kh), pd(pos, test::index_bytes(pos_type, positions)),
              cd(cache, reference::encode(DType::f32, cos_sin));
          rt->launch("rotary_embedding", {qd, kd, pd, cd}, {{"neox", neox ? 1 : 0}});
          sync();
          auto want_q = qh, want_k = kh;
          reference::rotary_embedding(d, want_q.data(), want_k.data(), positions.data(), cos_sin.data(), s.tokens,
                                      s.heads, s.kv_heads, s.head_dim, s.rot_dim, max_pos, neox);
          test::expect_close(d, qd.read(), want_q, "q");
          test::expect_close(d, kd.read(), want_k, "k");
        }
}

INSTANTIATE_TEST_SUITE_P(Compilers, RotaryEmbeddingGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
