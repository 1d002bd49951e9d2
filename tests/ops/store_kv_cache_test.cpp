// store_kv_cache: params and errors without a GPU, the CPU reference against facts that do not
// depend on it, and the device output against the reference (the GPU, or the CPU device).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(StoreKvCacheOp, RowsAreHeadsTimesHeadDim) {
  EXPECT_EQ(params("store_kv_cache", DType::bf16, "k_cache=2048x16x8x128 k=32x8x128").str(),
            "dtype=bf16 slots=i64 row=1024 vec=8 threads=32 rows=4");
  EXPECT_EQ(error_of<ShapeError>([] { params("store_kv_cache", DType::bf16, "k_cache=2048x16x8x128 k=32x4x128"); }),
            "store_kv_cache: k is bf16[32, 4, 128]; expected [tokens, 8, 128] to match the cache");
  EXPECT_EQ(error_of<ShapeError>([] { params("store_kv_cache", DType::bf16, "k_cache=16x8x128 k=32x8x128"); }),
            "store_kv_cache: k_cache is bf16[16, 8, 128]; expected [num_blocks, block_size, kv_heads, head_dim]");
}

// ---- the CPU references ----------------------------------------------------------

struct StoreKvCacheGpu : GpuOps {};

TEST_P(StoreKvCacheGpu, StoreKvCacheWritesSlotsAndSkipsNegativeOnes) {
  const std::int64_t blocks = 8, block_size = 16, kv_heads = 2, tokens = 37, slots = blocks * block_size;
  for (DType d : kFloatTypes)
    for (std::int64_t head_dim : {1, 64, 128})
      for (bool strided : {false, true}) {
        SCOPED_TRACE(fmt::format("{} head_dim {} strided {}", dtype_name(d), head_dim, strided));
        const std::int64_t row = kv_heads * head_dim;
        std::vector<std::int64_t> slot(static_cast<std::size_t>(slots));
        std::iota(slot.begin(), slot.end(), 0);
        std::shuffle(slot.begin(), slot.end(), std::mt19937(18));
        slot.resize(tokens);
        slot[4] = -1;  // padding: skipped
        const TensorSpec cache(d, {blocks, block_size, kv_heads, head_dim}), slot_spec(DType::i64, {tokens});
        const auto kc = random_tensor(d, cache.numel(), 19), vc = random_tensor(d, cache.numel(), 20);
        // k and v as views of a fused [tokens, 3 * row] qkv buffer, or contiguous.
        const std::int64_t stride = strided ? 3 * row : row;
        const auto qkv = random_tensor(d, tokens * stride, 21), v_h = random_tensor(d, tokens * stride, 22);
        const std::int64_t shape[] = {tokens, kv_heads, head_dim}, strides[] = {stride, head_dim, 1};
        const TensorSpec kv_spec(d, shape, strides), whole(d, {tokens, stride});
        GpuTensor k_cache(cache, kc), v_cache(cache, vc), k_buf(whole, qkv), v_buf(whole, v_h),
            slots_d(slot_spec, test::index_bytes(DType::i64, slot));
        const std::size_t k_offset = strided ? std::size_t(row) * dtype_size(d) : 0;
        const Tensor k{kv_spec, k_buf.tensor().data + k_offset}, v{kv_spec, v_buf.tensor().data + k_offset};
        rt->launch("store_kv_cache", {k_cache, v_cache, k, v, slots_d});
        sync();
        // The reference takes contiguous k and v: gather the viewed rows.
        std::vector<std::uint8_t> k_rows, v_rows;
        const std::size_t row_bytes = std::size_t(row) * dtype_size(d);
        for (std::int64_t t = 0; t < tokens; ++t) {
          const std::size_t at = std::size_t(t * stride) * dtype_size(d) + k_offset;
          k_rows.insert(k_rows.end(), qkv.begin() + std::ptrdiff_t(at), qkv.begin() + std::ptrdiff_t(at + row_bytes));
          v_rows.insert(v_rows.end(), v_h.begin() + std::ptrdiff_t(at), v_h.begin() + std::ptrdiff_t(at + row_bytes));
        }
        auto want_k = kc, want_v = vc;
        reference::store_kv_cache(d, k_rows.data(), v_rows.data(), slot.data(), want_k.data(), want_v.data(), tokens,
                                  slots, row);
        EXPECT_EQ(k_cache.read(), want_k) << "a copy is exact; slots not mapped keep their values";
        EXPECT_EQ(v_cache.read(), want_v);
        EXPECT_EQ(k_buf.read(), qkv) << "k is read only";
      }
}

INSTANTIATE_TEST_SUITE_P(Compilers, StoreKvCacheGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
