// rms_norm: out = x * rsqrt(mean(x^2, last dim) + eps) * weight.
// Template: kernel_templates/rms_norm.cu (params documented there).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/registry.hpp"

namespace mojo {
namespace {

constexpr TensorArgInfo kTensors[] = {
    {"out", "out", "[..., hidden], same dtype as x"},
    {"x", "in", "[..., hidden], contiguous"},
    {"weight", "in", "[hidden]"},
};
constexpr ScalarArgInfo kScalars[] = {{"eps", 1e-6, "added to the mean square"}};
constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr std::int64_t kMaxHidden = 1 << 20;
// Vectors each thread should handle: enough loads in flight per thread to
// cover HBM latency, few enough that short rows still use many threads.
constexpr std::int64_t kVectorsPerThread = 4;

class RmsNorm final : public OpDef {
 public:
  std::string_view name() const override { return "rms_norm"; }
  std::string_view summary() const override {
    return "out = x * rsqrt(mean(x^2) + eps) * weight over the last dim";
  }
  std::span<const TensorArgInfo> tensor_args() const override { return kTensors; }
  std::span<const ScalarArgInfo> scalar_args() const override { return kScalars; }
  std::span<const DType> dtypes() const override { return kDTypes; }
  std::string_view template_file() const override { return "rms_norm.cu"; }

  Params specialize(TensorList t, ScalarList scalars, const Target&) const override {
    check_tensor_count(t);
    check_scalar_names(scalars);
    const TensorSpec &out = t[0].spec, &x = t[1].spec, &w = t[2].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kDTypes);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    checks::expect_same_dtype(name(), "weight", w, "x", x);
    if (x.rank() < 1) throw ShapeError("rms_norm: x must have at least one dimension");
    const std::int64_t hidden = x.dim(x.rank() - 1);
    if (hidden < 1 || hidden > kMaxHidden)
      throw ShapeError(fmt::format("rms_norm: hidden size (last dim of x) is {}; supported: 1 to {}", hidden,
                                   kMaxHidden));
    checks::expect_same_shape(name(), "out", out, "x", x);
    if (w.rank() != 1 || w.dim(0) != hidden)
      throw ShapeError(fmt::format("rms_norm: weight has shape [{}]; expected [{}] (the last dim of x)",
                                   fmt::join(w.shape(), ", "), hidden));
    checks::expect_contiguous(name(), "x", x);
    checks::expect_contiguous(name(), "out", out);
    checks::expect_contiguous(name(), "weight", w);
    if (x.numel() / hidden > std::int64_t(INT32_MAX))
      throw ShapeError(fmt::format("rms_norm: {} rows exceed the grid limit of {}", x.numel() / hidden, INT32_MAX));

    // Widest vector (up to 16 bytes) that divides the row and that every pointer is aligned to.
    const std::int64_t size = std::int64_t(dtype_size(x.dtype()));
    unsigned alignment = std::min({checks::alignment_of(t[0].data), checks::alignment_of(t[1].data),
                                   checks::alignment_of(t[2].data)});
    std::int64_t vec = 16 / size;
    while (vec > 1 && (hidden % vec != 0 || alignment < vec * size)) vec /= 2;

    const std::int64_t vectors = hidden / vec;
    std::int64_t threads, rows_per_block;
    if (vectors <= 16) {  // narrow rows: a few lanes per row, many rows per 128-thread block
      threads = std::bit_ceil(std::uint64_t(vectors));
      rows_per_block = 128 / threads;
    } else {
      threads = std::clamp<std::int64_t>((vectors + kVectorsPerThread - 1) / kVectorsPerThread, 32, 1024);
      threads = (threads + 31) / 32 * 32;
      rows_per_block = threads == 32 ? 4 : 1;
    }
    Params p;
    p.add_dtype("dtype", x.dtype());
    p.add("hidden", hidden);
    p.add("vec", vec);
    p.add("threads", threads);
    p.add("rows", rows_per_block);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const std::int64_t rows = t[1].spec.numel() / p.get("hidden");
    const std::int64_t per_block = p.get("rows");
    LaunchGeometry g;
    g.grid.x = unsigned((rows + per_block - 1) / per_block);
    g.block.x = unsigned(p.get("threads") * per_block);
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, KernelArgs& args) const override {
    const unsigned bytes = unsigned(p.get("vec") * std::int64_t(dtype_size(p.dtype("dtype"))));
    for (std::size_t i = 0; i < 3; ++i) checks::expect_pointer(name(), kTensors[i].name, t[i].data, bytes);
    args.push(t[0].data);
    args.push(t[1].data);
    args.push(t[2].data);
    args.push(float(scalar(scalars, "eps")));
    args.push(static_cast<long long>(t[1].spec.numel() / p.get("hidden")));
  }

  std::vector<TensorSpec> specs_from_shapes(
      DType dtype, const std::map<std::string, std::vector<std::int64_t>, std::less<>>& shapes) const override {
    auto x = shapes.find("x");
    if (x == shapes.end() || x->second.empty())
      throw ShapeError("rms_norm: give the shape of x, e.g. --shape x=4096x4096");
    TensorSpec xs(dtype, x->second);
    auto out = shapes.find("out");
    auto w = shapes.find("weight");
    return {out == shapes.end() ? xs : TensorSpec(dtype, out->second), xs,
            w == shapes.end() ? TensorSpec(dtype, {x->second.back()}) : TensorSpec(dtype, w->second)};
  }
};

}  // namespace

const OpDef& rms_norm_op() {
  static const RmsNorm op;
  return op;
}

}  // namespace mojo
