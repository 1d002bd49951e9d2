// sdpa_backward: its gradients by hand on a case small enough to work out, and its errors. check_op_test.cpp
// runs it at odd shapes (GQA, varlen, every mask, soft-cap, sinks) against the float64 reference, which the
// Python tests hold against autograd through the golden function.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

namespace {

// A [rows, 1, 64] f32 tensor's values, a row each: `column` of row r holds values[r], the rest 0.
std::vector<float> one_column(std::initializer_list<float> values, int column) {
  std::vector<float> out;
  for (float v : values) {
    std::vector<float> row(64, 0.f);
    row[std::size_t(column)] = v;
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

}  // namespace

TEST(SdpaBackwardOp, SaysWhatItTakes) {
  const OpDef& op = find_op("sdpa_backward");
  const std::vector<Tensor> t = example(op, DType::bf16, "q=64x8x80 k=64x2x80");
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(t, {}, kSm90); }),
            "sdpa_backward: head_dim 80 is not supported; supported: 64, 96, 128, 256")
      << "the forward's head dims, each with a backward";
  std::vector<Tensor> lone_grad = example(op, DType::bf16, "q=64x8x128 k=64x2x128 sinks=8");
  lone_grad[11] = Tensor{};  // sinks
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(lone_grad, {}, kSm90); }),
            "sdpa_backward: grad_sinks is given without sinks");
  std::vector<Tensor> no_lse = example(op, DType::bf16, "q=64x8x128 k=64x2x128");
  no_lse[8] = Tensor{};
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(no_lse, {}, kSm90); }),
            "sdpa_backward: lse is required (the forward's, f32 [heads, tokens])");
  const std::vector<Tensor> bad_k = example(op, DType::bf16, "q=64x8x128 k=64x3x128");
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(bad_k, {}, kSm90); }),
            "sdpa_backward: kv_heads 3 does not divide heads 8")
      << "sdpa's own checks, named as this op's";
}

struct SdpaBackwardGpu : GpuOps {};

// One query (a e0) over two keys (b_j e0) with values e1 and e2, scale 1: s_j = a b_j, p = softmax(s),
// out = p0 e1 + p1 e2. With grad_out = e1: D = p0, dP = (1, 0), dS = (p0 (1 - p0), -p0 p1), so
// grad_q = (dS_0 b0 + dS_1 b1) e0, grad_k_j = dS_j a e0 and grad_v_j = p_j e1.
TEST_P(SdpaBackwardGpu, ByHand) {
  const float a = 0.5f, b0 = 1.f, b1 = -2.f;
  const double s0 = a * b0, s1 = a * b1, z = std::exp(s0) + std::exp(s1), p0 = std::exp(s0) / z, p1 = std::exp(s1) / z;
  const TensorSpec one(DType::f16, {1, 1, 64}), two(DType::f16, {2, 1, 64}), lse_spec(DType::f32, {1, 1});
  std::vector<float> out = one_column({float(p0)}, 1), second = one_column({float(p1)}, 2);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] += second[i];
  GpuTensor q(one, reference::encode(DType::f16, one_column({a}, 0))),
      k(two, reference::encode(DType::f16, one_column({b0, b1}, 0))),
      v(two, reference::encode(DType::f16,
                               [] {
                                 std::vector<float> x = one_column({1.f}, 1), y = one_column({1.f}, 2);
                                 x.insert(x.end(), y.begin(), y.end());
                                 return x;
                               }())),
      o(one, reference::encode(DType::f16, out)), grad_out(one, reference::encode(DType::f16, one_column({1.f}, 1))),
      lse(lse_spec, reference::encode(DType::f32, {float(std::log(z))})), grad_q(one), grad_k(two), grad_v(two);
  rt->launch("sdpa_backward",
             {grad_q, grad_k, grad_v, grad_out, q, k, v, o, lse, Tensor{}, Tensor{}, Tensor{}, Tensor{}, Tensor{}},
             {{"scale", 1.0}, {"causal", 0}});
  sync();
  const std::vector<float> gq = reference::decode(DType::f16, grad_q.read()),
                           gk = reference::decode(DType::f16, grad_k.read()),
                           gv = reference::decode(DType::f16, grad_v.read());
  const double ds0 = p0 * (1 - p0), ds1 = -p0 * p1;
  EXPECT_NEAR(gq[0], ds0 * b0 + ds1 * b1, 2e-3);
  EXPECT_NEAR(gk[0], ds0 * a, 2e-3);
  EXPECT_NEAR(gk[64], ds1 * a, 2e-3);
  EXPECT_NEAR(gv[1], p0, 2e-3);
  EXPECT_NEAR(gv[64 + 1], p1, 2e-3);
  for (std::size_t i = 1; i < 64; ++i) EXPECT_EQ(gq[i], 0.f) << "grad_q column " << i;
  EXPECT_EQ(gv[0], 0.f);
  EXPECT_EQ(gv[2], 0.f) << "grad_out has no part along e2";
}

INSTANTIATE_TEST_SUITE_P(Compilers, SdpaBackwardGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
