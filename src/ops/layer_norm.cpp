// layer_norm and layer_norm_backward (kernel_templates/layer_norm.cu, params there).
#include <fmt/format.h>

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
 public:
  LayerNormBackward() : OpDef(kLayerNormBackward) {}
  Params derive_params(TensorList t, ScalarList, const Target&) const override {
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
    rows::add_params(p, "hidden", hidden, rows::pick(hidden, x.dtype(), {t[0], t[3], t[4], t[5]}, 512));
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const std::int64_t hidden = p.get("hidden");
    LaunchGeometry g = rows::geometry(t[4].spec.numel() / hidden, p);
    g.grid.x += unsigned((hidden + 31) / 32);  // the column blocks
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, DevicePtr, KernelArgs& args) const override {
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
