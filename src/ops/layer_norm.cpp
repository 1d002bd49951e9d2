// layer_norm (kernel_templates/layer_norm.cu, params there); its backward is in norm_backward.cpp.
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
    {"out", "out", "[..., hidden], same dtype as x; rows may be strided; may be x (in place)", "x"},
    {"mean", "stats", "f32 [rows] or absent (a rank-0 tensor): written when given"},
    {"rstd", "stats", "f32 [rows] or absent: 1/sqrt(var + eps), written when given"},
    {"x", "in", "[..., hidden]; rows may be strided"},
    {"weight", "in", "[hidden]"},
    {"bias", "in", "[hidden]"},
};

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
  // Its tensors' places in kLayerNormTensors.
  static constexpr std::size_t kOut = slot(kLayerNormTensors, "out");
  static constexpr std::size_t kMean = slot(kLayerNormTensors, "mean");
  static constexpr std::size_t kRstd = slot(kLayerNormTensors, "rstd");
  static constexpr std::size_t kX = slot(kLayerNormTensors, "x");
  static constexpr std::size_t kWeight = slot(kLayerNormTensors, "weight");
  static constexpr std::size_t kBias = slot(kLayerNormTensors, "bias");

 public:
  LayerNorm() : OpDef(kLayerNorm) {}
  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec &out = t[kOut].spec, &x = t[kX].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    checks::expect_same_shape(name(), "out", out, "x", x);
    rows::stride(name(), "out", out);
    rows::stride(name(), "x", x);
    rows::check_vector(name(), "weight", t[kWeight].spec, x, hidden);
    rows::check_vector(name(), "bias", t[kBias].spec, x, hidden);
    const bool stats = rows::check_stats(name(), t, 1, rows::count(name(), x), true);
    Params p;
    p.add_dtype("dtype", x.dtype());
    rows::add_params(
        p, "hidden", hidden,
        rows::pick(hidden, x.dtype(), {t[kOut], t[kX], t[kWeight], t[kBias]}, 1024, rows::kNormVectorsPerThread));
    p.add("stats", stats ? 1 : 0);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[kX].spec.numel() / p.get("hidden"), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace&, KernelArgs& args) const override {
    rows::expect_pointers(name(), tensor_args(), t, p);
    if (p.get("stats")) {
      checks::expect_pointer(name(), "mean", t[kMean], 4);
      checks::expect_pointer(name(), "rstd", t[kRstd], 4);
    }
    args.push_args(mojo_layer_norm::Args<void>{
        .out = ptr(t[kOut]),
        .mean = ptr<float>(t[kMean]),
        .rstd = ptr<float>(t[kRstd]),
        .x = ptr(t[kX]),
        .weight = ptr(t[kWeight]),
        .bias = ptr(t[kBias]),
        .eps = float(scalar(scalars, "eps")),
        .rows = t[kX].spec.numel() / p.get("hidden"),
        .out_stride = rows::stride(name(), "out", t[kOut].spec),
        .x_stride = rows::stride(name(), "x", t[kX].spec),
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

}  // namespace

const OpDef& layer_norm_op() {
  static const LayerNorm op;
  return op;
}
}  // namespace mojo
