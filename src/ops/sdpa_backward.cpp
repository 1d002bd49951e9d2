// sdpa_backward: the gradients of sdpa (q, k, v, and the sinks'), a plan of up to five kernels of one template
// (kernel_templates/sdpa_backward.cu, which says what each computes). Its forward tensors (q, k, v, out, lse,
// the lengths and sinks) are validated as sdpa validates them, by sdpa's own rules.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attention_args.h"
#include "mojo/error.hpp"
#include "ops/attention.hpp"
#include "ops/checks.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "sdpa_backward_args.h"

namespace mojo {
namespace {

constexpr ScalarArgInfo kScalars[] = {
    {"scale", 0.0, "the forward's logit scale; 0: 1 / sqrt(head_dim)"},
    {"window", -1.0, "the forward's sliding window; < 0: none"},
    {"softcap", 0.0, "the forward's logit soft-cap; 0: none"},
    {"causal", 1.0, "the forward's: 1 a query sees no later key (aligned at the sequences' ends); 0 every key"},
};
constexpr TensorArgInfo kTensors[] = {
    {"grad_q", "out", "[tokens, heads, head_dim], contiguous"},
    {"grad_k", "out", "[kv_tokens, kv_heads, head_dim], contiguous"},
    {"grad_v", "out", "like grad_k"},
    {"grad_out", "in", "[tokens, heads, head_dim], contiguous: out's gradient"},
    {"q", "in",
     "the forward's: [tokens, heads, head_dim] f16 or bf16, head_dim 64, 96, 128 or 256; tokens may be strided"},
    {"k", "in", "the forward's: [kv_tokens, kv_heads, head_dim]; tokens may be strided"},
    {"v", "in", "the forward's, like k"},
    {"out", "in", "the forward's output, [tokens, heads, head_dim], contiguous"},
    {"lse", "in", "the forward's: f32 [heads, tokens]"},
    {"cu_seqlens_q", "in", "the forward's: i32 [batch + 1], or absent: one sequence"},
    {"cu_seqlens_k", "in", "the forward's: i32 [batch + 1], or absent: those of q"},
    {"sinks", "in", "the forward's: f32 [heads], or absent"},
    {"grad_sinks", "out", "f32 [heads]: the sinks' gradient, or absent (given only with sinks)"},
    {"grad_lse", "in", "f32 [heads, tokens]: lse's own gradient, where a loss uses the lse, or absent"},
};
constexpr OpInfo kInfo{
    .name = "sdpa_backward",
    .summary = "the gradients of sdpa for q, k, v and the sinks, from grad_out and the forward's out and lse",
    .tensors = kTensors,
    .scalars = kScalars,
    .dtypes = attention::kTypes,
    .template_file = "sdpa_backward.cu",
    .example_shapes = "q=4096x32x128 k=4096x8x128",
};

enum Slot { kGradQ, kGradK, kGradV, kGradOut, kQ, kK, kV, kOut, kLse, kCuQ, kCuK, kSinks, kGradSinks, kGradLse };
enum Step { kDot, kKeys, kQueries, kSinksStep };
constexpr std::int64_t kWarps = 4, kThreads = 32 * kWarps;
constexpr DType kF32[] = {DType::f32};

class SdpaBackward final : public OpDef {
 public:
  SdpaBackward() : OpDef(kInfo) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const std::vector<Tensor> fwd = forward(t);
    // q, k, v, out, lse, the lengths, sinks and the scalars, by sdpa's rules
    const Params f = as_ours([&] { return sdpa_op().specialize(fwd, scalars, target); });
    const TensorSpec &q = t[kQ].spec, &k = t[kK].spec;
    const std::int64_t head_dim = q.dim(2);
    if (!present(t, kLse))
      throw ShapeError(fmt::format("{}: lse is required (the forward's, f32 [heads, tokens])", name()));
    const std::pair<Slot, Slot> same[] = {{kGradQ, kQ}, {kGradOut, kQ}, {kGradK, kK}, {kGradV, kK}};
    for (auto [grad, of] : same) {
      checks::expect_same_dtype(name(), arg(grad), t[grad].spec, arg(of), t[of].spec);
      checks::expect_same_shape(name(), arg(grad), t[grad].spec, arg(of), t[of].spec);
      checks::expect_contiguous(name(), arg(grad), t[grad].spec);
    }
    if (present(t, kGradSinks)) {
      const TensorSpec& g = t[kGradSinks].spec;
      if (!present(t, kSinks)) throw ShapeError(fmt::format("{}: grad_sinks is given without sinks", name()));
      checks::expect_exact(name(), "grad_sinks", g, {q.dim(1)}, kF32);
    }
    if (present(t, kGradLse)) checks::expect_exact(name(), "grad_lse", t[kGradLse].spec, {q.dim(1), q.dim(0)}, kF32);
    Params p;
    p.add_dtype("dtype", q.dtype());
    p.add("head_dim", head_dim);
    p.add("group", q.dim(1) / k.dim(1));
    for (const char* name : {"causal", "window", "softcap", "varlen"}) p.add(name, f.get(name));
    // Keys a block (a warp's 16 each), and the queries (key step) or keys (query step) a round: past head_dim 64
    // fewer, so that the accumulators (grad_k and grad_v, or grad_q) stay in a thread's registers, and at 256
    // the query step's tiles leave room for two blocks an SM on sm_90.
    p.add("bn", 16 * kWarps);
    p.add("bq", head_dim <= 64 ? 64 : 16);
    p.add("bk", head_dim <= 64 ? 64 : head_dim <= 128 ? 32 : 16);
    p.add("sinks", present(t, kGradSinks) ? 1 : 0);
    return p;
  }

  std::vector<Params> plan(const Params& p) const override {
    using namespace mojo_sdpa_backward;
    std::vector<Params> steps;
    auto add = [&](Step s, int part = -1) {
      Params step = p;
      step.add("step", s);
      if (part >= 0) step.add("part", part);
      steps.push_back(step);
    };
    add(kDot);
    if (p.get("head_dim") > 128) {
      add(kKeys, kGradVPart);
      add(kKeys, kGradKPart);
    } else {
      add(kKeys, kBothParts);
    }
    add(kQueries);
    if (p.get("sinks") != 0) add(kSinksStep);
    return steps;
  }

  std::size_t workspace_bytes(const Params&, TensorList t) const override {
    // D, for each (head, token); a word where there is none, so that the plan has its workspace all the same
    return std::size_t(std::max<std::int64_t>(t[kQ].spec.dim(0) * t[kQ].spec.dim(1), 1)) * sizeof(float);
  }

  unsigned max_dynamic_smem(const Params& p) const override {
    const int dp = int(attention::padded(p.get("head_dim")));
    switch (Step(p.get_or("step", kKeys))) {
      case kKeys:
        return mojo_sdpa_backward::smem_bytes(mojo_sdpa_backward::key_tiles_loaded(int(p.get_or("part", 0))),
                                              int(p.get("bn")), int(p.get("bq")), dp,
                                              mojo_sdpa_backward::kStages * int(p.get("bq")));
      case kQueries:
        return mojo_sdpa_backward::smem_bytes(2, int(16 * kWarps), int(p.get("bk")), dp, int(16 * kWarps));
      default:
        return 0;
    }
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const TensorSpec &q = t[kQ].spec, &k = t[kK].spec;
    const std::int64_t tokens = q.dim(0), heads = q.dim(1), kv_tokens = k.dim(0), kv_heads = k.dim(1);
    const int batch = int(batch_of(t));
    const bool varlen = p.get("varlen") != 0;
    LaunchGeometry g;
    g.block.x = unsigned(kThreads);
    switch (Step(p.get("step"))) {
      case kDot:
        g.grid.x = unsigned((tokens * heads + kWarps - 1) / kWarps);
        break;
      case kKeys:  // a block per key tile of a KV head, a part tile more for each sequence of a batch
        g.grid = {unsigned(mojo_attention::prefill_row_tiles(kv_tokens, 1, int(p.get("bn")), batch, varlen)),
                  unsigned(kv_heads), 1};
        break;
      case kQueries:  // a block per 64 packed query rows of a KV head
        g.grid = {
            unsigned(mojo_attention::prefill_row_tiles(tokens, int(p.get("group")), int(16 * kWarps), batch, varlen)),
            unsigned(kv_heads), 1};
        break;
      case kSinksStep:
        g.grid.x = unsigned(heads);
        break;
    }
    g.dynamic_smem = max_dynamic_smem(p);
    return g;
  }

  // FlashAttention-2's count: the backward's five products of the pairs, 2.5 times the forward's two.
  IdealCost ideal_cost(TensorList t, ScalarList scalars) const override {
    IdealCost c = OpDef::ideal_cost(t, scalars);
    c.flops = 2.5 * as_ours([&] { return sdpa_op().ideal_cost(forward(t), scalars); }).flops;
    return c;
  }

  void pack_args(const Params&, TensorList t, ScalarList scalars, const Workspace& workspace,
                 KernelArgs& args) const override {
    if (workspace.scratch == 0) throw InternalError(fmt::format("{}'s plan without its workspace", name()));
    for (Slot s : {kGradQ, kGradK, kGradV, kGradOut, kQ, kK, kV, kOut})
      checks::expect_pointer(name(), arg(s), t[s], 16);
    auto optional = [&](Slot s) {
      if (!present(t, s)) return DevicePtr(0);
      checks::expect_pointer(name(), arg(s), t[s], 4);
      return t[s].data;
    };
    const DevicePtr lse = optional(kLse), cu_q = optional(kCuQ), cu_k = optional(kCuK), sinks = optional(kSinks),
                    grad_sinks = optional(kGradSinks), grad_lse = optional(kGradLse);
    const TensorSpec &q = t[kQ].spec, &k = t[kK].spec;
    const double scale = scalar(scalars, "scale");
    args.push_args(mojo_sdpa_backward::Args<void>{
        .grad_q = ptr(t[kGradQ]),
        .grad_k = ptr(t[kGradK]),
        .grad_v = ptr(t[kGradV]),
        .grad_sinks = ptr<float>(grad_sinks),
        .grad_out = ptr(t[kGradOut]),
        .q = ptr(t[kQ]),
        .k = ptr(t[kK]),
        .v = ptr(t[kV]),
        .out = ptr(t[kOut]),
        .lse = ptr<float>(lse),
        .grad_lse = ptr<float>(grad_lse),
        .cu_q = ptr<int>(cu_q),
        .cu_k = ptr<int>(cu_k),
        .sinks = ptr<float>(sinks),
        .dot = ptr<float>(workspace.scratch),
        .q_stride = rows::token_stride(name(), "q", q),
        .k_stride = rows::token_stride(name(), "k", k),
        .v_stride = rows::token_stride(name(), "v", t[kV].spec),
        .batch = int(batch_of(t)),
        .q_tokens = int(q.dim(0)),
        .kv_tokens = int(k.dim(0)),
        .heads = int(q.dim(1)),
        .kv_heads = int(k.dim(1)),
        .scale = float(scale != 0 ? scale : 1.0 / std::sqrt(double(q.dim(2)))),
        .softcap = float(scalar(scalars, "softcap")),
        .window = int(std::max(scalar(scalars, "window"), -1.0)),
    });
  }

  void check_data(TensorList t, ScalarList scalars, StreamHandle stream) const override {
    as_ours([&] {
      sdpa_op().check_data(forward(t), scalars, stream);
      return 0;
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& q = shapes::required(name(), shapes, "q", example_shapes());
    const auto& k = shapes::required(name(), shapes, "k", example_shapes());
    const TensorSpec qs(dtype, q), ks(dtype, k);
    const std::vector<std::int64_t> lse = {q.size() == 3 ? q[1] : 0, q.empty() ? 0 : q[0]};
    const TensorSpec sinks = shapes::optional(shapes, "sinks", DType::f32);
    return {qs,
            ks,
            ks,
            qs,
            qs,
            ks,
            ks,
            qs,
            TensorSpec(DType::f32, shapes::value_or(shapes, "lse", lse)),
            shapes::optional(shapes, "cu_seqlens_q", DType::i32),
            shapes::optional(shapes, "cu_seqlens_k", DType::i32),
            sinks,
            sinks.rank() == 0 ? sinks : TensorSpec(DType::f32, {sinks.dim(0)}),
            shapes::optional(shapes, "grad_lse", DType::f32)};
  }

 private:
  // f() (sdpa's checks of the tensors both ops share), with its errors named as this op's.
  template <class F>
  auto as_ours(F f) const -> decltype(f()) {
    try {
      return f();
    } catch (const InvalidArgumentError& e) {
      const std::string_view what = e.what(), prefix = "sdpa: ";
      if (!what.starts_with(prefix)) throw;
      const std::string ours = fmt::format("{}: {}", name(), what.substr(prefix.size()));
      if (dynamic_cast<const DTypeError*>(&e)) throw DTypeError(ours);
      if (dynamic_cast<const ShapeError*>(&e)) throw ShapeError(ours);
      if (dynamic_cast<const PointerError*>(&e)) throw PointerError(ours);
      if (dynamic_cast<const ArchError*>(&e)) throw ArchError(ours);
      throw InvalidArgumentError(ours);
    }
  }
  std::string_view arg(int i) const { return tensor_args()[std::size_t(i)].name; }
  static bool present(TensorList t, int slot) { return t[std::size_t(slot)].spec.rank() != 0; }
  // sdpa's tensors (out, q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, lse) from these.
  static std::vector<Tensor> forward(TensorList t) {
    return {t[kOut], t[kQ], t[kK], t[kV], t[kCuQ], t[kCuK], t[kSinks], t[kLse]};
  }
  static std::int64_t batch_of(TensorList t) { return present(t, kCuQ) ? t[kCuQ].spec.dim(0) - 1 : 1; }
};

}  // namespace

const OpDef& sdpa_backward_op() {
  static const SdpaBackward op;
  return op;
}

}  // namespace mojo
