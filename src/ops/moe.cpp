// MoE routing: moe_gate (experts and weights per token), moe_dispatch (the
// tokens sorted by expert for group_gemm, optionally gathered) and
// moe_combine (the weighted sum back in token order).
// Template: kernel_templates/moe.cu.
#include <fmt/format.h>

#include "embedding_args.h"
#include "moe_args.h"
#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"
#include "ops/moe.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "ops/cost.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr DType kF32[] = {DType::f32};

// [tokens, top_k] (i32 or i64) routing ids or positions; returns {tokens, top_k}.
std::pair<std::int64_t, std::int64_t> routing_shape(std::string_view op, std::string_view arg, const TensorSpec& t) {
  checks::expect_dtype_in(op, arg, t.dtype(), indices::kTypes);
  if (t.rank() != 2 || t.dim(1) < 1 || t.dim(1) > 32 || !t.is_contiguous() || t.dim(0) > INT32_MAX)
    throw ShapeError(
        fmt::format("{}: {} is {}; expected a contiguous [tokens, top_k] with top_k <= 32", op, arg, t.str()));
  return {t.dim(0), t.dim(1)};
}

// ---- moe_gate ------------------------------------------------------------------

constexpr TensorArgInfo kGateTensors[] = {
    {"weights", "out", "f32 [tokens, top_k]: each chosen expert's score, renormalized and scaled"},
    {"ids", "out", "i32 or i64 [tokens, top_k]: the chosen experts, best first"},
    {"logits", "in", "[tokens, experts] f32, f16 or bf16: the router's output (experts <= 512)"},
    {"bias", "in", "f32 [experts], optional: the score-correction bias that chooses (DeepSeek-V3), not weighs"},
};
constexpr ScalarArgInfo kGateScalars[] = {
    {"sigmoid", 0, "1: sigmoid scores (DeepSeek-V3); 0: softmax scores (Qwen, Mixtral)"},
    {"groups", 1, "expert groups (a divisor of experts, <= 32); > 1: grouped top-k"},
    {"top_groups", 0, "the groups whose experts take part (0: all)"},
    {"renormalize", 1, "1: the top_k weights sum to 1 (before the scaling)"},
    {"routed_scaling", 1.0, "a factor on every weight (DeepSeek-V3: 2.5)"},
};
constexpr OpInfo kGate{
    .name = "moe_gate",
    .summary =
        "the top_k experts of each token from the router's logits (softmax or sigmoid, grouped top-k, bias), "
        "with their weights",
    .tensors = kGateTensors,
    .scalars = kGateScalars,
    .dtypes = kFloatTypes,
    .template_file = "moe.cu",
    .example_shapes = "logits=4096x128 ids=4096x8",
};
constexpr std::int64_t kGateRows = 4;  // tokens (warps) per block

class MoeGate final : public OpDef {
  // Its tensors' places in kGateTensors.
  static constexpr std::size_t kWeights = slot(kGateTensors, "weights");
  static constexpr std::size_t kIds = slot(kGateTensors, "ids");
  static constexpr std::size_t kLogits = slot(kGateTensors, "logits");
  static constexpr std::size_t kBias = slot(kGateTensors, "bias");

 public:
  MoeGate() : OpDef(kGate) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target&) const override {
    const TensorSpec& logits = t[kLogits].spec;
    checks::expect_dtype_in(name(), "logits", logits.dtype(), kFloatTypes);
    if (logits.rank() != 2 || logits.dim(1) < 1 || logits.dim(1) > 512 || !logits.is_contiguous())
      throw ShapeError(fmt::format("{}: logits is {}; expected a contiguous [tokens, experts] with experts <= 512",
                                   name(), logits.str()));
    const auto [tokens, top_k] = routing_shape(name(), "ids", t[kIds].spec);
    checks::expect_exact(name(), "logits", logits, {tokens, logits.dim(1)}, kFloatTypes);
    checks::expect_exact(name(), "weights", t[kWeights].spec, {tokens, top_k}, kF32);
    if (t[kBias].spec.rank() != 0) checks::expect_exact(name(), "bias", t[kBias].spec, {logits.dim(1)}, kF32);
    const std::vector<TensorSpec> specs = {t[kWeights].spec, t[kIds].spec, logits, t[kBias].spec};
    const MoeGateConfig g = moe_gate_config(*this, specs, scalars);
    if (g.groups < 1 || g.groups > 32 || g.experts % g.groups != 0)
      throw InvalidArgumentError(
          fmt::format("{}: groups = {}; expected a divisor of the {} experts, 1 to 32", name(), g.groups, g.experts));
    if (g.top_groups < 1 || g.top_groups > g.groups)
      throw InvalidArgumentError(
          fmt::format("{}: top_groups = {}; expected 1 to groups ({})", name(), g.top_groups, g.groups));
    if (top_k > g.top_groups * (g.experts / g.groups))
      throw ShapeError(fmt::format("{}: top_k {} is more than the {} experts of the top {} groups", name(), top_k,
                                   g.top_groups * (g.experts / g.groups), g.top_groups));
    Params p;
    p.add_dtype("dtype", logits.dtype());
    p.add_dtype("index", t[kIds].spec.dtype());
    p.add("experts", g.experts);
    p.add("top_k", top_k);
    p.add("softmax", g.softmax ? 1 : 0);
    p.add("groups", g.groups);
    p.add("top_groups", g.top_groups);
    p.add("renormalize", g.renormalize ? 1 : 0);
    p.add("rows", kGateRows);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g;
    g.grid.x = unsigned((t[kLogits].spec.dim(0) + kGateRows - 1) / kGateRows);
    g.block.x = unsigned(32 * p.get("rows"));
    return g;
  }

  void pack_args(const Params&, TensorList t, ScalarList scalars, const Workspace&, KernelArgs& args) const override {
    for (std::size_t i = 0; i < 3; ++i)
      checks::expect_pointer(name(), kGateTensors[i].name, t[i], unsigned(dtype_size(t[i].spec.dtype())));
    if (t[kBias].spec.rank() != 0) checks::expect_pointer(name(), "bias", t[kBias], 4);
    args.push_args(mojo_moe::GateArgs<void, void>{
        .weights = ptr<float>(t[kWeights]),
        .ids = ptr(t[kIds]),
        .logits = ptr(t[kLogits]),
        .bias = t[kBias].spec.rank() == 0 ? nullptr : ptr<float>(t[kBias]),
        .scaling = float(scalar(scalars, "routed_scaling")),
        .tokens = t[kLogits].spec.dim(0),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& logits = shapes::required(name(), shapes, "logits", example_shapes());
    const auto& ids = shapes::required(name(), shapes, "ids", example_shapes());
    return {TensorSpec(DType::f32, ids), TensorSpec(DType::i64, ids), TensorSpec(dtype, logits),
            shapes::optional(shapes, "bias", DType::f32)};
  }
};

// ---- moe_dispatch --------------------------------------------------------------

constexpr TensorArgInfo kDispatchTensors[] = {
    {"expert_offsets",
     "out",
     "[experts + 1], ids' dtype: expert e owns sorted rows [e, e + 1) (group_gemm's offsets)",
     {},
     "ids"},
    {"sorted_token_ids",
     "out",
     "[tokens * top_k], ids' dtype: the token of each sorted row (-1 past the routed rows)",
     {},
     "ids"},
    {"positions",
     "out",
     "[tokens, top_k], ids' dtype: the sorted row of each (token, slot) (-1: not routed)",
     {},
     "ids"},
    {"ids", "in", "i32 or i64 [tokens, top_k]: moe_gate's experts; a negative id is not routed"},
    {"sorted_x", "out", "[tokens * top_k, hidden], optional: x's rows in sorted order (zeros past the routed rows)"},
    {"x", "in", "[tokens, hidden] f32, f16 or bf16, optional (with sorted_x): the tokens' activations"},
};
constexpr OpInfo kDispatch{
    .name = "moe_dispatch",
    .summary =
        "the (token, slot) pairs sorted by expert (stable), each expert's first row and each pair's row; "
        "optionally the tokens gathered in that order",
    .tensors = kDispatchTensors,
    .dtypes = kFloatTypes,
    .template_file = "moe.cu",
    .example_shapes = "expert_offsets=129 ids=4096x8 x=4096x2048",
};
constexpr std::int64_t kDispatchThreads = 256;

class MoeDispatch final : public OpDef {
  // Its tensors' places in kDispatchTensors.
  static constexpr std::size_t kExpertOffsets = slot(kDispatchTensors, "expert_offsets");
  static constexpr std::size_t kSortedTokenIds = slot(kDispatchTensors, "sorted_token_ids");
  static constexpr std::size_t kPositions = slot(kDispatchTensors, "positions");
  static constexpr std::size_t kIds = slot(kDispatchTensors, "ids");
  static constexpr std::size_t kSortedX = slot(kDispatchTensors, "sorted_x");
  static constexpr std::size_t kX = slot(kDispatchTensors, "x");

 public:
  MoeDispatch() : OpDef(kDispatch) {}

  static bool gathers(const Params& p) { return p.get("gather") != 0; }

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const auto [tokens, top_k] = routing_shape(name(), "ids", t[kIds].spec);
    const DType index = t[kIds].spec.dtype();
    const DType id_type[] = {index};
    const std::int64_t experts = t[kExpertOffsets].spec.numel() - 1;
    if (t[kExpertOffsets].spec.rank() != 1 || experts < 1 || experts > 4096)
      throw ShapeError(fmt::format("{}: expert_offsets is {}; expected [experts + 1] with 1 to 4096 experts", name(),
                                   t[kExpertOffsets].spec.str()));
    checks::expect_exact(name(), "expert_offsets", t[kExpertOffsets].spec, {experts + 1}, id_type);
    checks::expect_exact(name(), "sorted_token_ids", t[kSortedTokenIds].spec, {tokens * top_k}, id_type);
    checks::expect_exact(name(), "positions", t[kPositions].spec, {tokens, top_k}, id_type);
    Params p;
    const bool gather = t[kSortedX].spec.rank() != 0 || t[kX].spec.rank() != 0;
    if (gather) p.add_dtype("dtype", t[kX].spec.dtype());  // the indices alone do not depend on it
    p.add_dtype("index", index);
    p.add("experts", experts);
    p.add("top_k", top_k);
    p.add("threads", kDispatchThreads);
    p.add("gather", gather ? 1 : 0);
    if (gather) {
      const TensorSpec &sorted_x = t[kSortedX].spec, &x = t[kX].spec;
      checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
      if (x.rank() != 2 || x.dim(0) != tokens)
        throw ShapeError(
            fmt::format("{}: x is {}; expected [{}, hidden] (one row per token)", name(), x.str(), tokens));
      const std::int64_t hidden = rows::cols_of(name(), "x", x);
      checks::expect_exact(name(), "x", x, {tokens, hidden}, kFloatTypes);
      const DType x_type[] = {x.dtype()};
      checks::expect_exact(name(), "sorted_x", sorted_x, {tokens * top_k, hidden}, x_type);
      const rows::Layout l = rows::pick(hidden, x.dtype(), {t[kSortedX], t[kX]});
      p.add("hidden", hidden);
      p.add("vec", l.vec);
      p.add("gather_threads", l.threads);
      p.add("rows", l.rows_per_block);
    }
    return p;
  }

  std::vector<Params> plan(const Params& p) const override {
    return gathers(p) ? two_steps(p) : std::vector<Params>{p};  // the sort, then the gather
  }
  std::string entry_macro(const Params& p) const override {
    return p.get_or("step", 0) == 1 ? "MOJO_KERNEL_moe_dispatch_gather" : OpDef::entry_macro(p);
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g;
    if (p.get_or("step", 0) == 1) {
      const std::int64_t rows = p.get("rows");
      g.grid.x = unsigned((t[kSortedTokenIds].spec.numel() + rows - 1) / rows);
      g.block.x = unsigned(p.get("gather_threads") * rows);
    } else {
      g.grid.x = unsigned(p.get("experts"));
      g.block.x = unsigned(p.get("threads"));
    }
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    const unsigned index_bytes = unsigned(dtype_size(t[kIds].spec.dtype()));
    for (std::size_t i = 0; i < 4; ++i) checks::expect_pointer(name(), kDispatchTensors[i].name, t[i], index_bytes);
    if (p.get_or("step", 0) == 1) {
      const unsigned bytes = checks::vector_bytes(p);
      checks::expect_pointer(name(), "sorted_x", t[kSortedX], bytes);
      checks::expect_pointer(name(), "x", t[kX], bytes);
      args.push_args(mojo_embedding::Args<void, void>{
          .out = ptr(t[kSortedX]),
          .ids = ptr(t[kSortedTokenIds]),
          .weight = ptr(t[kX]),
          .tokens = t[kSortedTokenIds].spec.numel(),
          .vocab = t[kX].spec.dim(0),
      });
      return;
    }
    args.push_args(mojo_moe::DispatchArgs<void>{
        .offsets = ptr(t[kExpertOffsets]),
        .sorted_ids = ptr(t[kSortedTokenIds]),
        .positions = ptr(t[kPositions]),
        .ids = ptr(t[kIds]),
        .pairs = t[kIds].spec.numel(),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "ids", t[kIds], t[kExpertOffsets].spec.numel() - 1, true, stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& offsets = shapes::required(name(), shapes, "expert_offsets", example_shapes());
    const auto& ids = shapes::required(name(), shapes, "ids", example_shapes());
    const std::int64_t pairs = ids.size() == 2 ? ids[0] * ids[1] : 0;
    const TensorSpec x = shapes::optional(shapes, "x", dtype);
    const TensorSpec sorted_x = x.rank() == 2 ? TensorSpec(dtype, {pairs, x.dim(1)}) : TensorSpec();
    return {TensorSpec(DType::i64, offsets),
            TensorSpec(DType::i64, {pairs}),
            TensorSpec(DType::i64, ids),
            TensorSpec(DType::i64, ids),
            sorted_x,
            x};
  }
};

// ---- moe_combine ---------------------------------------------------------------

constexpr TensorArgInfo kCombineTensors[] = {
    {"out", "out", "[tokens, hidden], expert_out's dtype, contiguous"},
    {"expert_out", "in", "[rows, hidden] f32, f16 or bf16: the experts' outputs in sorted order, contiguous"},
    {"positions", "in", "i32 or i64 [tokens, top_k]: moe_dispatch's rows of each (token, slot); negative: none"},
    {"weights", "in", "f32 [tokens, top_k]: moe_gate's weights"},
};
constexpr OpInfo kCombine{
    .name = "moe_combine",
    .summary = "out[t] = sum over k of weights[t, k] * expert_out[positions[t, k]], slots in order (deterministic)",
    .tensors = kCombineTensors,
    .dtypes = kFloatTypes,
    .template_file = "moe.cu",
    .example_shapes = "expert_out=32768x2048 positions=4096x8",
};

class MoeCombine final : public OpDef {
  // Its tensors' places in kCombineTensors.
  static constexpr std::size_t kOut = slot(kCombineTensors, "out");
  static constexpr std::size_t kExpertOut = slot(kCombineTensors, "expert_out");
  static constexpr std::size_t kPositions = slot(kCombineTensors, "positions");
  static constexpr std::size_t kWeights = slot(kCombineTensors, "weights");

 public:
  MoeCombine() : OpDef(kCombine) {}

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec &out = t[kOut].spec, &expert_out = t[kExpertOut].spec;
    checks::expect_dtype_in(name(), "expert_out", expert_out.dtype(), kFloatTypes);
    if (expert_out.rank() != 2)
      throw ShapeError(fmt::format("{}: expert_out is {}; expected [rows, hidden]", name(), expert_out.str()));
    const std::int64_t hidden = rows::cols_of(name(), "expert_out", expert_out);
    checks::expect_contiguous(name(), "expert_out", expert_out);
    const auto [tokens, top_k] = routing_shape(name(), "positions", t[kPositions].spec);
    const DType out_type[] = {expert_out.dtype()};
    checks::expect_exact(name(), "out", out, {tokens, hidden}, out_type);
    checks::expect_exact(name(), "weights", t[kWeights].spec, {tokens, top_k}, kF32);
    Params p;
    p.add_dtype("dtype", expert_out.dtype());
    p.add_dtype("index", t[kPositions].spec.dtype());
    rows::add_params(p, "hidden", hidden, rows::pick(hidden, expert_out.dtype(), {t[kOut], t[kExpertOut]}));
    p.add("top_k", top_k);
    return p;
  }

  // expert_out: only the rows the positions reach.
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    cost::recount(c, cost::bytes(t[kExpertOut]), cost::rows(t[kExpertOut], double(t[kPositions].spec.numel())));
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[kPositions].spec.dim(0), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    checks::expect_pointer(name(), "out", t[kOut], bytes);
    checks::expect_pointer(name(), "expert_out", t[kExpertOut], bytes);
    checks::expect_pointer(name(), "positions", t[kPositions], unsigned(dtype_size(t[kPositions].spec.dtype())));
    checks::expect_pointer(name(), "weights", t[kWeights], 4);
    args.push_args(mojo_moe::CombineArgs<void, void>{
        .out = ptr(t[kOut]),
        .expert_out = ptr(t[kExpertOut]),
        .positions = ptr(t[kPositions]),
        .weights = ptr<float>(t[kWeights]),
        .tokens = t[kPositions].spec.dim(0),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "positions", t[kPositions], t[kExpertOut].spec.dim(0), true, stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& expert_out = shapes::required(name(), shapes, "expert_out", example_shapes());
    const auto& positions = shapes::required(name(), shapes, "positions", example_shapes());
    const std::int64_t tokens = positions.empty() ? 0 : positions[0];
    return {TensorSpec(dtype, {tokens, expert_out.back()}), TensorSpec(dtype, expert_out),
            TensorSpec(DType::i64, positions), TensorSpec(DType::f32, positions)};
  }
};

}  // namespace

MoeGateConfig moe_gate_config(const OpDef& op, std::span<const TensorSpec> specs, ScalarList scalars) {
  const std::int64_t groups = op.whole_scalar(scalars, "groups"), top = op.whole_scalar(scalars, "top_groups");
  return {.experts = specs[2].dim(1),
          .top_k = specs[1].dim(1),
          .softmax = op.scalar(scalars, "sigmoid") == 0,
          .groups = groups,
          .top_groups = top == 0 ? groups : top,
          .renormalize = op.scalar(scalars, "renormalize") != 0,
          .scaling = op.scalar(scalars, "routed_scaling")};
}

const OpDef& moe_gate_op() {
  static const MoeGate op;
  return op;
}
const OpDef& moe_dispatch_op() {
  static const MoeDispatch op;
  return op;
}
const OpDef& moe_combine_op() {
  static const MoeCombine op;
  return op;
}

}  // namespace mojo
