// layer_norm and layer_norm_backward (kernel_templates/layer_norm.cu, params there).
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "layer_norm_args.h"
#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr ScalarArgInfo kEps[] = {{"eps", 1e-6, "added to the variance"}};

constexpr TensorArgInfo kLayerNormTensors[] = {
    {"out", "out", "[..., hidden], same dtype as x; rows may be strided"},
    {"mean", "stats", "f32 [rows] or absent (a rank-0 tensor): written when given"},
    {"rstd", "stats", "f32 [rows] or absent: 1/sqrt(var + eps), written when given"},
    {"x", "in", "[..., hidden]; rows may be strided"},
    {"weight", "in", "[hidden]"},
    {"bias", "in", "[hidden]"},
};

// mean and rstd: both absent (rank 0) or both f32 with one value per row.
bool check_stats(std::string_view op, TensorList t, std::size_t mean_index, std::int64_t rows, bool optional) {
  const TensorSpec &mean = t[mean_index].spec, &rstd = t[mean_index + 1].spec;
  if (optional && mean.rank() == 0 && rstd.rank() == 0) return false;
  for (std::size_t i : {mean_index, mean_index + 1}) {
    const std::string_view arg = i == mean_index ? "mean" : "rstd";
    const TensorSpec& s = t[i].spec;
    if (s.rank() == 0 && optional) throw ShapeError(fmt::format("{}: give both mean and rstd, or neither", op));
    checks::expect_dtype_in(op, arg, s.dtype(), std::span<const DType>(kFloatTypes, 1));
    if (s.numel() != rows || !s.is_contiguous())
      throw ShapeError(fmt::format("{}: {} is {}; expected a contiguous f32 tensor of {} elements (one per row)", op,
                                   arg, s.str(), rows));
  }
  return true;
}

constexpr OpInfo kLayerNorm{
    .name = "layer_norm",
    .summary = "out = (x - mean) * rstd * weight + bias over the last dim; optionally writes mean and rstd",
    .tensors = kLayerNormTensors,
    .scalars = kEps,
    .dtypes = kFloatTypes,
    .template_file = "layer_norm.cu",
    .example_shapes = "x=32x4096",
};

class LayerNorm final : public OpDef {
 public:
  LayerNorm() : OpDef(kLayerNorm) {}
  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec &out = t[0].spec, &x = t[3].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    checks::expect_same_shape(name(), "out", out, "x", x);
    rows::stride(name(), "out", out);
    rows::stride(name(), "x", x);
    rows::check_vector(name(), "weight", t[4].spec, x, hidden);
    rows::check_vector(name(), "bias", t[5].spec, x, hidden);
    const bool stats = check_stats(name(), t, 1, rows::count(name(), x), true);
    Params p;
    p.add_dtype("dtype", x.dtype());
    rows::add_params(p, "hidden", hidden, rows::pick(hidden, x.dtype(), {t[0], t[3], t[4], t[5]}));
    p.add("stats", stats ? 1 : 0);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[3].spec.numel() / p.get("hidden"), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, DevicePtr, KernelArgs& args) const override {
    rows::expect_pointers(name(), tensor_args(), t, p);
    if (p.get("stats")) {
      checks::expect_pointer(name(), "mean", t[1].data, 4);
      checks::expect_pointer(name(), "rstd", t[2].data, 4);
    }
    args.push_args(mojo_layer_norm::Args<void>{
        .out = ptr(t[0]),
        .mean = ptr<float>(t[1]),
        .rstd = ptr<float>(t[2]),
        .x = ptr(t[3]),
        .weight = ptr(t[4]),
        .bias = ptr(t[5]),
        .eps = float(scalar(scalars, "eps")),
        .rows = t[3].spec.numel() / p.get("hidden"),
        .out_stride = rows::stride(name(), "out", t[0].spec),
        .x_stride = rows::stride(name(), "x", t[3].spec),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const std::vector<std::int64_t> cols{x.back()};
    auto stat = [&](std::string_view n) {
      auto it = shapes.find(n);
      return it == shapes.end() ? TensorSpec() : TensorSpec(DType::f32, it->second);
    };
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", x)),
            stat("mean"),
            stat("rstd"),
            TensorSpec(dtype, x),
            TensorSpec(dtype, shapes::value_or(shapes, "weight", cols)),
            TensorSpec(dtype, shapes::value_or(shapes, "bias", cols))};
  }
};

constexpr TensorArgInfo kLayerNormBackwardTensors[] = {
    {"grad_x", "out", "[..., hidden], contiguous"},
    {"grad_weight", "out", "[hidden]: sum over rows of grad_out * xhat, deterministic"},
    {"grad_bias", "out", "[hidden]: sum over rows of grad_out, deterministic"},
    {"grad_out", "in", "[..., hidden], contiguous"},
    {"x", "in", "[..., hidden], contiguous"},
    {"weight", "in", "[hidden]"},
    {"mean", "stats", "f32 [rows], from layer_norm"},
    {"rstd", "stats", "f32 [rows], from layer_norm"},
};

constexpr OpInfo kLayerNormBackward{
    .name = "layer_norm_backward",
    .summary = "grad_x, grad_weight, grad_bias of layer_norm, from grad_out, x, weight and the forward's mean and rstd",
    .tensors = kLayerNormBackwardTensors,
    .dtypes = kFloatTypes,
    .template_file = "layer_norm.cu",
    .example_shapes = "x=32x4096",
};

class LayerNormBackward final : public OpDef {
  // The blocks of the plan's row step, each writing one partial (16 bytes a column, written and read back,
  // against the 6 to 12 bytes a column each row moves): a wave of max_parts blocks where every block gets at
  // least 16 row groups, else fewer but still one an SM, and never more than there are row groups.
  static std::int64_t parts(const Params& p, TensorList t) {
    const std::int64_t groups = (t[4].spec.numel() / p.get("hidden") + p.get("rows") - 1) / p.get("rows");
    const std::int64_t wave = p.get("max_parts"), sms = wave / p.get("min_blocks");
    return std::max<std::int64_t>(std::min({wave, std::max(sms, (groups + 15) / 16), groups}), 1);
  }

 public:
  LayerNormBackward() : OpDef(kLayerNormBackward) {}
  Params derive_params(TensorList t, ScalarList, const Target& target) const override {
    const TensorSpec& x = t[4].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    for (std::size_t i : {0, 3, 4}) {
      checks::expect_same_dtype(name(), kLayerNormBackwardTensors[i].name, t[i].spec, "x", x);
      checks::expect_same_shape(name(), kLayerNormBackwardTensors[i].name, t[i].spec, "x", x);
      checks::expect_contiguous(name(), kLayerNormBackwardTensors[i].name, t[i].spec);
    }
    for (std::size_t i : {1, 2, 5}) rows::check_vector(name(), kLayerNormBackwardTensors[i].name, t[i].spec, x, hidden);
    check_stats(name(), t, 6, rows::count(name(), x), false);
    Params p;
    p.add_dtype("dtype", x.dtype());
    rows::Layout l = rows::pick(hidden, x.dtype(), {t[0], t[3], t[4], t[5]}, 512);
    // The plan with partials where a thread's columns fit in registers.
    // Narrow rows share a block of 256 (a thread takes up to 4 vectors), wider ones have a block each (2).
    const std::int64_t vectors = hidden / l.vec, pairs = (vectors + 1) / 2;
    const std::int64_t threads = pairs <= 32     ? std::int64_t(std::bit_ceil(std::uint64_t(pairs)))
                                 : vectors <= 128 ? 32
                                                  : std::min<std::int64_t>((pairs + 31) / 32 * 32, 512);
    // The columns a thread sums, in f32 registers, beside its vectors of grad_out and x: at most 96 registers.
    const std::int64_t columns = (vectors + threads - 1) / threads * l.vec;
    const std::int64_t registers = columns * (2 + std::int64_t(dtype_size(x.dtype())) / 2);
    const bool partials = registers <= 96;
    if (partials) {
      l.threads = threads;
      l.rows_per_block = threads <= 32 ? 256 / threads : 1;
    }
    rows::add_params(p, "hidden", hidden, l);
    p.add("partials", partials ? 1 : 0);
    if (partials) {
      // Blocks an SM that those registers (and about 32 more) allow, bound on the kernel so ptxas keeps to
      // them; that many on each SM is one wave.
      const std::int64_t block = l.threads * l.rows_per_block;
      const std::int64_t min_blocks = std::clamp<std::int64_t>(65536 / (block * (registers + 32)), 1, 2048 / block);
      p.add("min_blocks", min_blocks);
      p.add("max_parts", min_blocks * reference_sm_count(target));
    }
    return p;
  }

  std::vector<Params> plan(const Params& p) const override {
    if (p.get("partials") == 0) return {p};
    Params rows = p, sums = p;
    rows.add("step", 0);
    sums.add("step", 1);
    return {rows, sums};
  }
  std::string entry_macro(const Params& p) const override {
    return p.get("partials") != 0 ? "MOJO_LAYER_NORM_BACKWARD_PARTIALS" : OpDef::entry_macro(p);
  }
  std::size_t workspace_bytes(const Params& p, TensorList t) const override {
    return p.get("partials") != 0 ? std::size_t(2 * parts(p, t) * p.get("hidden")) * sizeof(float) : 0;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const std::int64_t hidden = p.get("hidden");
    if (p.get("partials") == 0) {
      LaunchGeometry g = rows::geometry(t[4].spec.numel() / hidden, p);
      g.grid.x += unsigned((hidden + 31) / 32);  // the column blocks
      return g;
    }
    LaunchGeometry g;
    if (p.get("step") == 0) {
      g.grid.x = unsigned(parts(p, t));
      g.block.x = unsigned(p.get("threads") * p.get("rows"));
    } else {
      g.grid.x = unsigned((hidden + 31) / 32);
      g.block.x = 256;
    }
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, DevicePtr workspace, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    for (std::size_t i : {0, 3, 4, 5})
      checks::expect_pointer(name(), kLayerNormBackwardTensors[i].name, t[i].data, bytes);
    for (std::size_t i : {1, 2})
      checks::expect_pointer(name(), kLayerNormBackwardTensors[i].name, t[i].data,
                             unsigned(dtype_size(p.dtype("dtype"))));
    for (std::size_t i : {6, 7}) checks::expect_pointer(name(), kLayerNormBackwardTensors[i].name, t[i].data, 4);
    args.push_args(mojo_layer_norm::BackwardArgs<void>{
        .grad_x = ptr(t[0]),
        .grad_weight = ptr(t[1]),
        .grad_bias = ptr(t[2]),
        .grad_out = ptr(t[3]),
        .x = ptr(t[4]),
        .weight = ptr(t[5]),
        .mean = ptr<float>(t[6]),
        .rstd = ptr<float>(t[7]),
        .rows = t[4].spec.numel() / p.get("hidden"),
        .partials = reinterpret_cast<float*>(workspace),
        .parts = p.get("partials") != 0 ? parts(p, t) : 0,
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const std::vector<std::int64_t> cols{x.back()}, rows{TensorSpec(dtype, x).numel() / x.back()};
    TensorSpec xs(dtype, x), vs(dtype, cols), ss(DType::f32, rows);
    return {xs, vs, vs, xs, xs, vs, ss, ss};
  }
};

}  // namespace

const OpDef& layer_norm_op() {
  static const LayerNorm op;
  return op;
}
const OpDef& layer_norm_backward_op() {
  static const LayerNormBackward op;
  return op;
}

}  // namespace mojo
