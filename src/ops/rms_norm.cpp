// rms_norm and add_rms_norm: one template (kernel_templates/rms_norm.cu,
// params there), the residual add a compile-time flag.
#include <fmt/format.h>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "rms_norm_args.h"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr ScalarArgInfo kEps[] = {{"eps", 1e-6, "added to the variance"}};

constexpr TensorArgInfo kRmsTensors[] = {
    {"out", "out", "[..., hidden], same dtype as x; rows may be strided; may be x (in place)", "x"},
    {"x", "in", "[..., hidden]; rows may be strided"},
    {"weight", "in", "[hidden]"},
};
constexpr TensorArgInfo kAddRmsTensors[] = {
    {"out", "out", "[..., hidden], same dtype as x; rows may be strided; may be x (in place)", "x"},
    {"residual", "inout", "[..., hidden]; residual += x, then normalised"},
    {"x", "in", "[..., hidden]; rows may be strided"},
    {"weight", "in", "[hidden]"},
};

constexpr OpInfo kRmsNorm{
    .name = "rms_norm",
    .summary = "out = x * rsqrt(mean(x^2) + eps) * weight over the last dim",
    .tensors = kRmsTensors,
    .scalars = kEps,
    .dtypes = kFloatTypes,
    .template_file = "rms_norm.cu",
    .example_shapes = "x=32x4096",
};
constexpr OpInfo kAddRmsNorm{
    .name = "add_rms_norm",
    .summary = "residual += x; out = residual * rsqrt(mean(residual^2) + eps) * weight, in one pass",
    .tensors = kAddRmsTensors,
    .scalars = kEps,
    .dtypes = kFloatTypes,
    .template_file = "rms_norm.cu",
    .example_shapes = "x=32x4096",
};

class RmsNorm final : public OpDef {
 public:
  explicit RmsNorm(bool add) : OpDef(add ? kAddRmsNorm : kRmsNorm), add_(add) {}

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec& x = t[x_index()].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (i == x_index() || i + 1 == t.size()) continue;
      checks::expect_same_dtype(name(), tensor_args()[i].name, t[i].spec, "x", x);
      checks::expect_same_shape(name(), tensor_args()[i].name, t[i].spec, "x", x);
      rows::stride(name(), tensor_args()[i].name, t[i].spec);
    }
    rows::check_vector(name(), "weight", t[t.size() - 1].spec, x, hidden);
    rows::stride(name(), "x", x);
    rows::count(name(), x);
    Params p;
    p.add_dtype("dtype", x.dtype());
    rows::add_params(p, "hidden", hidden,
                     add_ ? rows::pick(hidden, x.dtype(), {t[0], t[1], t[2], t[3]}, 1024, rows::kNormVectorsPerThread)
                          : rows::pick(hidden, x.dtype(), {t[0], t[1], t[2]}, 1024, rows::kNormVectorsPerThread));
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[x_index()].spec.numel() / p.get("hidden"), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace&, KernelArgs& args) const override {
    rows::expect_pointers(name(), tensor_args(), t, p);
    const Tensor& x = t[x_index()];
    const Tensor& out = t[0];
    const Tensor& residual = add_ ? t[1] : x;
    args.push_args(mojo_rms_norm::Args<void>{
        .out = ptr(out),
        .residual = add_ ? ptr(residual) : nullptr,
        .x = ptr(x),
        .weight = ptr(t[t.size() - 1]),
        .eps = float(scalar(scalars, "eps")),
        .rows = x.spec.numel() / p.get("hidden"),
        .out_stride = rows::stride(name(), "out", out.spec),
        .residual_stride = rows::stride(name(), "residual", residual.spec),
        .x_stride = rows::stride(name(), "x", x.spec),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    TensorSpec xs(dtype, x), ws(dtype, shapes::value_or(shapes, "weight", {x.back()}));
    TensorSpec out(dtype, shapes::value_or(shapes, "out", x));
    if (add_) return {out, TensorSpec(dtype, shapes::value_or(shapes, "residual", x)), xs, ws};
    return {out, xs, ws};
  }

 private:
  std::size_t x_index() const { return add_ ? 2 : 1; }
  bool add_;
};

}  // namespace

const OpDef& rms_norm_op() {
  static const RmsNorm op(false);
  return op;
}
const OpDef& add_rms_norm_op() {
  static const RmsNorm op(true);
  return op;
}

}  // namespace mojo
