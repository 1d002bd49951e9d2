// The normalizations: rms_norm, add_rms_norm, layer_norm, layer_norm_backward.
// Templates: kernel_templates/rms_norm.cu and layer_norm.cu (params there).
#include <fmt/format.h>

#include "mojo/error.hpp"
#include "reference/reference.hpp"
#include "ops/host_data.hpp"
#include "ops/checks.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr ScalarArgInfo kEps[] = {{"eps", 1e-6, "added to the variance"}};

// weight (and bias) must be [cols] of x's dtype, contiguous.
void check_vector(std::string_view op, std::string_view arg, const TensorSpec& t, const TensorSpec& x,
                  std::int64_t cols) {
  checks::expect_same_dtype(op, arg, t, "x", x);
  if (t.rank() != 1 || t.dim(0) != cols)
    throw ShapeError(fmt::format("{}: {} has shape [{}]; expected [{}] (the last dim of x)", op, arg,
                                 fmt::join(t.shape(), ", "), cols));
  checks::expect_contiguous(op, arg, t);
}

// Every tensor of a row op must be non-null and aligned to the vector the kernel uses.
void expect_pointers(std::string_view op, std::span<const TensorArgInfo> infos, TensorList t, const Params& p) {
  const unsigned bytes = checks::vector_bytes(p);
  for (std::size_t i = 0; i < t.size(); ++i)
    if (infos[i].role != std::string_view("stats")) checks::expect_pointer(op, infos[i].name, t[i].data, bytes);
}

// rms_norm and add_rms_norm: one template, the add a compile-time flag.
constexpr TensorArgInfo kRmsTensors[] = {
    {"out", "out", "[..., hidden], same dtype as x; rows may be strided"},
    {"x", "in", "[..., hidden]; rows may be strided"},
    {"weight", "in", "[hidden]"},
};
constexpr TensorArgInfo kAddRmsTensors[] = {
    {"out", "out", "[..., hidden], same dtype as x; rows may be strided"},
    {"residual", "inout", "[..., hidden]; residual += x, then normalised"},
    {"x", "in", "[..., hidden]; rows may be strided"},
    {"weight", "in", "[hidden]"},
};

class RmsNorm final : public OpDef {
 public:
  explicit RmsNorm(bool add) : add_(add) {}
  std::string_view name() const override { return add_ ? "add_rms_norm" : "rms_norm"; }
  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& x = specs[add_ ? 2 : 1];
    const double eps = scalar(scalars, "eps");
    if (add_)
      reference::add_rms_norm(x.dtype(), d[1].data(), d[2].data(), d[3].data(), d[0].data(), host_data::rows(x),
                              host_data::last_dim(x), eps);
    else
      reference::rms_norm(x.dtype(), d[1].data(), d[2].data(), d[0].data(), host_data::rows(x), host_data::last_dim(x),
                          eps);
  }
  std::string_view summary() const override {
    return add_ ? "residual += x; out = residual * rsqrt(mean(residual^2) + eps) * weight, in one pass"
                : "out = x * rsqrt(mean(x^2) + eps) * weight over the last dim";
  }
  std::span<const TensorArgInfo> tensor_args() const override {
    if (add_) return kAddRmsTensors;
    return kRmsTensors;
  }
  std::span<const ScalarArgInfo> scalar_args() const override { return kEps; }
  std::span<const DType> dtypes() const override { return kFloatTypes; }
  std::string_view template_file() const override { return "rms_norm.cu"; }
  std::string_view example_shapes() const override { return "x=32x4096"; }

  Params specialize(TensorList t, ScalarList scalars, const Target&) const override {
    check_tensor_count(t);
    check_scalar_names(scalars);
    const TensorSpec& x = t[x_index()].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (i == x_index() || i + 1 == t.size()) continue;
      checks::expect_same_dtype(name(), tensor_args()[i].name, t[i].spec, "x", x);
      checks::expect_same_shape(name(), tensor_args()[i].name, t[i].spec, "x", x);
      rows::stride(name(), tensor_args()[i].name, t[i].spec);
    }
    check_vector(name(), "weight", t[t.size() - 1].spec, x, hidden);
    rows::stride(name(), "x", x);
    rows::count(name(), x);
    Params p;
    p.add_dtype("dtype", x.dtype());
    rows::add_params(p, "hidden", hidden,
                     add_ ? rows::pick(hidden, x.dtype(), {t[0], t[1], t[2], t[3]})
                          : rows::pick(hidden, x.dtype(), {t[0], t[1], t[2]}));
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[x_index()].spec.numel() / p.get("hidden"), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, KernelArgs& args) const override {
    expect_pointers(name(), tensor_args(), t, p);
    const Tensor& x = t[x_index()];
    const Tensor& out = t[0];
    const Tensor& residual = add_ ? t[1] : x;
    args.push(out.data);
    args.push(add_ ? residual.data : DevicePtr(0));
    args.push(x.data);
    args.push(t[t.size() - 1].data);
    args.push(float(scalar(scalars, "eps")));
    args.push(static_cast<long long>(x.spec.numel() / p.get("hidden")));
    args.push(static_cast<long long>(rows::stride(name(), "out", out.spec)));
    args.push(static_cast<long long>(rows::stride(name(), "residual", residual.spec)));
    args.push(static_cast<long long>(rows::stride(name(), "x", x.spec)));
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
    if (s.rank() == 0 && optional)
      throw ShapeError(fmt::format("{}: give both mean and rstd, or neither", op));
    checks::expect_dtype_in(op, arg, s.dtype(), std::span<const DType>(kFloatTypes, 1));
    if (s.numel() != rows || !s.is_contiguous())
      throw ShapeError(fmt::format("{}: {} is {}; expected a contiguous f32 tensor of {} elements (one per row)", op,
                                   arg, s.str(), rows));
  }
  return true;
}

class LayerNorm final : public OpDef {
 public:
  std::string_view name() const override { return "layer_norm"; }
  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& x = specs[3];
    auto stats = [&](std::size_t i) { return d[i].empty() ? nullptr : reinterpret_cast<float*>(d[i].data()); };
    reference::layer_norm(x.dtype(), d[3].data(), d[4].data(), d[5].data(), d[0].data(), stats(1), stats(2),
                          host_data::rows(x), host_data::last_dim(x), scalar(scalars, "eps"));
  }
  std::string_view summary() const override {
    return "out = (x - mean) * rstd * weight + bias over the last dim; optionally writes mean and rstd";
  }
  std::span<const TensorArgInfo> tensor_args() const override { return kLayerNormTensors; }
  std::span<const ScalarArgInfo> scalar_args() const override { return kEps; }
  std::span<const DType> dtypes() const override { return kFloatTypes; }
  std::string_view template_file() const override { return "layer_norm.cu"; }
  std::string_view example_shapes() const override { return "x=32x4096"; }

  Params specialize(TensorList t, ScalarList scalars, const Target&) const override {
    check_tensor_count(t);
    check_scalar_names(scalars);
    const TensorSpec &out = t[0].spec, &x = t[3].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    checks::expect_same_shape(name(), "out", out, "x", x);
    rows::stride(name(), "out", out);
    rows::stride(name(), "x", x);
    check_vector(name(), "weight", t[4].spec, x, hidden);
    check_vector(name(), "bias", t[5].spec, x, hidden);
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

  void pack_args(const Params& p, TensorList t, ScalarList scalars, KernelArgs& args) const override {
    expect_pointers(name(), tensor_args(), t, p);
    if (p.get("stats")) {
      checks::expect_pointer(name(), "mean", t[1].data, 4);
      checks::expect_pointer(name(), "rstd", t[2].data, 4);
    }
    for (int i = 0; i < 6; ++i) args.push(t[i].data);
    args.push(float(scalar(scalars, "eps")));
    args.push(static_cast<long long>(t[3].spec.numel() / p.get("hidden")));
    args.push(static_cast<long long>(rows::stride(name(), "out", t[0].spec)));
    args.push(static_cast<long long>(rows::stride(name(), "x", t[3].spec)));
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const std::vector<std::int64_t> cols{x.back()};
    auto stat = [&](std::string_view n) {
      auto it = shapes.find(n);
      return it == shapes.end() ? TensorSpec() : TensorSpec(DType::f32, it->second);
    };
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", x)), stat("mean"), stat("rstd"), TensorSpec(dtype, x),
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

class LayerNormBackward final : public OpDef {
 public:
  std::string_view name() const override { return "layer_norm_backward"; }
  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const TensorSpec& x = specs[4];
    reference::layer_norm_backward(x.dtype(), d[3].data(), d[4].data(), d[5].data(),
                                   reinterpret_cast<const float*>(d[6].data()), reinterpret_cast<const float*>(d[7].data()),
                                   d[0].data(), d[1].data(), d[2].data(), host_data::rows(x), host_data::last_dim(x));
  }
  std::string_view summary() const override {
    return "grad_x, grad_weight, grad_bias of layer_norm, from grad_out, x, weight and the forward's mean and rstd";
  }
  std::span<const TensorArgInfo> tensor_args() const override { return kLayerNormBackwardTensors; }
  std::span<const ScalarArgInfo> scalar_args() const override { return {}; }
  std::span<const DType> dtypes() const override { return kFloatTypes; }
  std::string_view template_file() const override { return "layer_norm.cu"; }
  std::string_view example_shapes() const override { return "x=32x4096"; }

  Params specialize(TensorList t, ScalarList scalars, const Target&) const override {
    check_tensor_count(t);
    check_scalar_names(scalars);
    const TensorSpec& x = t[4].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    for (std::size_t i : {0, 3, 4}) {
      checks::expect_same_dtype(name(), kLayerNormBackwardTensors[i].name, t[i].spec, "x", x);
      checks::expect_same_shape(name(), kLayerNormBackwardTensors[i].name, t[i].spec, "x", x);
      checks::expect_contiguous(name(), kLayerNormBackwardTensors[i].name, t[i].spec);
    }
    for (std::size_t i : {1, 2, 5}) check_vector(name(), kLayerNormBackwardTensors[i].name, t[i].spec, x, hidden);
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

  void pack_args(const Params& p, TensorList t, ScalarList, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    for (std::size_t i : {0, 3, 4, 5}) checks::expect_pointer(name(), kLayerNormBackwardTensors[i].name, t[i].data, bytes);
    for (std::size_t i : {1, 2})
      checks::expect_pointer(name(), kLayerNormBackwardTensors[i].name, t[i].data,
                             unsigned(dtype_size(p.dtype("dtype"))));
    for (std::size_t i : {6, 7}) checks::expect_pointer(name(), kLayerNormBackwardTensors[i].name, t[i].data, 4);
    for (std::size_t i = 0; i < 8; ++i) args.push(t[i].data);
    args.push(static_cast<long long>(t[4].spec.numel() / p.get("hidden")));
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const std::vector<std::int64_t> cols{x.back()}, rows{TensorSpec(dtype, x).numel() / x.back()};
    TensorSpec xs(dtype, x), vs(dtype, cols), ss(DType::f32, rows);
    return {xs, vs, vs, xs, xs, vs, ss, ss};
  }
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
const OpDef& layer_norm_op() {
  static const LayerNorm op;
  return op;
}
const OpDef& layer_norm_backward_op() {
  static const LayerNormBackward op;
  return op;
}

}  // namespace mojo
