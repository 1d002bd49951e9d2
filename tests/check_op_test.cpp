// Every op, every dtype, at small and odd shapes (1, 17 and 4097 rows;
// hidden sizes 896 and 5632; GEMM edges that are no multiple of a tile),
// launched on the test device (the GPU, or the CPU device where there is
// none) against its CPU reference through mojo::check_op: what
// `mojo-jit run` does. The sm_90a GEMM path runs on a device of that target.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

#include "device/cpu/fiber.hpp"
#include "gpu_util.hpp"
#include "mojo/error.hpp"

using namespace mojo;

namespace {

struct OddCase {
  const char* op;
  const char* shapes;
  std::vector<ScalarArg> scalars = {};
};

const OddCase kCases[] = {
    {"rms_norm", "x=1x896"},
    {"rms_norm", "x=4097x896"},
    {"rms_norm", "x=17x5632"},
    {"add_rms_norm", "x=17x896"},
    {"rms_norm_backward", "x=17x896"},
    {"rms_norm_backward", "x=17x896 grad_residual=17x896"},
    {"layer_norm", "x=17x5632"},
    {"layer_norm_backward", "x=17x896"},
    {"softmax", "x=4097x896"},
    {"log_softmax", "x=17x5632"},
    {"softmax_backward", "out=17x896"},
    {"silu", "x=4097x896"},
    {"gelu", "x=17x5632", {{"approximate", 1}}},
    {"swiglu", "x=17x1792"},
    {"gelu_and_mul", "x=1x11264"},
    {"rotary_embedding", "q=17x4x128 k=17x2x128 cos_sin_cache=100x128"},
    {"rotary_embedding", "q=17x4x128 k=17x2x128 cos_sin_cache=100x64", {{"neox", 0}}},
    {"embedding", "ids=4097 weight=1000x896"},
    {"store_kv_cache", "k_cache=20x16x2x128 k=17x2x128"},
    {"gemm", "a=17x72 b=72x136"},
    {"gemm", "a=100x200 b=40x200 c=100x40", {{"trans_b", 1}, {"beta", 0.5}}},
    {"gemm_batched", "a=3x72x17 b=3x72x136 c=3x17x136", {{"trans_a", 1}}},
    {"linear", "x=17x200 weight=136x200 bias=136", {{"activation", 3}}},
    {"linear", "x=1x4104 weight=72x4104"},
    {"group_gemm", "x=100x72 weight=4x136x72 offsets=5"},
    {"group_gemm", "x=100x72 weight=4x136x72 offsets=5 out=100x68", {{"gated_activation", 3}}},
    // The weights as another product's, [groups, K, N] (its input's gradient), gated too.
    {"group_gemm", "x=100x72 weight=4x72x136 offsets=5 out=100x136", {{"weight_kn", 1}}},
    {"group_gemm", "x=100x72 weight=4x72x136 offsets=5 out=100x68", {{"weight_kn", 1}, {"gated_activation", 1}}},
    {"group_gemm_weight_grad", "grad_out=100x136 x=100x72 offsets=9"},  // 8 groups of random sizes, some empty
    {"apply_penalties_temperature", "logits=17x1000 token_ids=17x40"},
    {"apply_penalties_temperature", "logits=3x151936 token_ids=3x50"},  // the temperature over 5-10 blocks a row
    {"sample", "logits=17x1000"},
    {"sample", "logits=3x4097"},
    {"reject_sample", "target_probs=9x4x1000"},
    {"moe_gate", "logits=17x128 ids=17x8"},
    {"moe_gate",
     "logits=17x256 ids=17x8 bias=256",
     {{"sigmoid", 1}, {"groups", 8}, {"top_groups", 4}, {"routed_scaling", 2.5}}},
    {"moe_dispatch", "expert_offsets=129 ids=100x8 x=100x72"},
    {"moe_dispatch", "expert_offsets=5 ids=1x3"},
    {"moe_dispatch", "expert_offsets=9 ids=1100x8"},  // 8800 pairs: two whole tiles of 4096 and part of a third
    {"moe_combine", "expert_out=800x72 positions=100x8"},
    {"moe_mlp", "x=33x72 ids=33x2 w13=4x80x72"},
    {"linear_cross_entropy", "hidden=17x72 weight=300x72"},
    {"linear_cross_entropy",
     "hidden=17x72 weight=300x72 loss=17",
     {{"reduction", 0}, {"vocab_chunk", 64}, {"label_smoothing", 0.1}, {"z_loss", 1e-3}, {"softcap", 3.0}}},
    {"linear_cross_entropy_backward",
     "hidden=17x72 weight=300x72",
     {{"vocab_chunk", 128}, {"label_smoothing", 0.1}, {"z_loss", 1e-3}, {"softcap", 3.0}}},
    {"linear_cross_entropy_backward", "hidden=17x72 weight=300x72 grad_loss=17", {{"reduction", 0}}},
    // The lse's own gradient (a loss that uses it): every row's, the ignored ones' too.
    {"linear_cross_entropy_backward",
     "hidden=17x72 weight=300x72 grad_lse=17",
     {{"vocab_chunk", 128}, {"z_loss", 1e-3}, {"softcap", 3.0}}},
    // A soft-cap so large that tanh(l / cap) lost every bit to cancellation (each logit 0 before 2026-11-29), and
    // an ignore_index other than the labels' -100, which makes those rows' labels bad (NaN, as the kernels say).
    {"linear_cross_entropy", "hidden=17x72 weight=300x72 loss=17", {{"reduction", 0}, {"softcap", 4294967296.0}}},
    {"linear_cross_entropy_backward", "hidden=17x72 weight=300x72", {{"softcap", 4294967296.0}}},
    {"linear_cross_entropy_backward", "hidden=17x72 weight=300x72", {{"ignore_index", -1}}},
    // Attention's backward: GQA, a varlen batch whose second sequence is empty, unequal query and key lengths,
    // every mask, the sinks' gradient and lse's own.
    {"sdpa_backward", "q=17x4x64 k=17x1x64"},
    {"sdpa_backward", "q=23x2x96 k=37x2x96 cu_seqlens_q=3 cu_seqlens_k=3", {{"causal", 0}}},
    {"sdpa_backward",
     "q=40x4x128 k=50x2x128 cu_seqlens_q=4 cu_seqlens_k=4 sinks=4 grad_sinks=4 grad_lse=4x40",
     {{"window", 9}, {"softcap", 5.0}, {"scale", 0.1}}},
    // head_dim 256: grad_v and grad_k each a step of its own.
    {"sdpa_backward", "q=19x4x256 k=19x2x256 sinks=4 grad_sinks=4", {{"window", 7}}},
};

void expect_pass(Runtime& rt, const char* op_name, const char* shapes, DType dtype, ScalarList scalars,
                 CheckLaunch first = CheckLaunch::direct) {
  const OpDef& op = find_op(op_name);
  const std::vector<TensorSpec> specs = op.specs_from_shapes(dtype, parse_shapes(op, shapes));
  const CheckReport r = check_op(rt, op_name, specs, scalars, 11, first);
  EXPECT_FALSE(r.outputs.empty());
  for (const auto& out : r.outputs)
    EXPECT_EQ(out.wrong, 0u) << fmt::format(
        "{} {} {}: {} of {} elements of {} outside rtol {} atol {} (max abs err {})", op_name, dtype_name(dtype),
        shapes, out.wrong, out.elements, out.name, out.tolerance.rtol, out.tolerance.atol, out.max_abs);
  for (const auto& out : r.outputs)
    EXPECT_EQ(out.poison_dependent, 0u) << fmt::format(
        "{} {} {}: {} of {} elements of {} differ between a launch on NaN-poisoned and one on zeroed output and "
        "workspace memory (read before written, or never written)",
        op_name, dtype_name(dtype), shapes, out.poison_dependent, out.elements, out.name);
  EXPECT_TRUE(r.overwritten.empty()) << fmt::format("{} {} {}: wrote {}", op_name, dtype_name(dtype), shapes,
                                                    fmt::join(r.overwritten, ", "));
}

RuntimeOptions options(const test::TempDir& cache, std::string device) {
  RuntimeOptions o;
  o.cache_dir = cache.path();
  o.device = std::move(device);
  return o;
}

}  // namespace

// Each case's first launch is captured into a CUDA graph, by name, and replayed: each specialization's load
// and workspace come inside a capture (a GPU refuses a synchronous call there, and so does the CPU device:
// the sampler's workspace did on 2026-11-27), and check_op's second launch, a direct one, must give the
// replay's bits.
// What the CLI, the Python layers and manifests allocate an output by where a call does not give it: the op's
// shape rules with the call's scalars (OpDef::complete_shapes) give each case's own output. (A gated group_gemm's
// out, half weight's rows, was allocated whole and refused.)
TEST(CheckOp, EveryCasesOutputsFollowFromItsInputsAndScalars) {
  for (const OddCase& c : kCases) {
    const OpDef& op = find_op(c.op);
    const ShapeMap given = parse_shapes(op, c.shapes);
    const DType d = op.dtypes().front();
    const std::vector<TensorSpec> want = op.specs_from_shapes(d, given, c.scalars);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::string name(op.tensor_args()[i].name);
      if (op.tensor_args()[i].role != std::string_view("out") || !given.contains(name)) continue;
      ShapeMap without = given;
      without.erase(name);
      TensorSpec derived;
      try {
        derived = op.specs_from_shapes(d, without, c.scalars)[i];
      } catch (const Error& e) {  // one the rules cannot derive (moe_gate's ids: top_k is its shape) is asked for
        EXPECT_NE(std::string(e.what()).find("give the shape of " + name), std::string::npos) << e.what();
        continue;
      }
      if (derived.rank() == 0) continue;  // an optional output, absent unless given
      EXPECT_EQ(derived.str(), want[i].str()) << c.op << " " << c.shapes << ": " << name;
    }
  }
}

TEST(CheckOp, EveryOpAndDtypeAtOddShapes) {
  if (!test::on_cpu_device() && !device_available()) GTEST_SKIP() << "no GPU or no CUDA driver on this machine";
  test::TempDir cache;
  Runtime rt(options(cache, test::test_device()));
  for (const OddCase& c : kCases)
    for (DType dtype : find_op(c.op).dtypes()) expect_pass(rt, c.op, c.shapes, dtype, c.scalars, CheckLaunch::graph);
}

// Each case above with one of its dims 0 in turn (an empty batch, an expert parallel rank with no tokens, a
// zero width): the op either runs and matches its reference (an empty tensor may have a null pointer, as
// torch gives one) or throws an Error that names the op and what is wrong, never a crash (rows 0 and widths 0
// divided by zero in five ops' params before 2026-11-29) nor an internal error.
TEST(CheckOp, EveryOpWithADimOfZeroRunsOrSaysWhy) {
  if (!test::on_cpu_device() && !device_available()) GTEST_SKIP() << "no GPU or no CUDA driver on this machine";
  test::TempDir cache;
  Runtime rt(options(cache, test::test_device()));
  std::set<std::string> seen;
  int ran = 0, refused = 0;
  for (const OddCase& c : kCases) {
    const OpDef& op = find_op(c.op);
    const ShapeMap shapes = parse_shapes(op, c.shapes);
    for (const auto& [name, dims] : shapes)
      for (std::size_t d = 0; d < dims.size(); ++d) {
        ShapeMap zeroed = shapes;
        zeroed[name][d] = 0;
        std::string label = c.op;
        for (const auto& [n, v] : zeroed) label += fmt::format(" {}={}", n, fmt::join(v, "x"));
        if (!seen.insert(label).second) continue;
        SCOPED_TRACE(label);
        const DType dtype = op.dtypes().front();
        try {
          const CheckReport r = check_op(rt, c.op, op.specs_from_shapes(dtype, zeroed), c.scalars, 11);
          for (const auto& out : r.outputs) {
            EXPECT_EQ(out.wrong, 0u) << out.name;
            EXPECT_EQ(out.poison_dependent, 0u) << out.name;
          }
          EXPECT_TRUE(r.overwritten.empty()) << fmt::format("{}", fmt::join(r.overwritten, ", "));
          ++ran;
        } catch (const Error& e) {
          const std::string_view what = e.what();
          EXPECT_TRUE(what.starts_with(std::string(c.op) + ": ") || what.starts_with("negative") ||
                      what.find("has too many elements") != std::string_view::npos)
              << what;
          EXPECT_EQ(what.find("internal error"), std::string_view::npos) << what;
          EXPECT_EQ(what.find("null pointer"), std::string_view::npos) << what;
          ++refused;
        }
      }
  }
  // What each op does with a dim of 0 is its own; that both kinds stay common is a check on the loop itself.
  EXPECT_GE(ran, 30);
  EXPECT_GE(refused, 100);
}

// Each tensor in turn placed as torch slices lie (Placement): one element past an aligned start (no vector access
// of it aligned), then with dim 0's stride grown by 3 elements (every slice misaligned) and by 8 (aligned, but
// strided). The op must give the reference's result and write nothing outside the views nor into an input, or
// refuse with its own error. Returns whether it ran.
bool runs_or_says_why(Runtime& rt, const char* op_name, const char* shapes, DType dtype, ScalarList scalars,
                      std::size_t i, Placement place) {
  const OpDef& op = find_op(op_name);
  const std::vector<TensorSpec> specs = op.specs_from_shapes(dtype, parse_shapes(op, shapes));
  std::vector<Placement> placements(specs.size());
  placements[i] = place;
  SCOPED_TRACE(fmt::format("{} {} {}: {} at offset {}, pad {}", op_name, dtype_name(dtype), shapes,
                           op.tensor_args()[i].name, place.offset, place.pad));
  try {
    const CheckReport r = check_op(rt, op_name, specs, scalars, 11, CheckLaunch::direct, placements);
    for (const auto& out : r.outputs) {
      EXPECT_EQ(out.wrong, 0u) << out.name;
      EXPECT_EQ(out.poison_dependent, 0u) << out.name;
    }
    EXPECT_TRUE(r.overwritten.empty()) << fmt::format("{}", fmt::join(r.overwritten, ", "));
    return true;
  } catch (const Error& e) {
    const std::string_view what = e.what();
    EXPECT_TRUE(what.starts_with(std::string(op_name) + ": ")) << what;
    EXPECT_EQ(what.find("internal error"), std::string_view::npos) << what;
    return false;
  }
}

struct Sweep {
  int ran = 0, refused = 0;
  void over(Runtime& rt, const char* op_name, const char* shapes, DType dtype, ScalarList scalars = {}) {
    const OpDef& op = find_op(op_name);
    const std::vector<TensorSpec> specs = op.specs_from_shapes(dtype, parse_shapes(op, shapes));
    for (std::size_t i = 0; i < specs.size(); ++i)
      for (const Placement place : {Placement{.offset = 1}, Placement{.pad = 3}, Placement{.pad = 8}})
        if (specs[i].numel() != 0) ++(runs_or_says_why(rt, op_name, shapes, dtype, scalars, i, place) ? ran : refused);
  }
};

TEST(CheckOp, EveryOpWithEachTensorMisplacedRunsOrSaysWhy) {
  if (!test::on_cpu_device() && !device_available()) GTEST_SKIP() << "no GPU or no CUDA driver on this machine";
  test::TempDir cache;
  Runtime rt(options(cache, test::test_device()));
  Sweep sweep;
  for (const OddCase& c :
       kCases)  // but the 4097-row cases: their 17-row siblings take the same paths in 1/200 the time
    if (std::string_view(c.shapes).find("4097x") == std::string_view::npos)
      sweep.over(rt, c.op, c.shapes, find_op(c.op).dtypes().front(), c.scalars);
  for (const OddCase& c : kCases)  // the 16-bit paths: GEMMs on tensor cores (cp.async), wider vectors
    if (std::string_view(c.op).find("gemm") != std::string_view::npos || c.op == std::string_view("linear"))
      sweep.over(rt, c.op, c.shapes, DType::bf16, c.scalars);
  // q, k and v as slices of a fused projection are the case that matters: pad 8 in dim 0 is one.
  sweep.over(rt, "sdpa", "q=17x4x64 k=17x1x64", DType::bf16);
  sweep.over(rt, "paged_prefill_gqa", "q=20x4x64 k_cache=8x8x1x64 cu_seqlens_q=3 block_tables=2x4", DType::f16);
  sweep.over(rt, "paged_decode_gqa", "q=2x4x64 k_cache=8x16x1x64 block_tables=2x4 lse=4x2", DType::bf16);
  // The vocabulary, the logits and each of a batch's parameters placed alone; what each op accepts is its own,
  // that both kinds stay common is a check on the sweep itself (at 2026-11-29: 427 ran, 347 refused).
  EXPECT_GE(sweep.ran, 400);
  EXPECT_GE(sweep.refused, 300);
}

// The sm_90a paths (TMA needs 16-byte aligned rows and starts: they must fall back or refuse).
TEST(CheckOp, HopperPathWithEachTensorMisplacedRunsOrSaysWhy) {
  if (!test::on_cpu_device()) GTEST_SKIP() << "misplaced tensors on the sm_90a path run on the CPU device's sm_90a";
  test::TempDir cache;
  Runtime rt(options(cache, "cpu:sm_90a"));
  Sweep sweep;
  sweep.over(rt, "gemm", "a=130x72 b=72x136", DType::bf16, {{"path", 90}});
  sweep.over(rt, "linear", "x=17x200 weight=136x200 bias=136", DType::bf16, {{"path", 90}});
  sweep.over(rt, "sdpa", "q=130x4x128 k=130x1x128", DType::bf16);
  sweep.over(rt, "group_gemm_weight_grad", "grad_out=300x136 x=300x200 offsets=6", DType::bf16);
  EXPECT_GE(sweep.ran, 25);  // 29 on 2026-11-29, 19 refused
}

TEST(CheckOp, HopperPathAtOddShapes) {
  test::TempDir cache;
  std::string device = test::test_device();
  if (test::on_cpu_device())
    device = "cpu:sm_90a";
  else if (!device_available() || !(Device::open(0).target() == Target::parse("sm_90a")))
    GTEST_SKIP() << "the sm_90a path needs a Hopper GPU (or no GPU: the CPU device emulates one)";
  Runtime rt(options(cache, device));
  const auto graph_pass = [](Runtime& rt, const char* op, const char* shapes, DType dtype, ScalarList scalars) {
    expect_pass(rt, op, shapes, dtype, scalars, CheckLaunch::graph);
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    graph_pass(rt, "gemm", "a=130x72 b=72x136", dtype, {{"path", 90}});
    graph_pass(rt, "gemm", "a=72x200 b=264x72 c=200x264", dtype, {{"path", 90}, {"trans_a", 1}, {"trans_b", 1}});
    graph_pass(rt, "linear", "x=17x200 weight=300x200 bias=300", dtype, {{"path", 90}, {"activation", 1}});
    graph_pass(rt, "group_gemm", "x=300x72 weight=3x136x72 offsets=4", dtype, {{"path", 90}});
    graph_pass(rt, "group_gemm", "x=300x72 weight=3x136x72 offsets=4 out=300x68", dtype,
               {{"path", 90}, {"gated_activation", 3}});
    graph_pass(rt, "group_gemm", "x=300x72 weight=3x72x136 offsets=4 out=300x136", dtype,
               {{"path", 90}, {"weight_kn", 1}});
    graph_pass(rt, "moe_mlp", "x=130x64 ids=130x4 w13=8x128x64", dtype, {{"path", 90}});
    graph_pass(rt, "linear_cross_entropy", "hidden=130x64 weight=300x64", dtype, {{"path", 90}, {"vocab_chunk", 128}});
    graph_pass(rt, "linear_cross_entropy_backward", "hidden=130x64 weight=300x64", dtype,
               {{"path", 90}, {"vocab_chunk", 128}, {"softcap", 3.0}});
  }
  // The fused loss's backward with the products' configuration of the full-size plan (8192 tokens, hidden
  // 4096, vocabulary 151,936: 19 slices): 128x256 tiles, 4 stages, MN-major A (grad_weight) and B (logits,
  // grad_hidden), K loops of 8 steps that wrap the stage ring, and a last slice of 384 columns (as 4480 there,
  // 128 past a multiple of 256), in 5 slices.
  graph_pass(rt, "linear_cross_entropy_backward", "hidden=512x512 weight=2432x512", DType::bf16,
             {{"path", 90}, {"vocab_chunk", 512}});
  // The experts' weight gradients on the full-size configuration (128x256 tiles, 4 stages: 33 groups of
  // [256, 512] fill 132 units), over groups of random sizes: each group's last k tile copied with cp.async into
  // two boxes of A and four of B.
  graph_pass(rt, "group_gemm_weight_grad", "grad_out=1500x256 x=1500x512 offsets=34", DType::bf16, {{"path", 90}});
}

// The same kernels on an emulated Hopper of 2 SMs, so that the persistent sm_90a GEMM's blocks each loop over
// several tiles (on 132 SMs these shapes give every block one): the stage ring and its phases carried from
// tile to tile, group_gemm's groups' row tiles, the weight gradients' groups (the producer warpgroup copying
// their last k tiles in the ring's turn), a partial row tile after full ones, a K split's units of unequal k ranges (10
// k tiles in 4, 4 and 2) one after another. On a GPU the large shapes of the GPU tests do this.
TEST(CheckOp, HopperPathWithBlocksLoopingOverTiles) {
  if (!test::on_cpu_device()) GTEST_SKIP() << "the emulated GPU's SM count is the CPU device's";
  test::TempDir cache;
  Runtime rt(options(cache, "cpu:sm_90a,sms=2"));
  ASSERT_EQ(rt.device().sm_count(), 2);
  const DType d = DType::bf16;
  expect_pass(rt, "gemm", "a=130x72 b=72x136", d, {{"path", 90}});
  expect_pass(rt, "gemm", "a=72x200 b=264x72 c=200x264", d, {{"path", 90}, {"trans_a", 1}, {"trans_b", 1}});
  expect_pass(rt, "linear", "x=130x200 weight=300x200 bias=300", d, {{"path", 90}, {"activation", 1}});
  expect_pass(rt, "linear", "x=130x640 weight=100x640 bias=100 residual=130x100", d,
              {{"path", 90}, {"activation", 3}, {"splits", 3}});
  expect_pass(rt, "group_gemm", "x=300x72 weight=3x136x72 offsets=4", d, {{"path", 90}});
  expect_pass(rt, "group_gemm", "x=300x72 weight=3x72x136 offsets=4 out=300x136", d, {{"path", 90}, {"weight_kn", 1}});
  expect_pass(rt, "moe_mlp", "x=130x64 ids=130x4 w13=8x128x64", d, {{"path", 90}});
  expect_pass(rt, "group_gemm_weight_grad", "grad_out=300x136 x=300x200 offsets=6", d, {{"path", 90}});
  expect_pass(rt, "linear_cross_entropy_backward", "hidden=512x512 weight=2432x512", d,
              {{"path", 90}, {"vocab_chunk", 512}}, CheckLaunch::graph);
  // The persistent prefill (persistent=1): each block takes every second (tile, KV head) in the longest-first
  // order, its ring's stages and phases, the consumers' turns and their Q tiles carried from one to the next;
  // causal over two sequences with lse (24 row tiles), without a mask (key tiles of 176), and a cache of
  // one-token blocks, gathered, with a window.
  expect_pass(rt, "sdpa", "q=300x8x128 k=500x2x128 cu_seqlens_q=3 cu_seqlens_k=3 lse=8x300", d, {{"persistent", 1}});
  expect_pass(rt, "sdpa", "q=400x4x64 k=300x2x64 sinks=4", d, {{"causal", 0}, {"persistent", 1}});
  expect_pass(rt, "paged_prefill_gqa", "q=200x4x96 k_cache=600x1x2x96 cu_seqlens_q=3 block_tables=2x290", d,
              {{"window", 100}, {"persistent", 1}});
}

// The check library covers every built-in op, each check for its own op; any other name is an UnknownOpError.
TEST(CheckOp, EveryOpHasItsCheck) {
  for (const OpDef* op : all_ops()) EXPECT_EQ(&find_check(op->name()).op(), op) << op->name();
  EXPECT_THROW(
      {
        try {
          find_check("rms_nrom");
        } catch (const UnknownOpError& e) {
          EXPECT_NE(std::string(e.what()).find("unknown op 'rms_nrom'"), std::string::npos) << e.what();
          throw;
        }
      },
      UnknownOpError);
}

// check_op of rms_norm f32 [3, 64] on the CPU device, its template with `from` replaced by `to`.
CheckReport check_rms_norm_variant(const char* from, const char* to, std::span<const Placement> placements = {}) {
  test::TempDir cache, templates;
  EXPECT_GT(test::write_template_variant(templates.path(), "rms_norm.cu", from, to), 0)
      << "rms_norm.cu changed: update this test";
  RuntimeOptions o = options(cache, "cpu");
  o.template_paths = {templates.path()};
  Runtime rt(o);
  const TensorSpec x(DType::f32, {3, 64}), w(DType::f32, {64});
  const std::vector<TensorSpec> specs = {x, x, w};
  return check_op(rt, "rms_norm", specs, {}, 0, CheckLaunch::direct, placements);
}

TEST(CheckOp, ReportsAMismatch) {
  // A kernel template whose rms_norm forgets the weight: check_op (and so `mojo-jit run`) says so.
  const CheckReport r = check_rms_norm_variant("mojo::to_float(w.v[j])", "1.f");
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].name, "out");
  EXPECT_GT(r.outputs[0].wrong, 0u);
  EXPECT_GT(r.outputs[0].max_rel, 0.01);
  EXPECT_FALSE(r.pass());
}

// What check_op reports besides wrong results: an rms_norm that steps through its output rows by the hidden size
// plus a vector (whatever out's row stride: into a padded out's gaps), and one that also writes its result over x.
TEST(CheckOp, ReportsWritesOutsideTheViewsAndIntoInputs) {
  const Placement padded_out[] = {{.pad = 8}, {}, {}};
  const CheckReport strayed =
      check_rms_norm_variant("T* outr = out + r * out_stride;", "T* outr = out + r * (HIDDEN + VEC);", padded_out);
  EXPECT_EQ(strayed.overwritten, std::vector<std::string>({"out (bytes outside its view, first launch)",
                                                           "out (bytes outside its view, second launch)"}));
  EXPECT_FALSE(strayed.pass());
  const CheckReport over_x = check_rms_norm_variant("mojo::store<T, VEC>(outr + v * VEC, o);",
                                                    "mojo::store<T, VEC>(outr + v * VEC, o); "
                                                    "mojo::store<T, VEC>(const_cast<T*>(xr) + v * VEC, o);",
                                                    {});
  EXPECT_EQ(over_x.outputs[0].wrong, 0u);
  EXPECT_EQ(over_x.overwritten, std::vector<std::string>({"x (an input's elements, first launch)",
                                                          "x (an input's elements, second launch)"}));
  EXPECT_FALSE(over_x.pass());
  // The same stray rows a float further: every vector of row 1 misaligned. A GPU stops at the first with
  // "misaligned address"; so does the CPU device (an x86 aligned move crashed the test process).
  try {
    check_rms_norm_variant("T* outr = out + r * out_stride;", "T* outr = out + r * (HIDDEN + 1);", padded_out);
    ADD_FAILURE() << "a misaligned vector store ran";
  } catch (const DeviceError& e) {
    const std::string_view what = e.what();
    EXPECT_TRUE(what.starts_with("cpu device: kernel rms_norm_f32_hidden_64_vec_4_threads_16_rows_8: block (")) << what;
    EXPECT_NE(what.find("a 16-byte vector store at 0x"), std::string_view::npos) << what;
    EXPECT_TRUE(what.ends_with("is not 16-byte aligned (misaligned address)")) << what;
  }
}

// Under the TSan build each GPU thread is a fiber that TSan orders only by the
// kernel's own synchronisation (src/device/cpu/race.hpp), so a race any
// kernel could run into on a GPU is reported. Every case above at its first
// dtype, except the largest shapes, plus the attention kernels (their split
// decode at the shape the H100's racecheck flagged). Elsewhere the test
// above covers these.
TEST(CheckOp, EveryKernelUnderTheRaceDetector) {
#if !MOJO_TSAN
  GTEST_SKIP() << "the race detector is the TSan build's (cmake --preset tsan); CheckOp.EveryOpAndDtypeAtOddShapes "
                  "runs these cases here";
#else
  if (!test::on_cpu_device()) GTEST_SKIP() << "the race detector is the CPU device's";
  test::TempDir cache;
  Runtime rt(options(cache, "cpu"));
  for (const OddCase& c : kCases) {
    const std::string_view shapes = c.shapes;
    if (shapes.find("4097") != std::string_view::npos || shapes.find("151936") != std::string_view::npos) continue;
    expect_pass(rt, c.op, c.shapes, find_op(c.op).dtypes().front(), c.scalars);
  }
  expect_pass(rt, "sdpa", "q=40x4x64 k=40x2x64", DType::bf16, {});
  // 3 blocks a row, merged by the last to arrive: phases 1.. in one cooperative launch (the blocks on OS threads of
  // their own, meeting at barriers), and a launch a phase
  expect_pass(rt, "sample", "logits=2x3000", DType::f32, {});
  expect_pass(rt, "sample", "logits=40x3000", DType::f32, {});
  // Few long rows in one cooperative launch: 3 and 5 blocks a row, meeting at a barrier, the last one out
  // clearing the row's sync words
  expect_pass(rt, "softmax", "x=2x3000", DType::f32, {});
  expect_pass(rt, "softmax_backward", "out=1x5000", DType::f32, {});
  expect_pass(rt, "paged_decode_gqa", "q=1x8x64 k_cache=300x16x1x64 block_tables=1x257", DType::bf16, {});
  expect_pass(rt, "paged_decode_gqa", "q=2x4x128 k_cache=40x16x1x128 block_tables=2x20 sinks=4", DType::bf16, {});
  Runtime hopper(options(cache, "cpu:sm_90a"));
  expect_pass(hopper, "gemm", "a=130x72 b=72x136", DType::bf16, {{"path", 90}});
  expect_pass(hopper, "sdpa", "q=130x2x128 k=130x1x128", DType::bf16, {});
  // Three consumers taking turns (query tiles of 192), and the producer warpgroup gathering a paged cache of
  // one-token blocks with cp.async (its named barrier, its proxy fences, the stage's barrier after them).
  expect_pass(hopper, "sdpa", "q=200x2x64 k=200x1x64", DType::bf16, {{"query_tile", 192}});
  expect_pass(hopper, "paged_prefill_gqa", "q=100x2x64 k_cache=400x1x1x64 cu_seqlens_q=3 block_tables=2x180",
              DType::bf16, {});
  // A persistent grid on 2 SMs: each row tile handed to the producer and the consumers through a slot that the
  // next one overwrites only when all of them read it (with the slot's "empty" barrier counting the producer's
  // read alone, the race detector names the write and a consumer's read).
  Runtime two_sms(options(cache, "cpu:sm_90a,sms=2"));
  expect_pass(two_sms, "sdpa", "q=130x2x64 k=130x1x64 cu_seqlens_q=3 cu_seqlens_k=3", DType::bf16, {{"persistent", 1}});
#endif
}

// Each output in turn written over each input of its shape and dtype, as an engine reusing buffers does: the
// outputs an op declares in place of that input (TensorArgInfo::in_place_of) give the reference's result, and
// the rest are refused at launch, before they silently read what they wrote (moe_dispatch's positions over ids
// and the fused loss's grad_weight over weight did, before 2026-11-29). Also the few-long-rows plans of the
// softmaxes, where one row is split over blocks.
TEST(CheckOp, EveryOutputOverEachInputRunsInPlaceOrIsRefused) {
  if (!test::on_cpu_device() && !device_available()) GTEST_SKIP() << "no GPU or no CUDA driver on this machine";
  test::TempDir cache;
  Runtime rt(options(cache, test::test_device()));
  std::vector<OddCase> cases;
  for (const OddCase& c : kCases)
    if (std::string_view(c.shapes).find("4097x") == std::string_view::npos) cases.push_back(c);
  cases.push_back({"silu", "x=17x896"});  // its kCases row has 4097 rows
  cases.push_back({"linear", "x=17x200 weight=136x200 residual=17x136", {{"activation", 3}}});
  for (const char* op : {"softmax", "log_softmax"}) cases.push_back({op, "x=2x151936"});
  cases.push_back({"softmax_backward", "out=2x151936"});
  std::set<std::string> in_place;
  int refused = 0;
  for (const OddCase& c : cases) {
    const OpDef& op = find_op(c.op);
    const auto infos = op.tensor_args();
    const std::vector<TensorSpec> specs = op.specs_from_shapes(op.dtypes().front(), parse_shapes(op, c.shapes));
    for (std::size_t o = 0; o < specs.size(); ++o)
      for (std::size_t i = 0; i < specs.size(); ++i) {
        if (infos[o].role == std::string_view("in") || infos[i].role != std::string_view("in") ||
            specs[o].rank() == 0 || specs[o].numel() == 0 || !(specs[o] == specs[i]))
          continue;
        SCOPED_TRACE(fmt::format("{} {}: {} over {}", c.op, c.shapes, infos[o].name, infos[i].name));
        std::vector<Placement> placements(specs.size());
        placements[o].in_place_of = std::int64_t(i);
        try {
          const CheckReport r = check_op(rt, c.op, specs, c.scalars, 11, CheckLaunch::direct, placements);
          EXPECT_EQ(infos[o].in_place_of, infos[i].name) << "ran, but the op does not declare it";
          for (const auto& out : r.outputs) EXPECT_EQ(out.wrong, 0u) << out.name;
          EXPECT_TRUE(r.overwritten.empty()) << fmt::format("{}", fmt::join(r.overwritten, ", "));
          in_place.insert(fmt::format("{}.{}", c.op, infos[o].name));
        } catch (const InvalidArgumentError& e) {
          EXPECT_NE(infos[o].in_place_of, infos[i].name) << e.what();
          EXPECT_TRUE(std::string_view(e.what()).starts_with(
              fmt::format("{}: {} and {} share memory; give {} memory of its own", c.op, infos[o].name, infos[i].name,
                          infos[o].name)))
              << e.what();
          ++refused;
        }
      }
  }
  // Every declaration ran in place at least once.
  for (const OpDef* op : all_ops())
    for (const TensorArgInfo& t : op->tensor_args())
      if (!t.in_place_of.empty())
        EXPECT_EQ(in_place.count(fmt::format("{}.{}", op->name(), t.name)), 1u) << op->name() << "." << t.name;
  EXPECT_GE(refused, 30);
}
