// Elementwise activations and their gated forms: silu, gelu, swiglu, gelu_and_mul.
// Template: kernel_templates/activation.cu (params there).
#include <fmt/format.h>

#include "activation_args.h"
#include "mojo/error.hpp"
#include "mojo_activation.h"
#include "ops/checks.hpp"
#include "ops/registry.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr TensorArgInfo kPlainTensors[] = {
    {"out", "out", "same shape and dtype as x, contiguous; may be x (in place)", "x"},
    {"x", "in", "any shape, contiguous"},
};
constexpr TensorArgInfo kGatedTensors[] = {
    {"out", "out", "[..., d], same dtype as x, contiguous"},
    {"x", "in", "[..., 2 * d], contiguous: a = x[..., :d] is activated, b = x[..., d:] multiplies"},
};
constexpr ScalarArgInfo kGeluScalars[] = {{"approximate", 0, "0: the erf form; 1: the tanh approximation"}};
constexpr int kThreads = 256;

// One template, four ops: gelu or silu, plain or gated (x split in halves).
constexpr OpInfo kSilu{
    .name = "silu",
    .summary = "out = x / (1 + exp(-x))",
    .tensors = kPlainTensors,
    .dtypes = kFloatTypes,
    .template_file = "activation.cu",
    .example_shapes = "x=32x12288",
};
constexpr OpInfo kGelu{
    .name = "gelu",
    .summary = "out = x/2 * (1 + erf(x / sqrt 2)), or the tanh form with approximate=1",
    .tensors = kPlainTensors,
    .scalars = kGeluScalars,
    .dtypes = kFloatTypes,
    .template_file = "activation.cu",
    .example_shapes = "x=32x12288",
};
constexpr OpInfo kSwiglu{
    .name = "swiglu",
    .summary = "out = silu(a) * b with a, b the halves of the last dim of x",
    .tensors = kGatedTensors,
    .dtypes = kFloatTypes,
    .template_file = "activation.cu",
    .example_shapes = "x=32x24576",
};
constexpr OpInfo kGeluAndMul{
    .name = "gelu_and_mul",
    .summary = "out = gelu(a) * b with a, b the halves of the last dim of x",
    .tensors = kGatedTensors,
    .scalars = kGeluScalars,
    .dtypes = kFloatTypes,
    .template_file = "activation.cu",
    .example_shapes = "x=32x24576",
};

class Activation final : public OpDef {
  // Its tensors' places in kPlainTensors (kGatedTensors has them in the same places).
  static constexpr std::size_t kOut = slot(kPlainTensors, "out");
  static constexpr std::size_t kX = slot(kPlainTensors, "x");
  static_assert(slot(kGatedTensors, "out") == kOut && slot(kGatedTensors, "x") == kX);

 public:
  Activation(const OpInfo& info, bool gelu, bool gated) : OpDef(info), gelu_(gelu), gated_(gated) {}
  Params derive_params(TensorList t, ScalarList scalars, const Target&) const override {
    const TensorSpec &out = t[kOut].spec, &x = t[kX].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    checks::expect_contiguous(name(), "x", x);
    checks::expect_contiguous(name(), "out", out);
    std::int64_t d = 0;
    if (gated_) {
      if (x.rank() < 1 || x.dim(x.rank() - 1) % 2 != 0 || x.dim(x.rank() - 1) == 0)
        throw ShapeError(fmt::format("{}: x is {}; its last dim must be even{} (the two halves a and b)", name(),
                                     x.str(), x.rank() >= 1 && x.dim(x.rank() - 1) == 0 ? " and not 0" : ""));
      d = x.dim(x.rank() - 1) / 2;
      if (d > (1 << 24)) throw ShapeError(fmt::format("{}: d = {} is larger than 2^24", name(), d));
      bool ok = out.rank() == x.rank() && out.dim(out.rank() - 1) == d;
      for (int i = 0; ok && i + 1 < x.rank(); ++i) ok = out.dim(i) == x.dim(i);
      if (!ok)
        throw ShapeError(fmt::format("{}: out is {} but x is {}; out must be x with the last dim halved", name(),
                                     out.str(), x.str()));
    } else {
      checks::expect_same_shape(name(), "out", out, "x", x);
    }
    const std::int64_t size = std::int64_t(dtype_size(x.dtype()));
    const unsigned alignment = std::min(checks::alignment_of(t[kOut].data), checks::alignment_of(t[kX].data));
    const std::int64_t run = gated_ ? d : out.numel();  // a vector never crosses a half or a row
    std::int64_t vec = 16 / size;
    while (vec > 1 && (run % vec != 0 || alignment < vec * size)) vec /= 2;

    Params p;
    p.add_dtype("dtype", x.dtype());
    if (gelu_) {
      const double approximate = scalar(scalars, "approximate");
      if (approximate != 0 && approximate != 1)
        throw InvalidArgumentError(
            fmt::format("{}: approximate is {}; expected 0 (erf) or 1 (tanh)", name(), approximate));
      p.add("act", std::int64_t(approximate != 0 ? Act::gelu_tanh : Act::gelu));
    }
    if (gated_) p.add("d", d);
    p.add("vec", vec);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const std::int64_t vectors = t[kOut].spec.numel() / p.get("vec");
    LaunchGeometry g;
    g.grid.x = unsigned((vectors + kThreads - 1) / kThreads);
    g.block.x = kThreads;
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    checks::expect_pointer(name(), "out", t[kOut], bytes);
    checks::expect_pointer(name(), "x", t[kX], bytes);
    args.push_args(mojo_activation::Args<void>{
        .out = ptr(t[kOut]),
        .x = ptr(t[kX]),
        .n = t[kOut].spec.numel(),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    std::vector<std::int64_t> out = x;
    if (gated_) out.back() /= 2;
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", out)), TensorSpec(dtype, x)};
  }

 private:
  bool gelu_, gated_;
};

}  // namespace

const OpDef& silu_op() {
  static const Activation op(kSilu, false, false);
  return op;
}
const OpDef& gelu_op() {
  static const Activation op(kGelu, true, false);
  return op;
}
const OpDef& swiglu_op() {
  static const Activation op(kSwiglu, false, true);
  return op;
}
const OpDef& gelu_and_mul_op() {
  static const Activation op(kGeluAndMul, true, true);
  return op;
}

}  // namespace mojo
