// linear_cross_entropy and linear_cross_entropy_backward: the loss of
// logits = hidden x weight^T against integer labels, and its gradients,
// never holding the [tokens, vocab] logits: the plan runs once per slice of
// the vocabulary (OpDef::repeats), its products on gemm.cu's kernels, its
// row work on cross_entropy.cu's (which says what each step computes).
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "cross_entropy_args.h"
#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/gemm_tile.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/cost.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr DType kF32[] = {DType::f32};
constexpr std::int64_t kMaxVocab = 262144;
constexpr std::int64_t kRowThreads = 256;
constexpr std::int64_t kSliceFloats = std::int64_t(64) << 20;  // 256 MB of f32 logits per slice by default

constexpr ScalarArgInfo kScalars[] = {
    {"reduction", 1, "1: the mean over the rows not ignored; 2: the sum; 0: none (a loss per row)"},
    {"ignore_index", -100, "a label that contributes no loss and no gradient"},
    {"label_smoothing", 0, "s in [0, 1]: the target is (1 - s) one-hot + s / vocab"},
    {"z_loss", 0, "z >= 0: adds z lse^2 per row"},
    {"softcap", 0, "cap > 0: logits become cap tanh(logits / cap) first"},
    {"vocab_chunk", 0, "vocabulary columns per slice, a multiple of 64 (0: about 256 MB of f32 logits)"},
    {"path", 0, "the products' path: 0 the heuristic, 80 the sm_80 path, 90 the sm_90a path"},
};
constexpr TensorArgInfo kForwardTensors[] = {
    {"loss", "out", "f32 [1] (mean or sum) or [tokens] (reduction 0)"},
    {"lse", "out", "f32 [tokens], optional: each row's log-sum-exp, for the backward"},
    {"hidden", "in", "[tokens, hidden] f32, f16 or bf16, contiguous"},
    {"weight", "in", "[vocab, hidden], hidden's dtype, contiguous (vocab <= 262144)"},
    {"labels", "in", "i32 or i64 [tokens]: in [0, vocab), or ignore_index"},
};
constexpr TensorArgInfo kBackwardTensors[] = {
    {"grad_hidden", "out", "[tokens, hidden], hidden's dtype"},
    {"grad_weight", "out", "[vocab, hidden], hidden's dtype"},
    {"grad_loss", "in", "f32 [1] (mean or sum) or [tokens] (reduction 0): the loss's gradient"},
    {"hidden", "in", "[tokens, hidden] f32, f16 or bf16, contiguous"},
    {"weight", "in", "[vocab, hidden], hidden's dtype, contiguous"},
    {"labels", "in", "i32 or i64 [tokens]"},
    {"lse", "in", "f32 [tokens]: the forward's log-sum-exp"},
    {"grad_lse", "in",
     "f32 [tokens]: lse's own gradient, where a loss uses the lse (d lse / d logits = softmax), or absent"},
};
constexpr OpInfo kForward{
    .name = "linear_cross_entropy",
    .summary =
        "cross-entropy of hidden x weight^T against labels, a vocabulary slice at a time (ignore_index, "
        "label smoothing, z-loss, soft-cap)",
    .tensors = kForwardTensors,
    .scalars = kScalars,
    .dtypes = kFloatTypes,
    .template_file = "cross_entropy.cu",
    .example_shapes = "hidden=8192x4096 weight=151936x4096",
};
constexpr OpInfo kBackward{
    .name = "linear_cross_entropy_backward",
    .summary = "the gradients of linear_cross_entropy for hidden and weight, a vocabulary slice at a time",
    .tensors = kBackwardTensors,
    .scalars = kScalars,
    .dtypes = kFloatTypes,
    .template_file = "cross_entropy.cu",
    .example_shapes = "hidden=8192x4096 weight=151936x4096",
};

// The steps: row kernels of cross_entropy.cu and products of gemm.cu.
enum Step {
  kInit,        // forward: every row's state (first slice)
  kLogits,      // both: logits of the slice (f32) = hidden x weight[slice]^T
  kUpdate,      // forward: rows fold the slice into their state
  kFinish,      // forward: lse and loss per row (last slice)
  kReduce,      // forward: the mean or sum (last slice)
  kZero,        // backward: the f32 grad_hidden accumulator (first slice)
  kCount,       // backward: the gradient's scale (first slice)
  kGrad,        // backward: dlogits of the slice
  kGradWeight,  // backward: grad_weight[slice] = dlogits^T x hidden
  kGradHidden,  // backward: accumulator += dlogits x weight[slice]
  kConvert,     // backward: grad_hidden = the accumulator (last slice)
};

struct Sizes {
  std::int64_t tokens, hidden, vocab;
};

class LinearCrossEntropy final : public OpDef {
 public:
  explicit LinearCrossEntropy(bool backward) : OpDef(backward ? kBackward : kForward), backward_(backward) {}

  // ---- the tensors, by role ----
  std::size_t hidden_index() const { return backward_ ? 3 : 2; }
  Sizes sizes(TensorList t) const {
    const TensorSpec &h = t[hidden_index()].spec, &w = t[hidden_index() + 1].spec;
    return {h.dim(0), h.dim(1), w.dim(0)};
  }
  const Tensor& labels(TensorList t) const { return t[hidden_index() + 2]; }

  std::int64_t repeats(const Params& p, TensorList t) const override {
    return (sizes(t).vocab + p.get("chunk") - 1) / p.get("chunk");
  }

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const TensorSpec &h = t[hidden_index()].spec, &w = t[hidden_index() + 1].spec, &y = labels(t).spec;
    checks::expect_dtype_in(name(), "hidden", h.dtype(), kFloatTypes);
    if (h.rank() != 2 || h.dim(0) < 1 || h.dim(1) < 1)
      throw ShapeError(fmt::format("{}: hidden is {}; expected [tokens, hidden], both at least 1", name(), h.str()));
    const std::int64_t tokens = h.dim(0), hidden = h.dim(1);
    const DType same[] = {h.dtype()};
    checks::expect_exact(name(), "hidden", h, {tokens, hidden}, same);
    if (w.rank() != 2 || w.dim(0) < 1 || w.dim(0) > kMaxVocab || w.dim(1) != hidden)
      throw ShapeError(
          fmt::format("{}: weight is {}; expected [vocab, {}] with vocab <= {}", name(), w.str(), hidden, kMaxVocab));
    const std::int64_t vocab = w.dim(0);
    checks::expect_exact(name(), "weight", w, {vocab, hidden}, same);
    checks::expect_exact(name(), "labels", y, {tokens}, indices::kTypes);
    const std::int64_t reduction = whole_scalar(scalars, "reduction");
    if (reduction < 0 || reduction > 2)
      throw InvalidArgumentError(fmt::format("{}: reduction is {}; expected 0 (none), 1 (mean) or 2 (sum)", name(),
                                             scalar(scalars, "reduction")));
    const std::int64_t loss_rows = reduction == 0 ? tokens : 1;
    if (backward_) {
      checks::expect_exact(name(), "grad_hidden", t[0].spec, {tokens, hidden}, same);
      checks::expect_exact(name(), "grad_weight", t[1].spec, {vocab, hidden}, same);
      checks::expect_exact(name(), "grad_loss", t[2].spec, {loss_rows}, kF32);
      checks::expect_exact(name(), "lse", t[6].spec, {tokens}, kF32);
      if (t[7].spec.rank() != 0) checks::expect_exact(name(), "grad_lse", t[7].spec, {tokens}, kF32);
    } else {
      checks::expect_exact(name(), "loss", t[0].spec, {loss_rows}, kF32);
      if (t[1].spec.rank() != 0) checks::expect_exact(name(), "lse", t[1].spec, {tokens}, kF32);
    }
    const double smoothing = scalar(scalars, "label_smoothing"), z = scalar(scalars, "z_loss"),
                 cap = scalar(scalars, "softcap");
    if (!(smoothing >= 0 && smoothing <= 1))
      throw InvalidArgumentError(fmt::format("{}: label_smoothing is {}; expected 0 to 1", name(), smoothing));
    if (!(z >= 0)) throw InvalidArgumentError(fmt::format("{}: z_loss is {}; expected >= 0", name(), z));
    if (!(cap >= 0)) throw InvalidArgumentError(fmt::format("{}: softcap is {}; expected >= 0", name(), cap));
    const std::int64_t chunk_wanted = whole_scalar(scalars, "vocab_chunk");
    if (chunk_wanted < 0 || chunk_wanted % 64 != 0)
      throw InvalidArgumentError(
          fmt::format("{}: vocab_chunk is {}; expected a multiple of 64 (0: chosen)", name(), chunk_wanted));
    const bool tf32 = false;
    expect_tensor_cores(name(), h.dtype(), tf32, target);
    checked_dim(name(), "tokens", tokens);
    checked_dim(name(), "hidden", hidden);

    const std::int64_t bucket = std::int64_t(std::bit_ceil(std::uint64_t(tokens)));
    const std::int64_t whole_vocab = (vocab + 63) / 64 * 64;
    std::int64_t chunk =
        chunk_wanted > 0 ? chunk_wanted : std::max<std::int64_t>(1024, kSliceFloats / bucket / 64 * 64);
    chunk = std::min(chunk, whole_vocab);
    const bool aligned = chunk_aligned(h.dtype(), t[hidden_index()].data, {hidden}) &&
                         chunk_aligned(h.dtype(), t[hidden_index() + 1].data, {hidden}) &&
                         (!backward_ || (chunk_aligned(h.dtype(), t[0].data, {hidden}) &&
                                         chunk_aligned(h.dtype(), t[1].data, {hidden})));
    Params p;
    p.add_dtype("dtype", h.dtype());
    p.add_dtype("index", y.dtype());
    p.add("hidden", hidden);
    p.add("chunk", chunk);
    p.add("tokens", bucket);  // the rows the products' tiles are chosen for (a power of two)
    p.add("reduction", reduction);
    p.add("aligned", aligned ? 1 : 0);
    p.add("path", std::int64_t(path_of(*this, scalars, wgmma_possible(target, h.dtype(), aligned, 1, 1, 1), target)));
    p.add("sm", target.sm);
    p.add("sm_a", target.arch_specific ? 1 : 0);
    return p;
  }

  std::vector<Params> plan(const Params& p) const override {
    const auto rows_step = [&](Step step) {
      Params r;
      r.add_dtype("dtype", p.dtype("dtype"));
      r.add_dtype("index", p.dtype("index"));
      r.add("threads", kRowThreads);
      r.add("chunk", p.get("chunk"));
      r.add("reduction", p.get("reduction"));
      r.add("step", step);
      return r;
    };
    const std::int64_t t = p.get("tokens"), c = p.get("chunk"), h = p.get("hidden");
    if (!backward_) {
      std::vector<Params> steps = {rows_step(kInit), product(p, kLogits, t, c, h, 0, 1, DType::f32, 0),
                                   rows_step(kUpdate), rows_step(kFinish)};
      if (p.get("reduction") != 0) steps.push_back(rows_step(kReduce));
      return steps;
    }
    std::vector<Params> steps = {rows_step(kZero)};
    if (p.get("reduction") != 0) steps.push_back(rows_step(kCount));
    for (Params s : {product(p, kLogits, t, c, h, 0, 1, DType::f32, 0), rows_step(kGrad),
                     product(p, kGradWeight, c, h, t, 1, 0, p.dtype("dtype"), 0),
                     product(p, kGradHidden, t, h, c, 0, 0, DType::f32, 1), rows_step(kConvert)})
      steps.push_back(s);
    return steps;
  }

  std::string entry_macro(const Params& p) const override {
    switch (Step(p.get("step"))) {
      case kInit:
        return "MOJO_CE_INIT";
      case kUpdate:
        return "MOJO_CE_UPDATE";
      case kFinish:
        return "MOJO_CE_FINISH";
      case kReduce:
        return "MOJO_CE_REDUCE";
      case kZero:
        return "MOJO_CE_ZERO";
      case kCount:
        return "MOJO_CE_COUNT";
      case kGrad:
        return "MOJO_CE_GRAD";
      case kConvert:
        return "MOJO_CE_CONVERT";
      default:
        return p.get("wgmma") ? "MOJO_KERNEL_gemm_sm90" : "MOJO_KERNEL_gemm";
    }
  }
  unsigned max_dynamic_smem(const Params& p) const override {
    return is_product(Step(p.get_or("step", kInit))) ? tile_of(p).smem_bytes() : 0;
  }

  // The logits product (2 N V H); the backward recomputes it and makes both gradients' products.
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    const Sizes z = sizes(t);
    c.flops = (backward_ ? 6.0 : 2.0) * double(z.tokens) * double(z.vocab) * double(z.hidden);
    c.weight_bytes = cost::bytes(t[hidden_index() + 1]);
    return c;
  }

  std::size_t workspace_bytes(const Params& p, TensorList t) const override { return layout(p, t).bytes; }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Sizes s = sizes(t);
    const Slice slice = slice_of(p, t);
    const Step step = Step(p.get("step"));
    const std::int64_t th = kRowThreads;
    LaunchGeometry g;
    g.block.x = unsigned(th);
    const auto blocks = [&](std::int64_t n, bool when) {
      g.grid.x = when ? unsigned((n + th - 1) / th) : 0u;
      return g;
    };
    switch (step) {
      case kInit:
        return blocks(s.tokens, slice.first);
      case kFinish:
        return blocks(s.tokens, slice.last);
      case kReduce:
      case kCount:
        return blocks(1, step == kReduce ? slice.last : slice.first);
      case kZero:
        return blocks(s.tokens * s.hidden, slice.first);
      case kConvert:
        return blocks(s.tokens * s.hidden, slice.last);
      case kUpdate:
      case kGrad:
        g.grid.x = unsigned(s.tokens);
        return g;
      case kLogits:
        return tile_geometry(p, s.tokens, slice.columns, 1);
      case kGradWeight:
        return tile_geometry(p, slice.columns, s.hidden, 1);
      case kGradHidden:
        return tile_geometry(p, s.tokens, s.hidden, 1);
    }
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace& workspace,
                 KernelArgs& args) const override {
    if (workspace.scratch == 0) throw InternalError(fmt::format("{}'s plan without its workspace", name()));
    const Frame f = frame(p, t, scalars, workspace.scratch);
    const Step step = Step(p.get("step"));
    if (step == kLogits || step == kGradWeight || step == kGradHidden) return pack_product(step, p, t, f, args);
    if (backward_) return pack_backward_row_step(step, p, t, f, args);
    pack_forward_row_step(step, p, t, f, args);
  }

  void check_data(TensorList t, ScalarList scalars, StreamHandle stream) const override {
    const std::int64_t vocab = sizes(t).vocab, ignore = whole_scalar(scalars, "ignore_index");
    const std::vector<std::int64_t> y = indices::read(labels(t), stream);
    for (std::size_t i = 0; i < y.size(); ++i)
      if ((y[i] < 0 || y[i] >= vocab) && y[i] != ignore)
        throw InvalidArgumentError(fmt::format(
            "{}: labels[{}] = {} is out of range: expected a label in [0, {}) (the vocabulary) or the ignore_index {}",
            name(), i, y[i], vocab, ignore));
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& h = shapes::required(name(), shapes, "hidden", example_shapes());
    const auto& w = shapes::required(name(), shapes, "weight", example_shapes());
    if (h.size() != 2) throw ShapeError(fmt::format("{}: give hidden as TOKENSxHIDDEN", name()));
    const std::int64_t tokens = h[0];
    const TensorSpec hidden(dtype, h), weight(dtype, w), labels_spec(DType::i64, {tokens}),
        per_row(DType::f32, {tokens});
    const TensorSpec loss(DType::f32, shapes::value_or(shapes, backward_ ? "grad_loss" : "loss", {1}));
    if (backward_)
      return {hidden, weight,      loss,    hidden,
              weight, labels_spec, per_row, shapes::optional(shapes, "grad_lse", DType::f32)};
    return {loss, per_row, hidden, weight, labels_spec};
  }
  // With reduction 0 the loss (and its gradient) is a row each: [tokens].
  void complete_shapes(ShapeMap& shapes, ScalarList scalars) const override {
    const auto hidden = shapes.find("hidden");
    if (hidden == shapes.end() || hidden->second.empty() || scalar(scalars, "reduction") != 0) return;
    shapes.emplace(backward_ ? "grad_loss" : "loss", std::vector<std::int64_t>{hidden->second[0]});
  }

 private:
  bool backward_;

  static bool is_product(Step s) { return s == kLogits || s == kGradWeight || s == kGradHidden; }

  // One gemm.cu product of the plan: [m, n] = op(a) [m, k] x op(b) [k, n], with its tile for these sizes.
  static Params product(const Params& p, Step step, std::int64_t m, std::int64_t n, std::int64_t k, int ta, int tb,
                        DType out, int beta) {
    const DType dtype = p.dtype("dtype");
    const Target target{int(p.get("sm")), p.get("sm_a") != 0};
    const bool aligned = p.get("aligned") != 0;
    const bool wgmma_ok = wgmma_possible(target, dtype, aligned, m, n, k);
    const TileConfig tile = pick_tile(m, n, k, dtype, false, target, wgmma_ok, 1, Path(p.get("path")));
    Params g;
    g.add_dtype("dtype", dtype);
    g.add_dtype("out", out);
    add_tile(g, tile);
    g.add("ta", ta);
    g.add("tb", tb);
    g.add("vec", vec_param(tile, aligned));
    g.add("beta", beta);
    g.add("tf32", 0);
    g.add("wgmma", tile.wgmma);
    g.add("chunk", p.get("chunk"));
    g.add("step", step);
    return g;
  }

  // What every step's arguments are made of, for one run of the plan.
  struct Frame {
    Sizes s;
    std::int64_t col0, columns;  // the slice
    DevicePtr logits, row_loss, dlogits, acc, scale, hidden, weight, weight_slice, labels;
    mojo_ce::State* state;
    std::size_t element_bytes;
    long long ld, ignore;
    float smoothing, z_loss, cap;
    int mean;
  };
  Frame frame(const Params& p, TensorList t, ScalarList scalars, DevicePtr workspace) const {
    const Sizes s = sizes(t);
    const Slice slice = slice_of(p, t);
    const Layout w = layout(p, t);
    const DevicePtr hidden = t[hidden_index()].data, weight = t[hidden_index() + 1].data;
    const std::size_t es = dtype_size(t[hidden_index()].spec.dtype());
    return {.s = s,
            .col0 = slice.col0,
            .columns = slice.columns,
            .logits = workspace + w.logits,
            .row_loss = workspace + w.row_loss,
            .dlogits = workspace + w.dlogits,
            .acc = workspace + w.acc,
            .scale = workspace + w.scale,
            .hidden = hidden,
            .weight = weight,
            .weight_slice = weight + DevicePtr(slice.col0 * s.hidden) * es,
            .labels = labels(t).data,
            .state = ptr<mojo_ce::State>(workspace + w.state),
            .element_bytes = es,
            .ld = p.get("chunk"),
            .ignore = whole_scalar(scalars, "ignore_index"),
            .smoothing = float(scalar(scalars, "label_smoothing")),
            .z_loss = float(scalar(scalars, "z_loss")),
            .cap = float(scalar(scalars, "softcap")),
            .mean = p.get_or("reduction", 0) == 1 ? 1 : 0};
  }

  // The steps on gemm.cu: the slice's logits, and the backward's two gradient products.
  void pack_product(Step step, const Params& p, TensorList t, const Frame& f, KernelArgs& args) const {
    const unsigned vector_bytes = p.get("vec") == 8 ? 16 : unsigned(f.element_bytes);
    checks::expect_pointer(name(), "hidden", f.hidden, vector_bytes);
    checks::expect_pointer(name(), "weight", f.weight, vector_bytes);
    const Sizes& s = f.s;
    switch (step) {
      case kLogits:
        return push_kernel_args(args,
                                {.c = f.logits,
                                 .a = f.hidden,
                                 .b = f.weight_slice,
                                 .m = s.tokens,
                                 .n = f.columns,
                                 .k = s.hidden,
                                 .lda = s.hidden,
                                 .ldb = s.hidden,
                                 .ldc = f.ld},
                                p);
      case kGradWeight:
        checks::expect_pointer(name(), "grad_weight", t[1], vector_bytes);
        return push_kernel_args(args,
                                {.c = t[1].data + DevicePtr(f.col0 * s.hidden) * f.element_bytes,
                                 .a = f.dlogits,
                                 .b = f.hidden,
                                 .m = f.columns,
                                 .n = s.hidden,
                                 .k = s.tokens,
                                 .lda = f.ld,
                                 .ldb = s.hidden,
                                 .ldc = s.hidden,
                                 .mn_major_a = true,
                                 .mn_major_b = true},
                                p);
      case kGradHidden:
        return push_kernel_args(args,
                                {.c = f.acc,
                                 .a = f.dlogits,
                                 .b = f.weight_slice,
                                 .beta = 1,
                                 .m = s.tokens,
                                 .n = s.hidden,
                                 .k = f.columns,
                                 .lda = f.ld,
                                 .ldb = s.hidden,
                                 .ldc = s.hidden,
                                 .mn_major_b = true},
                                p);
      default:
        throw InternalError(fmt::format("{} step {} is no product", name(), int(step)));
    }
  }

  // The forward's row steps on cross_entropy.cu.
  void pack_forward_row_step(Step step, const Params& p, TensorList t, const Frame& f, KernelArgs& args) const {
    switch (step) {
      case kInit:
        return args.push_args(mojo_ce::InitArgs{.state = f.state, .rows = f.s.tokens});
      case kUpdate:
        return args.push_args(mojo_ce::UpdateArgs<void>{
            .state = f.state,
            .logits = ptr<float>(f.logits),
            .ld = f.ld,
            .labels = ptr(f.labels),
            .col0 = f.col0,
            .n = int(f.columns),
            .cap = f.cap,
        });
      case kFinish:
        return args.push_args(mojo_ce::FinishArgs<void>{
            .row_loss = ptr<float>(f.mean || p.get("reduction") == 2 ? f.row_loss : t[0].data),
            .lse = t[1].spec.rank() == 0 ? nullptr : ptr<float>(t[1].data),
            .state = f.state,
            .labels = ptr(f.labels),
            .rows = f.s.tokens,
            .vocab = f.s.vocab,
            .ignore_index = f.ignore,
            .smoothing = f.smoothing,
            .z_loss = f.z_loss,
        });
      case kReduce:
        checks::expect_pointer(name(), "loss", t[0], 4);
        return args.push_args(mojo_ce::ReduceArgs<void>{
            .loss = ptr<float>(t[0].data),
            .row_loss = ptr<float>(f.row_loss),
            .labels = ptr(f.labels),
            .rows = f.s.tokens,
            .ignore_index = f.ignore,
            .mean = f.mean,
        });
      default:
        throw InternalError(fmt::format("{} step {} is no forward row step", name(), int(step)));
    }
  }

  // The backward's row steps on cross_entropy.cu.
  void pack_backward_row_step(Step step, const Params& p, TensorList t, const Frame& f, KernelArgs& args) const {
    switch (step) {
      case kCount:
        return args.push_args(mojo_ce::CountArgs<void>{
            .scale = ptr<float>(f.scale),
            .grad_loss = ptr<float>(t[2].data),
            .labels = ptr(f.labels),
            .rows = f.s.tokens,
            .ignore_index = f.ignore,
            .mean = f.mean,
        });
      case kZero:
        return args.push_args(mojo_ce::ZeroArgs{.acc = ptr<float>(f.acc), .n = f.s.tokens * f.s.hidden});
      case kConvert:
        checks::expect_pointer(name(), "grad_hidden", t[0], unsigned(f.element_bytes));
        return args.push_args(mojo_ce::ConvertArgs<void>{
            .out = ptr(t[0]),
            .acc = ptr<float>(f.acc),
            .n = f.s.tokens * f.s.hidden,
        });
      case kGrad:
        return args.push_args(mojo_ce::GradArgs<void, void>{
            .dlogits = ptr(f.dlogits),
            .logits = ptr<float>(f.logits),
            .ld = f.ld,
            .lse = ptr<float>(t[6].data),
            .grad_lse = t[7].spec.rank() == 0 ? nullptr : ptr<float>(t[7].data),
            .labels = ptr(f.labels),
            .scale = ptr<float>(f.scale),
            .grad_loss = ptr<float>(t[2].data),
            .per_row = p.get("reduction") == 0 ? 1 : 0,
            .col0 = f.col0,
            .n = int(f.columns),
            .vocab = f.s.vocab,
            .ignore_index = f.ignore,
            .smoothing = f.smoothing,
            .z_loss = f.z_loss,
            .cap = f.cap,
        });
      default:
        throw InternalError(fmt::format("{} step {} is no backward row step", name(), int(step)));
    }
  }

  // The slice of the vocabulary this run of the plan covers.
  struct Slice {
    std::int64_t col0, columns;
    bool first, last;
  };
  Slice slice_of(const Params& p, TensorList t) const {
    const std::int64_t chunk = p.get("chunk"), r = p.get_or("repeat", 0), vocab = sizes(t).vocab;
    const std::int64_t col0 = r * chunk;
    return {col0, std::min(chunk, vocab - col0), r == 0, col0 + chunk >= vocab};
  }

  // The workspace: one slice's f32 logits, then the forward's row states and losses or the backward's dlogits,
  // f32 grad_hidden accumulator and gradient scale.
  struct Layout {
    std::size_t logits, state, row_loss, dlogits, acc, scale, bytes;
  };
  Layout layout(const Params& p, TensorList t) const {
    const Sizes s = sizes(t);
    const std::size_t es = dtype_size(t[hidden_index()].spec.dtype());
    const auto round = [](std::size_t b) { return (b + 255) / 256 * 256; };
    const std::size_t slice = std::size_t(s.tokens * p.get("chunk"));
    Layout w{};
    w.logits = 0;
    std::size_t at = round(slice * 4);
    if (!backward_) {
      w.state = at;
      at += round(std::size_t(s.tokens) * 16);
      w.row_loss = at;
      at += round(std::size_t(s.tokens) * 4);
    } else {
      w.dlogits = at;
      at += round(slice * es);
      w.acc = at;
      at += round(std::size_t(s.tokens * s.hidden) * 4);
      w.scale = at;
      at += 256;
    }
    w.bytes = at;
    return w;
  }
};

}  // namespace

const OpDef& linear_cross_entropy_op() {
  static const LinearCrossEntropy op(false);
  return op;
}
const OpDef& linear_cross_entropy_backward_op() {
  static const LinearCrossEntropy op(true);
  return op;
}

}  // namespace mojo
