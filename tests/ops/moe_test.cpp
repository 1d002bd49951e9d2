// MoE routing (moe_gate, moe_dispatch, moe_combine): the gate's rules on
// values worked by hand, the whole routed MLP (gate, dispatch with the
// gather, group_gemm, combine) against a dense per-token computation,
// argument errors and the debug checks. check_op_test.cpp runs each against
// its reference at odd shapes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "moe_args.h"
#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(MoeOp, ParamsAndErrors) {
  EXPECT_EQ(params("moe_gate", DType::bf16, "logits=4096x128 ids=4096x8").str(),
            "dtype=bf16 index=i64 experts=128 top_k=8 softmax=1 groups=1 top_groups=1 renormalize=1 rows=4");
  EXPECT_EQ(params("moe_dispatch", DType::bf16, "expert_offsets=129 ids=4096x8 x=4096x2048").str(),
            "dtype=bf16 index=i64 experts=128 top_k=8 threads=256 gather=1 hidden=2048 vec=8 gather_threads=64 rows=1");
  const OpDef& gate = find_op("moe_gate");
  const std::vector<Tensor> t = example(gate, DType::f32, "logits=16x256 ids=16x8");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              gate.specialize(t, {{"groups", 7}}, kSm90);
            }),
            "moe_gate: groups = 7; expected a divisor of the 256 experts, 1 to 32");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              gate.specialize(t, {{"groups", 1e300}}, kSm90);
            }),
            "moe_gate: groups is 1e+300; expected a whole number");
  const std::vector<Tensor> nine = example(gate, DType::f32, "logits=16x256 ids=16x9");
  EXPECT_EQ(error_of<ShapeError>([&] {
              gate.specialize(nine, {{"groups", 32}, {"top_groups", 1}}, kSm90);
            }),
            "moe_gate: top_k 9 is more than the 8 experts of the top 1 groups");
  const std::vector<Tensor> wide = example(gate, DType::f32, "logits=16x1024 ids=16x8");
  EXPECT_EQ(error_of<ShapeError>([&] { gate.specialize(wide, {}, kSm90); }),
            "moe_gate: logits is f32[16, 1024]; expected a contiguous [tokens, experts] with experts <= 512");
}

TEST(MoeOp, GatePacksOneArgsStruct) {
  using Args = mojo_moe::GateArgs<void, void>;
  const OpDef& gate = find_op("moe_gate");
  std::vector<Tensor> t = example(gate, DType::f32, "logits=16x256 ids=16x8 bias=256");
  for (std::size_t i = 0; i < t.size(); ++i) t[i].data = DevicePtr(i + 1) << 20;
  KernelArgs a;
  gate.pack_args(gate.specialize(t, {}, kSm90), t, {{"routed_scaling", 2.5}}, {}, a);
  const auto& args = packed<Args>(a);
  EXPECT_EQ(args.weights, ptr(DevicePtr(1) << 20));
  EXPECT_EQ(args.ids, ptr(DevicePtr(2) << 20));
  EXPECT_EQ(args.logits, ptr(DevicePtr(3) << 20));
  EXPECT_EQ(args.bias, ptr(DevicePtr(4) << 20));
  EXPECT_FLOAT_EQ(args.scaling, 2.5f);
  EXPECT_EQ(args.tokens, 16);
  t[3] = Tensor{};
  KernelArgs b;
  gate.pack_args(gate.specialize(t, {}, kSm90), t, {}, {}, b);
  EXPECT_EQ(packed<Args>(b).bias, nullptr) << "no bias";
  EXPECT_FLOAT_EQ(packed<Args>(b).scaling, 1.f) << "routed_scaling defaults to 1";
}

struct MoeGpu : GpuOps {
  struct Gate {
    std::vector<std::int64_t> ids;
    std::vector<float> weights;
  };
  Gate gate(const std::vector<float>& logits, std::int64_t experts, std::int64_t top_k, ScalarList scalars,
            const std::vector<float>& bias = {}) {
    const std::int64_t tokens = std::int64_t(logits.size()) / experts;
    const TensorSpec routes(DType::i32, {tokens, top_k});
    GpuTensor w(TensorSpec(DType::f32, {tokens, top_k})), ids(routes),
        l(TensorSpec(DType::f32, {tokens, experts}), reference::encode(DType::f32, logits));
    std::unique_ptr<GpuTensor> b;
    if (!bias.empty())
      b = std::make_unique<GpuTensor>(TensorSpec(DType::f32, {experts}), reference::encode(DType::f32, bias));
    rt->launch("moe_gate", {w, ids, l, b ? Tensor(*b) : Tensor{}}, scalars);
    sync();
    return {indices::decode(DType::i32, ids.read()), reference::decode(DType::f32, w.read())};
  }
};

// Softmax then top-2 renormalized: e^3 / (e^3 + e^2) and e^2 / (e^3 + e^2). A
// bias chooses but does not weigh. Groups: the best group by its two best.
TEST_P(MoeGpu, GateRulesByHand) {
  Gate g = gate({0, 1, 2, 3}, 4, 2, {});
  EXPECT_EQ(g.ids, (std::vector<std::int64_t>{3, 2}));
  const double e3 = std::exp(3.0), e2 = std::exp(2.0);
  EXPECT_NEAR(g.weights[0], e3 / (e3 + e2), 1e-6);
  EXPECT_NEAR(g.weights[1], e2 / (e3 + e2), 1e-6);

  g = gate({0, 1, 2, 3}, 4, 1, {{"sigmoid", 1}, {"renormalize", 0}, {"routed_scaling", 2.5}}, {10, 0, 0, 0});
  EXPECT_EQ(g.ids, (std::vector<std::int64_t>{0}));
  EXPECT_NEAR(g.weights[0], 0.5 * 2.5, 1e-6) << "sigmoid(0) times the scaling; the bias only chose";

  // Groups {0, 1} and {2, 3}: sums 3 + -5 = -2 and 2 + 2 = 4, so group 1; its tie goes to the lower expert.
  g = gate({3, -5, 2, 2}, 4, 1, {{"groups", 2}, {"top_groups", 1}});
  EXPECT_EQ(g.ids, (std::vector<std::int64_t>{2}));
  EXPECT_NEAR(g.weights[0], 1.0, 1e-6);
}

// The whole routed MLP: gate -> dispatch (with the gather) -> group_gemm of
// interleaved gate/up rows with silu-and-mul fused -> group_gemm down ->
// combine equals, per token, the weighted sum of its experts' MLPs computed densely.
TEST_P(MoeGpu, RoutedExpertMlpEqualsTheDenseComputation) {
  const std::int64_t tokens = 33, experts = 4, top_k = 2, hidden = 72, inter = 40;
  const DType d = DType::f32;
  const std::vector<float> xh = test::random_values(std::size_t(tokens * hidden), 1, 0.05f, 1.f),
                           gate_up = test::random_values(std::size_t(experts * 2 * inter * hidden), 2, 0.01f, 0.2f),
                           down = test::random_values(std::size_t(experts * hidden * inter), 3, 0.01f, 0.2f),
                           logits = test::random_values(std::size_t(tokens * experts), 4);
  const TensorSpec routes(DType::i64, {tokens, top_k});
  const std::int64_t pairs = tokens * top_k;
  GpuTensor x(TensorSpec(d, {tokens, hidden}), reference::encode(d, xh)),
      w13(TensorSpec(d, {experts, 2 * inter, hidden}), reference::encode(d, gate_up)),
      w2(TensorSpec(d, {experts, hidden, inter}), reference::encode(d, down)),
      l(TensorSpec(d, {tokens, experts}), reference::encode(d, logits)),
      weights(TensorSpec(DType::f32, {tokens, top_k})), ids(routes), offsets(TensorSpec(DType::i64, {experts + 1})),
      sorted(TensorSpec(DType::i64, {pairs})), positions(routes), sorted_x(TensorSpec(d, {pairs, hidden})),
      act(TensorSpec(d, {pairs, inter})), expert_out(TensorSpec(d, {pairs, hidden})),
      out(TensorSpec(d, {tokens, hidden}));
  rt->launch("moe_gate", {weights, ids, l, Tensor{}});
  rt->launch("moe_dispatch", {offsets, sorted, positions, ids, sorted_x, x});
  rt->launch("group_gemm", {act, sorted_x, w13, offsets}, {{"gated_activation", 3}});
  rt->launch("group_gemm", {expert_out, act, w2, offsets});
  rt->launch("moe_combine", {out, expert_out, positions, weights});
  GpuTensor fused(TensorSpec(d, {tokens, hidden}));  // the same MLP as one op: a plan of the same five kernels
  rt->launch("moe_mlp", {fused, x, ids, weights, w13, w2});
  sync();
  const std::vector<std::int64_t> chosen = indices::decode(DType::i64, ids.read());
  const std::vector<float> gate_w = reference::decode(DType::f32, weights.read()),
                           got = reference::decode(d, out.read()), got_fused = reference::decode(d, fused.read());
  const auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<double> want(std::size_t(hidden), 0.0);
    for (std::int64_t k = 0; k < top_k; ++k) {
      const std::int64_t e = chosen[std::size_t(t * top_k + k)];
      std::vector<double> h(static_cast<std::size_t>(inter));
      for (std::int64_t j = 0; j < inter; ++j) {
        double g = 0, u = 0;
        for (std::int64_t i = 0; i < hidden; ++i) {
          const double xi = xh[std::size_t(t * hidden + i)];
          g += xi * gate_up[std::size_t(((e * 2 * inter) + 2 * j) * hidden + i)];
          u += xi * gate_up[std::size_t(((e * 2 * inter) + 2 * j + 1) * hidden + i)];
        }
        h[std::size_t(j)] = silu(g) * u;
      }
      for (std::int64_t o = 0; o < hidden; ++o) {
        double y = 0;
        for (std::int64_t j = 0; j < inter; ++j)
          y += h[std::size_t(j)] * down[std::size_t((e * hidden + o) * inter + j)];
        want[std::size_t(o)] += gate_w[std::size_t(t * top_k + k)] * y;
      }
    }
    for (std::int64_t o = 0; o < hidden; ++o) {
      const double tol = 1e-4 * (1 + std::abs(want[std::size_t(o)]));
      EXPECT_NEAR(got[std::size_t(t * hidden + o)], want[std::size_t(o)], tol) << "token " << t << " column " << o;
      EXPECT_NEAR(got_fused[std::size_t(t * hidden + o)], want[std::size_t(o)], tol) << "moe_mlp, token " << t;
    }
  }
  const std::vector<std::int64_t> off = indices::decode(DType::i64, offsets.read());
  EXPECT_EQ(off.front(), 0);
  EXPECT_EQ(off.back(), pairs) << "every pair routed";
}

TEST_P(MoeGpu, DebugChecksNameAnExpertBeyondTheCount) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  const TensorSpec routes(DType::i32, {2, 2});
  GpuTensor offsets(TensorSpec(DType::i32, {5})), sorted(TensorSpec(DType::i32, {4})), positions(routes),
      ids(routes, test::index_bytes(DType::i32, {0, 3, -1, 4}));
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              checked.launch("moe_dispatch", {offsets, sorted, positions, ids, Tensor{}, Tensor{}});
            }),
            "moe_dispatch: ids[3] = 4 is out of range: expected a value (negative skips the token) < 4");
}

INSTANTIATE_TEST_SUITE_P(Compilers, MoeGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });

// The gate keeps its choices and the kept groups in registers (a lane a choice, a bit a group), with room for
// 8 experts a lane: no stack on either path, from 64 experts in groups to 512 (it had 64 to 96 bytes).
struct MoeCompiles : ::testing::TestWithParam<std::string> {};

TEST_P(MoeCompiles, GateHasNoStack) {
  Runtime rt(memory_only(GetParam()));
  struct Case {
    const char* shapes;
    std::vector<ScalarArg> scalars;
  };
  const Case cases[] = {{"logits=64x128 ids=64x8", {}},
                        {"logits=64x512 ids=64x8", {}},
                        {"logits=64x256 ids=64x8 bias=256", {{"sigmoid", 1}, {"groups", 8}, {"top_groups", 4}}},
                        {"logits=64x64 ids=64x6", {{"groups", 4}, {"top_groups", 2}}}};
  for (const char* arch : {"sm_80", "sm_90a"})
    for (const Case& c : cases) {
      const std::vector<Tensor> t = example(find_op("moe_gate"), DType::bf16, c.shapes);
      const Artifact a = rt.compile("moe_gate", t, c.scalars, Target::parse(arch), Emit::cubin);
      EXPECT_EQ(a.resources.stack_bytes, 0u) << arch << " " << a.params.str();
    }
}

INSTANTIATE_TEST_SUITE_P(Compilers, MoeCompiles, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
