// softmax, log_softmax and softmax_backward over the last dim.
// Template: kernel_templates/softmax.cu (params there).
#include <fmt/format.h>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "softmax_args.h"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr TensorArgInfo kForwardTensors[] = {
    {"out", "out", "[..., cols], same dtype as x; rows may be strided"},
    {"x", "in", "[..., cols]; rows may be strided"},
};
constexpr TensorArgInfo kBackwardTensors[] = {
    {"grad_x", "out", "[..., cols], contiguous"},
    {"grad_out", "in", "[..., cols], contiguous"},
    {"out", "in", "[..., cols]: the forward softmax's output, contiguous"},
};

constexpr OpInfo kSoftmax{
    .name = "softmax",
    .summary = "out = exp(x - max) / sum(exp(x - max)) over the last dim",
    .tensors = kForwardTensors,
    .dtypes = kFloatTypes,
    .template_file = "softmax.cu",
    .example_shapes = "x=32x151936",
};
constexpr OpInfo kLogSoftmax{
    .name = "log_softmax",
    .summary = "out = x - max - log(sum(exp(x - max))) over the last dim",
    .tensors = kForwardTensors,
    .dtypes = kFloatTypes,
    .template_file = "softmax.cu",
    .example_shapes = "x=32x151936",
};

class Softmax final : public OpDef {
 public:
  explicit Softmax(bool log) : OpDef(log ? kLogSoftmax : kSoftmax), log_(log) {}
  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec &out = t[0].spec, &x = t[1].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t cols = rows::cols_of(name(), "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    checks::expect_same_shape(name(), "out", out, "x", x);
    rows::stride(name(), "out", out);
    rows::stride(name(), "x", x);
    rows::count(name(), x);
    Params p;
    p.add_dtype("dtype", x.dtype());
    rows::add_params(p, "cols", cols, rows::pick(cols, x.dtype(), {t[0], t[1]}));
    p.add("log", log_ ? 1 : 0);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[1].spec.numel() / p.get("cols"), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, DevicePtr, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    checks::expect_pointer(name(), "out", t[0].data, bytes);
    checks::expect_pointer(name(), "x", t[1].data, bytes);
    args.push_args(mojo_softmax::Args<void>{
        .out = ptr(t[0]),
        .x = ptr(t[1]),
        .rows = t[1].spec.numel() / p.get("cols"),
        .out_stride = rows::stride(name(), "out", t[0].spec),
        .x_stride = rows::stride(name(), "x", t[1].spec),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", x)), TensorSpec(dtype, x)};
  }

 private:
  bool log_;
};

constexpr OpInfo kSoftmaxBackward{
    .name = "softmax_backward",
    .summary = "grad_x = out * (grad_out - sum(grad_out * out)) over the last dim, from softmax's output",
    .tensors = kBackwardTensors,
    .dtypes = kFloatTypes,
    .template_file = "softmax.cu",
    .example_shapes = "out=32x151936",
};

class SoftmaxBackward final : public OpDef {
 public:
  SoftmaxBackward() : OpDef(kSoftmaxBackward) {}
  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec& y = t[2].spec;
    checks::expect_dtype_in(name(), "out", y.dtype(), kFloatTypes);
    const std::int64_t cols = rows::cols_of(name(), "out", y);
    for (std::size_t i = 0; i < 3; ++i) {
      checks::expect_same_dtype(name(), kBackwardTensors[i].name, t[i].spec, "out", y);
      checks::expect_same_shape(name(), kBackwardTensors[i].name, t[i].spec, "out", y);
      checks::expect_contiguous(name(), kBackwardTensors[i].name, t[i].spec);
    }
    rows::count(name(), y);
    Params p;
    p.add_dtype("dtype", y.dtype());
    rows::add_params(p, "cols", cols, rows::pick(cols, y.dtype(), {t[0], t[1], t[2]}));
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[2].spec.numel() / p.get("cols"), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, DevicePtr, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    for (std::size_t i = 0; i < 3; ++i) checks::expect_pointer(name(), kBackwardTensors[i].name, t[i].data, bytes);
    args.push_args(mojo_softmax::BackwardArgs<void>{
        .grad_x = ptr(t[0]),
        .grad_out = ptr(t[1]),
        .out = ptr(t[2]),
        .rows = t[2].spec.numel() / p.get("cols"),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& y = shapes::required(name(), shapes, "out", example_shapes());
    TensorSpec ys(dtype, y);
    return {ys, ys, ys};
  }
};

}  // namespace

const OpDef& softmax_op() {
  static const Softmax op(false);
  return op;
}
const OpDef& log_softmax_op() {
  static const Softmax op(true);
  return op;
}
const OpDef& softmax_backward_op() {
  static const SoftmaxBackward op;
  return op;
}

}  // namespace mojo
