#include <gtest/gtest.h>

#include "mojo/error.hpp"
#include "mojo/target.hpp"
#include "mojo/tensor.hpp"
#include "test_util.hpp"

using namespace mojo;
using test::error_of;

TEST(DType, ParsesNamesAndAliases) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_name(DType::u8), "u8");
}

TEST(DType, UnknownNameListsTheAcceptedOnes) {
  std::string msg = error_of<DTypeError>([] { parse_dtype("fp8"); });
  EXPECT_NE(msg.find("unknown dtype 'fp8'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
}

TEST(TensorSpec, ContiguousByDefault) {
  TensorSpec s(DType::f16, {2, 3, 4});
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.nbytes(), 48u);
  EXPECT_EQ(s.stride(0), 12);
  EXPECT_EQ(s.stride(2), 1);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.str(), "f16[2, 3, 4]");
}

TEST(TensorSpec, StridedIsNotContiguous) {
  std::int64_t shape[] = {4, 8}, strides[] = {16, 1};
  TensorSpec s(DType::f32, shape, strides);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.str(), "f32[4, 8] strides [16, 1]");
}

// An empty tensor's strides address nothing: numpy gives [0, 64] float32 strides (0, 0), torch (64, 1). Either is
// the row-major [0, 64], which every op's layout checks take.
TEST(TensorSpec, AnEmptyTensorIsContiguousWhateverItsStrides) {
  std::int64_t shape[] = {0, 64}, numpy[] = {0, 0};
  const TensorSpec s(DType::f32, shape, numpy);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s, TensorSpec(DType::f32, {0, 64}));
  EXPECT_EQ(s.str(), "f32[0, 64]");
  EXPECT_TRUE(TensorSpec(DType::f32, {17, 0}).is_contiguous());
  EXPECT_EQ(TensorSpec(DType::f32, {17, 0}).str(), "f32[17, 0]");
}

TEST(TensorSpec, RejectsTooManyDimsAndNegativeDims) {
  std::vector<std::int64_t> nine(9, 1);
  EXPECT_NE(error_of<ShapeError>([&] { TensorSpec(DType::f32, nine); }).find("exceeds the maximum rank 8"),
            std::string::npos);
  EXPECT_NE(error_of<ShapeError>([] { TensorSpec(DType::f32, {4, -1}); }).find("negative dimension"),
            std::string::npos);
}

TEST(TensorSpec, IsTriviallyCopyableSoTheHotPathNeverAllocates) {
  EXPECT_TRUE(std::is_trivially_copyable_v<TensorSpec>);
  EXPECT_TRUE(std::is_trivially_copyable_v<Tensor>);
}

TEST(Target, ParsesArchStrings) {
  EXPECT_EQ(Target::parse("sm_90").sm, 90);
  EXPECT_FALSE(Target::parse("sm_90").arch_specific);
  EXPECT_TRUE(Target::parse("sm_90a").arch_specific);
  EXPECT_EQ(Target::parse("sm_90a").sm_name(), "sm_90a");
  EXPECT_EQ(Target::parse("compute_80").compute_name(), "compute_80");
  EXPECT_EQ(Target::parse("120").sm, 120);
}

TEST(Target, BadArchSaysWhatItExpects) {
  for (const char* bad : {"sm90", "sm_", "sm_9", "gfx90a", "sm_90b", "sm_1000", ""}) {
    std::string msg = error_of<ArchError>([&] { Target::parse(bad); });
    EXPECT_NE(msg.find("bad arch"), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("sm_90a"), std::string::npos) << msg;
  }
}

TEST(TensorSpec, ElementCountsThatOverflowAreShapeErrors) {
  EXPECT_NE(error_of<ShapeError>([] { TensorSpec(DType::f32, {21, 3, 6300000000000000000}); }).find("too many elements"),
            std::string::npos);
  EXPECT_NE(error_of<ShapeError>([] { TensorSpec(DType::f32, {1 << 30, 1 << 30}); }).find("too many elements"),
            std::string::npos);
  std::int64_t shape[] = {4, 8}, strides[] = {std::int64_t(1) << 62, 1};
  EXPECT_NE(error_of<ShapeError>([&] { TensorSpec(DType::f32, shape, strides); }).find("reach past"), std::string::npos);
  EXPECT_EQ(TensorSpec(DType::f32, {1 << 20, 1 << 20}).numel(), std::int64_t(1) << 40);
}
