// linear: out = act(x * weight^T + bias) + residual, the epilogue fused; the tiles: gemm_tile.hpp.
#include <fmt/format.h>

#include <algorithm>

#include "mojo/error.hpp"
#include "mojo_activation.h"
#include "ops/checks.hpp"
#include "ops/gemm_tile.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/cost.hpp"

namespace mojo {
namespace {

constexpr TensorArgInfo kLinearTensors[] = {
    {"out", "out", "[..., N], same dtype as x; rows may be strided; may be residual (added to in place)", "residual"},
    {"x", "in", "[..., K] f16, bf16 or f32; rows may be strided"},
    {"weight", "in", "[N, K] (the LLM layout: one row per output feature)"},
    {"bias", "in", "[N], or absent (a rank-0 tensor)"},
    {"residual", "in", "[..., N] added after the activation, or absent"},
};
constexpr ScalarArgInfo kLinearScalars[] = {
    {"activation", 0, "applied after the bias: 0 none, 1 gelu (erf), 2 gelu (tanh), 3 silu"},
    {"tf32", 0, "1: f32 inputs on tensor cores as tf32"},
    {"path", 0, kPathDoc},
    {"splits", 0, kSplitsDoc}};

// linear: out = act(x * weight^T + bias) + residual, the epilogue fused.
constexpr OpInfo kLinear{
    .name = "linear",
    .summary = "out = act(x * weight^T + bias) + residual on tensor cores; bias, activation and residual fused",
    .tensors = kLinearTensors,
    .scalars = kLinearScalars,
    .dtypes = kTileInputTypes,
    .template_file = "gemm.cu",
    .example_shapes = "x=32x4096 weight=6144x4096 bias=6144",
};

class Linear final : public TileOp {
  // Its tensors' places in kLinearTensors.
  static constexpr std::size_t kOut = slot(kLinearTensors, "out");
  static constexpr std::size_t kX = slot(kLinearTensors, "x");
  static constexpr std::size_t kWeight = slot(kLinearTensors, "weight");
  static constexpr std::size_t kBias = slot(kLinearTensors, "bias");
  static constexpr std::size_t kResidual = slot(kLinearTensors, "residual");

 public:
  Linear() : TileOp(kLinear) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const Dims d = dims(t);
    const DType dtype = t[kX].spec.dtype();
    const bool tf32 = tf32_of(*this, scalars, dtype);
    expect_tensor_cores(name(), dtype, tf32, target);
    const double act = scalar(scalars, "activation");
    if (act != int(Act::none) && act != int(Act::gelu) && act != int(Act::gelu_tanh) && act != int(Act::silu))
      throw InvalidArgumentError(
          fmt::format("{}: activation is {}; expected 0 (none), 1 (gelu), 2 (gelu tanh) or 3 (silu)", name(), act));
    Params p;
    p.add_dtype("dtype", dtype);
    const bool aligned = chunk_aligned(dtype, t[kX].data, {d.ldx}) && chunk_aligned(dtype, t[kWeight].data, {d.ldw});
    const bool wgmma_ok = wgmma_possible(target, dtype, aligned, d.m, d.n, d.k);
    const Path path = path_of(*this, scalars, wgmma_ok, target);
    const std::int64_t splits = requested_splits(*this, scalars);
    auto add_epilogue = [&] {
      p.add("bias", t[kBias].spec.rank() != 0 ? 1 : 0);
      p.add("act", std::int64_t(act));
      p.add("residual", t[kResidual].spec.rank() != 0 ? 1 : 0);
    };
    if (splits <= 1 && gemv_fits(d.m, d.k, dtype, aligned, tf32, path)) {
      add_gemv(p, pick_gemv(d.m, d.n, d.k, target));
      p.add("vec", 8);
      add_epilogue();
      return p;
    }
    // A requested split counts as batches for the tile: the tile fills the SMs with tiles x splits units.
    const TileConfig tile =
        split_k(pick_tile(d.m, d.n, d.k, dtype, tf32, target, wgmma_ok, std::max<std::int64_t>(splits, 1), path,
                          Sm90Tiles::any_width),  // W [N, K]: K-major
                d.m, d.n, d.k, 1, target, splits);
    add_tile(p, tile);
    p.add("vec", vec_param(tile, aligned));
    add_epilogue();
    p.add("tf32", tf32);
    p.add("wgmma", tile.wgmma);
    return p;
  }

  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    const Dims d = dims(t);
    c.flops = 2.0 * double(d.m) * double(d.n) * double(d.k);
    c.weight_bytes = cost::bytes(t[kWeight]);
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Dims d = dims(t);
    return tile_geometry(p, d.m, d.n, 1);
  }
  std::size_t workspace_bytes(const Params& p, TensorList t) const override {
    const Dims d = dims(t);
    return split_workspace_bytes(p, d.m, d.n, 1);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace& workspace,
                 KernelArgs& args) const override {
    const Dims d = dims(t);
    const unsigned chunk = operand_alignment(p);
    checks::expect_pointer(name(), "out", t[kOut], unsigned(dtype_size(t[kOut].spec.dtype())));
    checks::expect_pointer(name(), "x", t[kX], chunk);
    checks::expect_pointer(name(), "weight", t[kWeight], chunk);
    const unsigned element = unsigned(dtype_size(t[kOut].spec.dtype()));
    if (p.get("bias")) checks::expect_pointer(name(), "bias", t[kBias], element);
    if (p.get("residual")) checks::expect_pointer(name(), "residual", t[kResidual], element);
    push_kernel_args(args,
                     {.c = t[kOut].data,
                      .a = t[kX].data,
                      .b = t[kWeight].data,
                      .bias = p.get("bias") ? t[kBias].data : DevicePtr(0),
                      .residual = p.get("residual") ? t[kResidual].data : DevicePtr(0),
                      .m = d.m,
                      .n = d.n,
                      .k = d.k,
                      .lda = d.ldx,
                      .ldb = d.ldw,
                      .ldc = d.ldo,
                      .ldr = d.ldr,
                      .partials = workspace.scratch},
                     p);
  }

  std::string bucket(TensorList t) const override {
    const Dims d = dims(t);
    return shape_bucket(d.m, d.n, d.k);
  }
  // The residual may be the output itself: then each timed launch would add it again.
  bool safe(TensorList t, ScalarList) const override {
    return t[kResidual].spec.rank() == 0 || t[kResidual].data != t[kOut].data;
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const auto& w = shapes::required(name(), shapes, "weight", example_shapes());
    std::vector<std::int64_t> out = x;
    if (!out.empty() && !w.empty()) out.back() = w.front();
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", out)), TensorSpec(dtype, x), TensorSpec(dtype, w),
            shapes::optional(shapes, "bias", dtype), shapes::optional(shapes, "residual", dtype)};
  }

 private:
  struct Dims {
    std::int64_t m, n, k, ldx, ldw, ldo, ldr;
  };
  // x and out seen as [M, K] and [M, N] (leading dims collapsed), validated.
  Dims dims(TensorList t) const {
    const TensorSpec &out = t[kOut].spec, &x = t[kX].spec, &w = t[kWeight].spec, &bias = t[kBias].spec,
                     &res = t[kResidual].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kTileInputTypes);
    if (x.rank() < 2)
      throw ShapeError(fmt::format("{}: x is {}; expected [..., K] with at least 2 dims", name(), x.str()));
    if (w.rank() != 2 || w.dim(1) != x.dim(x.rank() - 1))
      throw ShapeError(fmt::format("{}: weight is {}; expected [N, {}] (one row per output feature)", name(), w.str(),
                                   x.dim(x.rank() - 1)));
    Dims d{};
    d.k = x.dim(x.rank() - 1);
    d.n = w.dim(0);
    d.m = x.numel() / std::max<std::int64_t>(d.k, 1);
    if (d.k == 0) d.m = out.numel() / std::max<std::int64_t>(d.n, 1);
    checks::expect_same_dtype(name(), "weight", w, "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    if (out.rank() != x.rank() || out.numel() != d.m * d.n || out.dim(out.rank() - 1) != d.n)
      throw ShapeError(fmt::format("{}: out is {}; expected x's leading dims and N = {}", name(), out.str(), d.n));
    if (bias.rank() != 0) {
      checks::expect_same_dtype(name(), "bias", bias, "x", x);
      if (bias.rank() != 1 || bias.dim(0) != d.n || !bias.is_contiguous())
        throw ShapeError(fmt::format("{}: bias is {}; expected [{}] contiguous, or absent", name(), bias.str(), d.n));
    }
    if (res.rank() != 0) {
      checks::expect_same_dtype(name(), "residual", res, "x", x);
      checks::expect_same_shape(name(), "residual", res, "out", out);
      d.ldr = leading_stride(res, "residual");
    }
    checked_dim(name(), "M", d.m);
    checked_dim(name(), "N", d.n);
    checked_dim(name(), "K", d.k);
    d.ldx = leading_stride(x, "x");
    d.ldo = leading_stride(out, "out");
    d.ldw = row_stride(name(), "weight", w);
    return d;
  }
  // Rows of a [..., cols] tensor as one evenly strided dim.
  std::int64_t leading_stride(const TensorSpec& t, std::string_view arg) const {
    for (int i = 0; i + 2 < t.rank(); ++i)
      if (t.dim(i) > 1 && t.stride(i) != t.stride(i + 1) * t.dim(i + 1))
        throw ShapeError(
            fmt::format("{}: {} {}: its leading dims must collapse into one evenly strided dim", name(), arg, t.str()));
    return row_stride(name(), arg, t);
  }
};

}  // namespace

const OpDef& linear_op() {
  static const Linear op;
  return op;
}

}  // namespace mojo
