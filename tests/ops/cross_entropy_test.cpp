// The fused linear cross-entropy: its plan runs once per vocabulary slice in
// a workspace of one slice; the loss and gradients by hand on a case small
// enough to work out; against the reference through a KernelHandle (the
// packed launches of every slice) and twice in a row; errors and the debug
// check. check_op_test.cpp runs both ops at odd shapes, every dtype, both paths.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cross_entropy_args.h"
#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(LinearCrossEntropyOp, SlicesTheVocabularyAndKeepsTheWorkspaceSmall) {
  const OpDef& fwd = find_op("linear_cross_entropy");
  const OpDef& bwd = find_op("linear_cross_entropy_backward");
  // Qwen3-8B training: 8192 tokens, hidden 4096, vocab 151936.
  for (const OpDef* op : {&fwd, &bwd}) {
    const std::vector<Tensor> t = example(*op, DType::bf16, "hidden=8192x4096 weight=151936x4096");
    const Params p = op->specialize(t, {}, kSm90);
    EXPECT_EQ(p.get("chunk"), 8192) << "256 MB of f32 logits per slice";
    EXPECT_EQ(op->repeats(p, t), 19);
    const double unfused = 8192.0 * 151936 * (2 + 4);  // torch: bf16 logits and their f32 softmax, at least
    EXPECT_LT(double(op->workspace_bytes(p, t)), unfused / 8) << op->name();
  }
  const std::vector<Tensor> t = example(fwd, DType::bf16, "hidden=16x64 weight=1000x64");
  EXPECT_EQ(fwd.repeats(fwd.specialize(t, {{"vocab_chunk", 128}}, kSm90), t), 8) << "1000 = 7 x 128 + 104";
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              fwd.specialize(t, {{"vocab_chunk", 100}}, kSm90);
            }),
            "linear_cross_entropy: vocab_chunk is 100; expected a multiple of 64 (0: chosen)");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              fwd.specialize(t, {{"reduction", 3}}, kSm90);
            }),
            "linear_cross_entropy: reduction is 3; expected 0 (none), 1 (mean) or 2 (sum)");
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              fwd.specialize(t, {{"label_smoothing", 1.5}}, kSm90);
            }),
            "linear_cross_entropy: label_smoothing is 1.5; expected 0 to 1");
  EXPECT_EQ(error_of<ShapeError>([&] {
              fwd.specialize(t, {{"reduction", 0}}, kSm90);
            }),
            "linear_cross_entropy: loss is f32[1]; expected a contiguous [16]");
}

// The loss's shape follows the reduction: one value, or with reduction 0 a row each (and so its gradient), for
// every caller that allocates a call's tensors from the shapes a user names (the CLI, Python, manifests).
TEST(LinearCrossEntropyOp, TheLossShapeFollowsTheReduction) {
  for (const char* name : {"linear_cross_entropy", "linear_cross_entropy_backward"}) {
    const OpDef& op = find_op(name);
    const char* loss = name == std::string_view("linear_cross_entropy") ? "loss" : "grad_loss";
    const ShapeMap shapes = parse_shapes(op, "hidden=9x40 weight=300x40");
    const auto args = op.tensor_args();
    const auto slot = std::size_t(
        std::find_if(args.begin(), args.end(), [&](const auto& t) { return t.name == loss; }) - args.begin());
    auto loss_of = [&](const std::vector<TensorSpec>& specs) { return specs.at(slot).str(); };
    EXPECT_EQ(loss_of(op.specs_from_shapes(DType::f32, shapes, {})), "f32[1]") << name;
    EXPECT_EQ(loss_of(op.specs_from_shapes(DType::f32, shapes, {{"reduction", 2}})), "f32[1]") << name;
    EXPECT_EQ(loss_of(op.specs_from_shapes(DType::f32, shapes, {{"reduction", 0}})), "f32[9]") << name;
    const ShapeMap given = parse_shapes(op, fmt::format("hidden=9x40 weight=300x40 {}=5", loss));
    EXPECT_EQ(loss_of(op.specs_from_shapes(DType::f32, given, {{"reduction", 0}})), "f32[5]") << "as given";
  }
}

TEST(LinearCrossEntropyOp, FinishPacksOneArgsStruct) {
  const OpDef& fwd = find_op("linear_cross_entropy");
  std::vector<Tensor> t = example(fwd, DType::bf16, "hidden=16x64 weight=1000x64");
  for (std::size_t i = 0; i < t.size(); ++i) t[i].data = DevicePtr(i + 1) << 20;
  t[1] = Tensor{};  // no lse
  const std::vector<ScalarArg> scalars = {{"reduction", 2}, {"ignore_index", -1}, {"z_loss", 1e-4}};
  const Params p = fwd.specialize(t, scalars, kSm90);
  int finishes = 0;
  for (const Params& step : fwd.plan(p)) {
    if (fwd.entry_macro(step) != "MOJO_CE_FINISH") continue;
    ++finishes;
    KernelArgs a;
    fwd.pack_args(step, t, scalars, Workspace{.scratch = DevicePtr(1) << 30}, a);
    const auto& args = packed<mojo_ce::FinishArgs<void>>(a);
    EXPECT_EQ(args.lse, nullptr) << "no lse wanted";
    EXPECT_EQ(args.rows, 16);
    EXPECT_EQ(args.vocab, 1000);
    EXPECT_EQ(args.ignore_index, -1);
    EXPECT_FLOAT_EQ(args.smoothing, 0.f);
    EXPECT_FLOAT_EQ(args.z_loss, 1e-4f);
  }
  EXPECT_EQ(finishes, 1);
}

// The backward's lse input, as the check library makes it (random_data): above 2^30 multiply-adds it is
// estimated from sampled vocabulary rows, not the float64 forward (at the full size of 2026-11-25 that forward
// took about an hour, and the benchmark never got to launch). Just above the bound the estimate stays within
// 0.05 of the forward's lse in every row, so the softmax the backward forms sums to within 5% of 1.
TEST(LinearCrossEntropyOp, TheBackwardsLseInputIsEstimatedCloseToTheForwards) {
  const OpCheck& bwd = find_check("linear_cross_entropy_backward");
  const OpCheck& fwd = find_check("linear_cross_entropy");
  const std::vector<TensorSpec> specs =
      bwd.op().specs_from_shapes(DType::bf16, parse_shapes(bwd.op(), "hidden=64x256 weight=131072x256"));
  const std::vector<float> estimated = reference::decode(DType::f32, bwd.random_data(6, specs, {}, 7));
  std::vector<TensorSpec> f = {TensorSpec(DType::f32, {1}), specs[6], specs[3], specs[4], specs[5]};
  std::vector<std::vector<std::uint8_t>> d = {
      std::vector<std::uint8_t>(4), std::vector<std::uint8_t>(specs[6].nbytes()), bwd.random_data(3, specs, {}, 7),
      bwd.random_data(4, specs, {}, 7), bwd.random_data(5, specs, {}, 7)};
  fwd.reference(f, d, {});
  const std::vector<float> exact = reference::decode(DType::f32, d[1]);
  ASSERT_EQ(estimated.size(), 64u);
  for (std::size_t i = 0; i < exact.size(); ++i) {
    EXPECT_GT(exact[i], std::log(131072.f) - 0.5f) << "logits of a few units: the lse is about log(vocab)";
    EXPECT_NEAR(estimated[i], exact[i], 0.05) << "row " << i;
  }
}

struct LinearCrossEntropyGpu : GpuOps {};

// Two tokens, hidden 1, vocab 3: logits are hidden * weight = [0, 1, 2] and [0, -1, -2].
// Token 0's label 2, token 1's ignored: the mean is token 0's loss, lse(0, 1, 2) - 2, and
// d loss / d hidden_0 = sum_j (p_j - [j = 2]) w_j = p_1 + 2 p_2 - 2.
TEST_P(LinearCrossEntropyGpu, ByHand) {
  const TensorSpec h(DType::f32, {2, 1}), w(DType::f32, {3, 1}), y(DType::i64, {2}), one(DType::f32, {1}),
      rows(DType::f32, {2});
  GpuTensor hidden(h, reference::encode(DType::f32, {1.f, -1.f})), weight(w, reference::encode(DType::f32, {0, 1, 2})),
      labels(y, test::index_bytes(DType::i64, {2, -100})), loss(one), lse(rows);
  rt->launch("linear_cross_entropy", {loss, lse, hidden, weight, labels}, {{"vocab_chunk", 64}});
  sync();
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(reference::decode(DType::f32, loss.read())[0], std::log(z) - 2, 1e-5);
  EXPECT_NEAR(reference::decode(DType::f32, lse.read())[1], std::log(1 + std::exp(-1.0) + std::exp(-2.0)), 1e-5);

  GpuTensor grad_hidden(h), grad_weight(w), grad_loss(one, reference::encode(DType::f32, {1.f}));
  rt->launch("linear_cross_entropy_backward",
             {grad_hidden, grad_weight, grad_loss, hidden, weight, labels, lse, Tensor{}});
  sync();
  const double p1 = std::exp(1.0) / z, p2 = std::exp(2.0) / z;
  std::vector<float> gh = reference::decode(DType::f32, grad_hidden.read());
  EXPECT_NEAR(gh[0], p1 + 2 * p2 - 2, 1e-5);
  EXPECT_EQ(gh[1], 0.f) << "an ignored token has no gradient";
  // d loss / d w_j = (p_j - [j = 2]) * hidden_0.
  std::vector<float> gw = reference::decode(DType::f32, grad_weight.read());
  EXPECT_NEAR(gw[0], 1 / z, 1e-5);
  EXPECT_NEAR(gw[1], p1, 1e-5);
  EXPECT_NEAR(gw[2], p2 - 1, 1e-5);

  // loss + 0.5 lse_0 + 3 lse_1: each lse adds its softmax q, times hidden, to the logits' gradient, the
  // ignored token's too. Token 1's logits are [0, -1, -2]: d lse_1 / d hidden_1 = q_1 + 2 q_2.
  GpuTensor grad_lse(rows, reference::encode(DType::f32, {0.5f, 3.f}));
  rt->launch("linear_cross_entropy_backward",
             {grad_hidden, grad_weight, grad_loss, hidden, weight, labels, lse, grad_lse});
  sync();
  const double z1 = 1 + std::exp(-1.0) + std::exp(-2.0), q1 = std::exp(-1.0) / z1, q2 = std::exp(-2.0) / z1;
  gh = reference::decode(DType::f32, grad_hidden.read());
  EXPECT_NEAR(gh[0], p1 + 2 * p2 - 2 + 0.5 * (p1 + 2 * p2), 1e-5);
  EXPECT_NEAR(gh[1], 3 * (q1 + 2 * q2), 1e-5) << "an ignored token's lse has a gradient";
  // d / d w_j = (p_j - [j = 2]) * 1 + 0.5 p_j * 1 + 3 q_j * (-1).
  gw = reference::decode(DType::f32, grad_weight.read());
  EXPECT_NEAR(gw[0], 1.5 / z - 3 / z1, 1e-5);
  EXPECT_NEAR(gw[1], 1.5 * p1 - 3 * q1, 1e-5);
  EXPECT_NEAR(gw[2], 1.5 * p2 - 1 - 3 * q2, 1e-5);
}

// Many slices through a KernelHandle (its launches packed once, for every slice), twice: the same bits.
TEST_P(LinearCrossEntropyGpu, EverySliceThroughAHandleTwice) {
  const OpCheck& check = find_check("linear_cross_entropy_backward");
  const OpDef& op = check.op();
  const DType d = DType::bf16;
  const std::vector<TensorSpec> specs = op.specs_from_shapes(d, parse_shapes(op, "hidden=33x64 weight=700x64"));
  const std::vector<ScalarArg> scalars = {{"vocab_chunk", 128}, {"label_smoothing", 0.1}, {"softcap", 30.0}};
  std::vector<std::vector<std::uint8_t>> host(specs.size());
  std::vector<std::unique_ptr<GpuTensor>> owned;
  std::vector<Tensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (op.tensor_args()[i].role != std::string_view("out")) host[i] = check.random_data(i, specs, scalars, 5);
    owned.push_back(host[i].empty() ? std::make_unique<GpuTensor>(specs[i])
                                    : std::make_unique<GpuTensor>(specs[i], host[i]));
    tensors.push_back(*owned.back());
  }
  const KernelHandle kernel = rt->get_kernel(op.name(), tensors, scalars);
  kernel.launch(tensors, scalars);
  sync();
  const std::vector<std::uint8_t> first_hidden = owned[0]->read(), first_weight = owned[1]->read();
  std::vector<std::vector<std::uint8_t>> want = host;
  want[0].resize(specs[0].nbytes());
  want[1].resize(specs[1].nbytes());
  check.reference(specs, want, scalars);
  test::expect_close(d, first_hidden, want[0], "grad_hidden", check.tolerance(d, specs, scalars));
  test::expect_close(d, first_weight, want[1], "grad_weight", check.tolerance(d, specs, scalars));
  owned[0]->poison();
  owned[1]->poison();
  kernel.launch(tensors, scalars);
  sync();
  EXPECT_EQ(owned[0]->read(), first_hidden) << "deterministic: no atomics anywhere";
  EXPECT_EQ(owned[1]->read(), first_weight);
}

// The debug checks know the ignore_index: a label outside [0, vocab) is an error unless it is that value.
TEST_P(LinearCrossEntropyGpu, DebugChecksNameALabelOutsideTheVocabulary) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  const TensorSpec h(DType::f32, {3, 8}), w(DType::f32, {10, 8}), y(DType::i32, {3}), one(DType::f32, {1});
  GpuTensor hidden(h, random_tensor(DType::f32, h.numel(), 1)), weight(w, random_tensor(DType::f32, w.numel(), 2)),
      loss(one);
  const auto launch = [&](std::vector<std::int64_t> y_values, ScalarList scalars) {
    GpuTensor labels(y, test::index_bytes(DType::i32, y_values));
    checked.launch("linear_cross_entropy", {loss, Tensor{}, hidden, weight, labels}, scalars);
  };
  const auto error = [&](std::vector<std::int64_t> y_values, ScalarList scalars = {}) {
    return error_of<InvalidArgumentError>([&] { launch(y_values, scalars); });
  };
  const auto finite_loss = [&](std::vector<std::int64_t> y_values, ScalarList scalars = {}) {
    loss.poison();
    launch(y_values, scalars);
    return std::isfinite(reference::decode(DType::f32, loss.read())[0]);
  };
  EXPECT_EQ(error({1, 10, 2}),
            "linear_cross_entropy: labels[1] = 10 is out of range: expected a label in [0, 10) (the vocabulary) or "
            "the ignore_index -100");
  EXPECT_EQ(error({1, 2, -5}),
            "linear_cross_entropy: labels[2] = -5 is out of range: expected a label in [0, 10) (the vocabulary) or "
            "the ignore_index -100");
  EXPECT_TRUE(finite_loss({-5, 2, 3}, {{"ignore_index", -5}})) << "the ignore_index given passes";
  EXPECT_EQ(error({-100, 10, 3}, {{"ignore_index", 10}}),
            "linear_cross_entropy: labels[0] = -100 is out of range: expected a label in [0, 10) (the vocabulary) "
            "or the ignore_index 10")
      << "-100 is only the default";
  EXPECT_TRUE(finite_loss({-100, 9, 0})) << "the default ignore_index passes";
}

INSTANTIATE_TEST_SUITE_P(Compilers, LinearCrossEntropyGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
