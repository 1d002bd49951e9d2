// moe_mlp: the routed experts' MLP of a MoE layer as one op, a plan of five
// kernels sharing a workspace:
//   0 sort      moe_dispatch's counting sort of the (token, slot) pairs by expert
//   1 gather    x's rows in that order
//   2 up        group_gemm of the gate/up weights, act-and-mul fused (gated)
//   3 down      group_gemm of the down weights
//   4 combine   the weighted sum back to token order
// Template: kernel_templates/moe_mlp.cu (moe.cu and gemm.cu).
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "embedding_args.h"
#include "moe_args.h"
#include "mojo/error.hpp"
#include "mojo_activation.h"
#include "ops/checks.hpp"
#include "ops/gemm_tile.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "ops/cost.hpp"

namespace mojo {
namespace {

constexpr DType kF32[] = {DType::f32};

constexpr TensorArgInfo kMlpTensors[] = {
    {"out", "out", "[tokens, hidden], x's dtype: the weighted sum of each token's experts"},
    {"x", "in", "[tokens, hidden] f16 or bf16 (tensor cores), or f32 (exact, CUDA cores); contiguous"},
    {"ids", "in", "i32 or i64 [tokens, top_k]: moe_gate's experts (a negative id routes nowhere)"},
    {"weights", "in", "f32 [tokens, top_k]: moe_gate's weights"},
    {"w13", "in", "[experts, 2 x inter, hidden]: gate and up rows interleaved (row 2j gate_j, 2j + 1 up_j)"},
    {"w2", "in", "[experts, hidden, inter]: the down projections"},
};
constexpr ScalarArgInfo kMlpScalars[] = {
    {"activation", 3, "the gate's activation: 1 gelu, 2 gelu (tanh), 3 silu"},
    {"path", 0, "the products' path: 0 the heuristic, 80 the sm_80 path, 90 the sm_90a path"},
};
constexpr OpInfo kMlp{
    .name = "moe_mlp",
    .summary =
        "out[t] = sum over t's experts e of weight * w2[e] (act(gate_e x) * up_e x): sort, gather, gated "
        "group_gemm, group_gemm, combine as one plan",
    .tensors = kMlpTensors,
    .scalars = kMlpScalars,
    .dtypes = kTileInputTypes,
    .template_file = "moe_mlp.cu",
    .example_shapes = "x=4096x2048 ids=4096x8 w13=128x1536x2048",
};

// The tensors' places in kMlpTensors.
constexpr std::size_t kOut = slot(kMlpTensors, "out");
constexpr std::size_t kX = slot(kMlpTensors, "x");
constexpr std::size_t kIds = slot(kMlpTensors, "ids");
constexpr std::size_t kWeights = slot(kMlpTensors, "weights");
constexpr std::size_t kW13 = slot(kMlpTensors, "w13");
constexpr std::size_t kW2 = slot(kMlpTensors, "w2");

enum Step { kSort = 0, kGather = 1, kUp = 2, kDown = 3, kCombine = 4 };
constexpr std::int64_t kSortThreads = 256;

// The workspace: the sort's tables, then the rows each product reads and writes (from the tensors: a
// step's params are its kernel's).
struct MlpWorkspace {
  std::size_t offsets, sorted_ids, positions, sorted_x, act, expert_out, bytes;
};
MlpWorkspace layout(TensorList t) {
  const TensorSpec &x = t[kX].spec, &ids = t[kIds].spec, &w13 = t[kW13].spec;
  const std::int64_t pairs = ids.numel(), hidden = x.dim(1), inter = w13.dim(1) / 2;
  const std::size_t index = dtype_size(ids.dtype()), es = dtype_size(x.dtype());
  const auto round = [](std::size_t b) { return (b + 255) / 256 * 256; };
  MlpWorkspace w{};
  w.offsets = 0;
  w.sorted_ids = round(std::size_t(w13.dim(0) + 1) * index);
  w.positions = w.sorted_ids + round(std::size_t(pairs) * index);
  w.sorted_x = w.positions + round(std::size_t(pairs) * index);
  w.act = w.sorted_x + round(std::size_t(pairs * hidden) * es);
  w.expert_out = w.sorted_x;  // the down product writes where the up product has finished reading
  w.bytes = w.act + round(std::size_t(pairs * inter) * es);
  return w;
}

class MoeMlp final : public OpDef {
 public:
  MoeMlp() : OpDef(kMlp) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const TensorSpec &out = t[kOut].spec, &x = t[kX].spec, &w13 = t[kW13].spec, &w2 = t[kW2].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kTileInputTypes);
    if (x.rank() != 2 || x.dim(1) < 1)
      throw ShapeError(fmt::format("{}: x is {}; expected [tokens, hidden]", name(), x.str()));
    const std::int64_t tokens = x.dim(0), hidden = x.dim(1);
    const DType same[] = {x.dtype()};
    checks::expect_exact(name(), "x", x, {tokens, hidden}, same);
    checks::expect_exact(name(), "out", out, {tokens, hidden}, same);
    checks::expect_dtype_in(name(), "ids", t[kIds].spec.dtype(), indices::kTypes);
    if (t[kIds].spec.rank() != 2 || t[kIds].spec.dim(0) != tokens || t[kIds].spec.dim(1) < 1 ||
        t[kIds].spec.dim(1) > 32)
      throw ShapeError(
          fmt::format("{}: ids is {}; expected [{}, top_k] with top_k <= 32", name(), t[kIds].spec.str(), tokens));
    const std::int64_t top_k = t[kIds].spec.dim(1);
    checks::expect_exact(name(), "ids", t[kIds].spec, {tokens, top_k}, indices::kTypes);
    checks::expect_exact(name(), "weights", t[kWeights].spec, {tokens, top_k}, kF32);
    if (w13.rank() != 3 || w13.dim(1) % 2 != 0 || w13.dim(2) != hidden || w13.dim(0) < 1 || w13.dim(0) > 4096)
      throw ShapeError(fmt::format("{}: w13 is {}; expected [experts, 2 x inter, {}] (1 to 4096 experts)", name(),
                                   w13.str(), hidden));
    const std::int64_t experts = w13.dim(0), inter = w13.dim(1) / 2;
    checks::expect_exact(name(), "w13", w13, {experts, 2 * inter, hidden}, same);
    checks::expect_exact(name(), "w2", w2, {experts, hidden, inter}, same);
    const double act = scalar(scalars, "activation");
    if (act != int(Act::gelu) && act != int(Act::gelu_tanh) && act != int(Act::silu))
      throw InvalidArgumentError(
          fmt::format("{}: activation is {}; expected 1 (gelu), 2 (gelu tanh) or 3 (silu)", name(), act));
    expect_tensor_cores(name(), x.dtype(), false, target);
    checked_dim(name(), "tokens x top_k", tokens * top_k);
    checked_dim(name(), "hidden", hidden);
    checked_dim(name(), "2 x inter", 2 * inter);
    const bool aligned = chunk_aligned(x.dtype(), t[kW13].data, {hidden, 2 * inter * hidden}) &&
                         chunk_aligned(x.dtype(), t[kW2].data, {inter, hidden * inter});
    Params p;
    p.add_dtype("dtype", x.dtype());
    p.add_dtype("index", t[kIds].spec.dtype());
    p.add("experts", experts);
    p.add("top_k", top_k);
    p.add("hidden", hidden);
    p.add("inter", inter);
    p.add("act", std::int64_t(act));
    // What the steps' own params follow from: the rows an expert typically gets (a power of two: the tile's
    // bucket), whether the weights allow 16-byte loads, x's and out's row alignment, the path and the target.
    p.add("typical", std::int64_t(std::bit_ceil(std::uint64_t(std::max<std::int64_t>(1, tokens * top_k / experts)))));
    p.add("aligned", aligned ? 1 : 0);
    p.add("row_align", rows::alignment(x.dtype(), {t[kOut], t[kX]}));
    p.add("path", std::int64_t(path_of(*this, scalars, wgmma_possible(target, x.dtype(), aligned, 1, 1, 1), target)));
    p.add("sm", target.sm);
    p.add("sm_a", target.arch_specific ? 1 : 0);
    return p;
  }

  std::vector<Params> plan(const Params& p) const override {
    const DType dtype = p.dtype("dtype"), index = p.dtype("index");
    const Target target{int(p.get("sm")), p.get("sm_a") != 0};
    const std::int64_t hidden = p.get("hidden"), inter = p.get("inter"), experts = p.get("experts");
    const rows::Layout row = rows::pick_aligned(hidden, dtype, unsigned(p.get("row_align")));
    const rows::Layout ws_row = rows::pick_aligned(hidden, dtype, 256);  // a row of the workspace

    Params sort;
    sort.add_dtype("index", index);
    sort.add("experts", experts);
    sort.add("top_k", p.get("top_k"));
    sort.add("threads", kSortThreads);
    sort.add("step", kSort);

    Params gather;
    gather.add_dtype("dtype", dtype);
    gather.add_dtype("index", index);
    gather.add("hidden", hidden);
    gather.add("vec", std::min(row.vec, ws_row.vec));
    gather.add("gather_threads", row.threads);
    gather.add("rows", row.rows_per_block);
    gather.add("step", kGather);

    const auto product = [&](std::int64_t n, std::int64_t k, std::int64_t act, Step step) {
      const bool aligned = p.get("aligned") != 0;
      const bool wgmma_ok = wgmma_possible(target, dtype, aligned, p.get("typical"), n, k);
      const TileConfig tile =
          pick_tile(p.get("typical"), n * experts, k, dtype, false, target, wgmma_ok, 1, Path(p.get("path")));
      Params g;
      g.add_dtype("dtype", dtype);
      add_tile(g, tile);
      g.add("vec", vec_param(tile, aligned));
      g.add("offsets", std::int64_t(dtype_size(index)));
      g.add("tf32", 0);
      g.add("wgmma", tile.wgmma);
      g.add("act", act);
      g.add("tb", 1);  // the experts' weights stored [N, K]
      g.add("step", step);
      return g;
    };

    Params combine;
    combine.add_dtype("dtype", dtype);
    combine.add_dtype("index", index);
    rows::add_params(combine, "hidden", hidden, row);
    combine.add("top_k", p.get("top_k"));
    combine.add("step", kCombine);
    return {sort, gather, product(2 * inter, hidden, p.get("act") + kGated, kUp), product(hidden, inter, 0, kDown),
            combine};
  }

  std::string entry_macro(const Params& p) const override {
    switch (p.get("step")) {
      case kSort:
        return "MOJO_KERNEL_moe_dispatch";
      case kGather:
        return "MOJO_KERNEL_moe_dispatch_gather";
      case kCombine:
        return "MOJO_KERNEL_moe_combine";
      default:
        return p.get("wgmma") ? "MOJO_KERNEL_group_gemm_sm90" : "MOJO_KERNEL_group_gemm";
    }
  }
  unsigned max_dynamic_smem(const Params& p) const override {
    const Step step = Step(p.get_or("step", kSort));
    return step == kUp || step == kDown ? tile_of(p).smem_bytes() : 0;
  }
  std::size_t workspace_bytes(const Params&, TensorList t) const override { return layout(t).bytes; }

  // Each (token, expert) pair through w13 [E, 2I, H] and w2 [E, H, I]; the weights of as many experts as
  // there are pairs (at most all of them).
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    const double pairs = double(t[kIds].spec.numel());
    const TensorSpec &w13 = t[kW13].spec, &w2 = t[kW2].spec;
    c.flops = 2.0 * pairs * double(w13.dim(1) * w13.dim(2) + w2.dim(1) * w2.dim(2));
    const double weights = cost::rows(t[kW13], pairs) + cost::rows(t[kW2], pairs);
    cost::recount(c, cost::bytes(t[kW13]) + cost::bytes(t[kW2]), weights);
    c.weight_bytes = weights;
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const std::int64_t tokens = t[kX].spec.dim(0), top_k = t[kIds].spec.dim(1), pairs = tokens * top_k;
    const std::int64_t experts = t[kW13].spec.dim(0), hidden = t[kX].spec.dim(1), inter = t[kW13].spec.dim(1) / 2;
    LaunchGeometry g;
    switch (p.get("step")) {
      case kSort:
        g.grid.x = unsigned(experts);
        g.block.x = unsigned(p.get("threads"));
        return g;
      case kGather:
        g.grid.x = unsigned((pairs + p.get("rows") - 1) / p.get("rows"));
        g.block.x = unsigned(p.get("gather_threads") * p.get("rows"));
        return g;
      case kUp:
        return group_tile_geometry(p, pairs, 2 * inter, experts);
      case kDown:
        return group_tile_geometry(p, pairs, hidden, experts);
      default:
        return rows::geometry(tokens, p);
    }
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace& workspace,
                 KernelArgs& args) const override {
    if (workspace.scratch == 0) throw InternalError("moe_mlp's plan without its workspace");
    const std::int64_t tokens = t[kX].spec.dim(0), top_k = t[kIds].spec.dim(1), pairs = tokens * top_k;
    const std::int64_t experts = t[kW13].spec.dim(0), hidden = t[kX].spec.dim(1), inter = t[kW13].spec.dim(1) / 2;
    const MlpWorkspace w = layout(t);
    const DevicePtr base = workspace.scratch;
    const DevicePtr offsets = base + w.offsets, sorted_ids = base + w.sorted_ids, positions = base + w.positions,
                    sorted_x = base + w.sorted_x, act = base + w.act, expert_out = base + w.expert_out;
    switch (p.get("step")) {
      case kSort:
        checks::expect_pointer(name(), "ids", t[kIds], unsigned(dtype_size(t[kIds].spec.dtype())));
        args.push_args(mojo_moe::DispatchArgs<void>{
            .offsets = ptr(offsets),
            .sorted_ids = ptr(sorted_ids),
            .positions = ptr(positions),
            .ids = ptr(t[kIds]),
            .pairs = pairs,
        });
        return;
      case kGather:
        checks::expect_pointer(name(), "x", t[kX], checks::vector_bytes(p));
        args.push_args(mojo_embedding::Args<void, void>{
            .out = ptr(sorted_x),
            .ids = ptr(sorted_ids),
            .weight = ptr(t[kX]),
            .tokens = pairs,
            .vocab = tokens,
        });
        return;
      case kUp:
      case kDown: {
        const bool up = p.get("step") == kUp;
        const std::int64_t n = up ? 2 * inter : hidden, k = up ? hidden : inter;
        checks::expect_pointer(name(), up ? "w13" : "w2", t[up ? 4 : 5], p.get("vec") == 8 ? 16 : 2);
        push_kernel_args(args,
                         {.c = up ? act : expert_out,
                          .a = up ? sorted_x : act,
                          .b = t[up ? 4 : 5].data,
                          .m = pairs,
                          .n = n,
                          .k = k,
                          .lda = k,
                          .ldb = k,
                          .ldc = up ? inter : hidden,
                          .batch_b = n * k,
                          .offsets = offsets,
                          .total_rows = pairs,
                          .batches = experts},
                         p);
        return;
      }
      default:
        checks::expect_pointer(name(), "out", t[kOut], checks::vector_bytes(p));
        checks::expect_pointer(name(), "weights", t[kWeights], 4);
        args.push_args(mojo_moe::CombineArgs<void, void>{
            .out = ptr(t[kOut]),
            .expert_out = ptr(expert_out),
            .positions = ptr(positions),
            .weights = ptr<float>(t[kWeights]),
            .tokens = tokens,
        });
        return;
    }
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "ids", t[kIds], t[kW13].spec.dim(0), true, stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const auto& ids = shapes::required(name(), shapes, "ids", example_shapes());
    const auto& w13 = shapes::required(name(), shapes, "w13", example_shapes());
    if (x.size() != 2 || w13.size() != 3)
      throw ShapeError(fmt::format("{}: give x as TOKENSxHIDDEN and w13 as EXPERTSx2INTERxHIDDEN", name()));
    return {TensorSpec(dtype, x),        TensorSpec(dtype, x),
            TensorSpec(DType::i64, ids), TensorSpec(DType::f32, ids),
            TensorSpec(dtype, w13),      TensorSpec(dtype, shapes::value_or(shapes, "w2", {w13[0], x[1], w13[1] / 2}))};
  }
};

}  // namespace

const OpDef& moe_mlp_op() {
  static const MoeMlp op;
  return op;
}

}  // namespace mojo
