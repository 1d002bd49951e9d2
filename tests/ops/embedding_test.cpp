// embedding: params and errors without a GPU, the CPU reference against facts that do not
// depend on it, and the device output against the reference (the GPU, or the CPU device).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(EmbeddingOp, IdsAreIndexTypesAndOutHasOneRowPerId) {
  EXPECT_EQ(params("embedding", DType::bf16, "ids=2x16 weight=151936x4096").str(),
            "dtype=bf16 ids=i64 hidden=4096 vec=8 threads=128 rows=1");
  const OpDef& op = find_op("embedding");
  TensorSpec ids(DType::f32, {4}), w(DType::f16, {10, 8}), out(DType::f16, {4, 8});
  EXPECT_EQ(error_of<DTypeError>([&] {
              op.specialize({{out}, {ids}, {w}}, {}, kSm90);
            }),
            "embedding: ids has dtype f32; supported: i32, i64");
  TensorSpec ids32(DType::i32, {4}), short_out(DType::f16, {3, 8});
  EXPECT_EQ(error_of<ShapeError>([&] {
              op.specialize({{short_out}, {ids32}, {w}}, {}, kSm90);
            }),
            "embedding: out is f16[3, 8]; expected 4 rows of 8 (one per id)");
}

struct EmbeddingGpu : GpuOps {};

TEST_P(EmbeddingGpu, EmbeddingGathersRowsAndZeroesBadIds) {
  const std::int64_t vocab = 1000, tokens = 37;
  for (DType d : kFloatTypes)
    for (std::int64_t hidden : {1, 31, 4096})
      for (DType id_type : {DType::i64, DType::i32}) {
        SCOPED_TRACE(fmt::format("{} hidden {} ids {}", dtype_name(d), hidden, dtype_name(id_type)));
        std::vector<std::int64_t> ids(tokens);
        for (std::int64_t t = 0; t < tokens; ++t) ids[std::size_t(t)] = (t * 389 + 11) % vocab;
        ids[3] = vocab;  // out of range: a zero row
        ids[5] = -1;
        const TensorSpec w(d, {vocab, hidden}), out_spec(d, {tokens, hidden}), id_spec(id_type, {tokens});
        const auto wh = random_tensor(d, vocab * hidden, 17);
        GpuTensor out(out_spec), idd(id_spec, test::index_bytes(id_type, ids)), weight(w, wh);
        rt->launch("embedding", {out, idd, weight});
        sync();
        std::vector<std::uint8_t> want(out_spec.nbytes());
        reference::embedding(d, ids.data(), wh.data(), want.data(), tokens, vocab, hidden);
        EXPECT_EQ(out.read(), want) << "a gather is exact";
      }
}

INSTANTIATE_TEST_SUITE_P(Compilers, EmbeddingGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
