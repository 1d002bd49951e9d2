// layer_norm_backward and rms_norm_backward: one template (kernel_templates/norm_backward.cu, params there),
// the norm chosen by the op's entry macro. Both are plans of two steps: the rows, then the column sums.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <numeric>

#include "mojo/error.hpp"
#include "norm_backward_args.h"
#include "ops/checks.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;

constexpr TensorArgInfo kLayerNormBackwardTensors[] = {
    {"grad_x", "out", "[..., hidden], contiguous"},
    {"grad_weight", "out", "[hidden]: sum over rows of grad_out * xhat, deterministic"},
    {"grad_bias", "out", "[hidden]: sum over rows of grad_out, deterministic"},
    {"grad_out", "in", "[..., hidden], contiguous"},
    {"x", "in", "[..., hidden], contiguous"},
    {"weight", "in", "[hidden]"},
    {"mean", "in", "f32 [rows], from layer_norm"},
    {"rstd", "in", "f32 [rows], from layer_norm"},
};
constexpr TensorArgInfo kRmsNormBackwardTensors[] = {
    {"grad_x", "out", "[..., hidden], contiguous; may be grad_residual (added to in place)", "grad_residual"},
    {"grad_weight", "out", "[hidden]: sum over rows of grad_out * x * rstd, deterministic"},
    {"grad_out", "in", "[..., hidden], contiguous"},
    {"x", "in", "[..., hidden], contiguous: rms_norm's x, or add_rms_norm's residual after the add"},
    {"weight", "in", "[hidden]"},
    {"grad_residual", "in",
     "[..., hidden] or absent (rank 0): for add_rms_norm, the gradient of the updated residual from the layers "
     "after, added to grad_x (which is then the gradient of both x and residual)"},
};
constexpr ScalarArgInfo kEps[] = {{"eps", 1e-6, "the forward's: rstd = 1/sqrt(mean(x^2) + eps)"}};

constexpr OpInfo kLayerNormBackward{
    .name = "layer_norm_backward",
    .summary = "grad_x, grad_weight, grad_bias of layer_norm, from grad_out, x, weight and the forward's mean and rstd",
    .tensors = kLayerNormBackwardTensors,
    .dtypes = kFloatTypes,
    .template_file = "norm_backward.cu",
    .example_shapes = "x=32x4096",
};
constexpr OpInfo kRmsNormBackward{
    .name = "rms_norm_backward",
    .summary = "grad_x, grad_weight of rms_norm (of add_rms_norm, given grad_residual), from grad_out, x and weight",
    .tensors = kRmsNormBackwardTensors,
    .scalars = kEps,
    .dtypes = kFloatTypes,
    .template_file = "norm_backward.cu",
    .example_shapes = "x=32x4096",
};

// Where each tensor is in an op's list; -1: the op has none.
struct Slots {
  int grad_x, grad_weight, grad_bias, grad_out, x, weight, mean, rstd, grad_residual;
};
constexpr Slots kLayerNormSlots{0, 1, 2, 3, 4, 5, 6, 7, -1};
constexpr Slots kRmsNormSlots{0, 1, -1, 2, 3, 4, -1, -1, 5};

class NormBackward final : public OpDef {
 public:
  explicit NormBackward(bool rms)
      : OpDef(rms ? kRmsNormBackward : kLayerNormBackward), rms_(rms), s_(rms ? kRmsNormSlots : kLayerNormSlots) {}

  Params derive_params(TensorList t, ScalarList, const Target& target) const override {
    const TensorSpec& x = t[s_.x].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t hidden = rows::cols_of(name(), "x", x);
    const bool residual = rms_ && t[s_.grad_residual].spec.rank() != 0;
    for (int i : {s_.grad_x, s_.grad_out, s_.x, residual ? s_.grad_residual : s_.x}) {
      checks::expect_same_dtype(name(), arg(i), t[i].spec, "x", x);
      checks::expect_same_shape(name(), arg(i), t[i].spec, "x", x);
      checks::expect_contiguous(name(), arg(i), t[i].spec);
    }
    for (int i : {s_.grad_weight, s_.grad_bias, s_.weight})
      if (i >= 0) rows::check_vector(name(), arg(i), t[i].spec, x, hidden);
    const std::int64_t rows = rows::count(name(), x);
    if (!rms_) rows::check_stats(name(), t, std::size_t(s_.mean), rows, false);
    Params p;
    p.add_dtype("dtype", x.dtype());
    rows::Layout l = rows::pick(hidden, x.dtype(),
                                {t[s_.grad_x], t[s_.grad_out], t[s_.x], t[s_.weight],
                                 t[residual ? s_.grad_residual : s_.weight]},
                                512);
    // The plan with partials where a thread's columns fit in registers.
    // Narrow rows share a block of 256 (a thread takes up to 4 vectors), wider ones have a block each (2).
    const std::int64_t vectors = hidden / l.vec, pairs = (vectors + 1) / 2;
    const std::int64_t threads = pairs <= 32     ? std::int64_t(std::bit_ceil(std::uint64_t(pairs)))
                                 : vectors <= 128 ? 32
                                                  : std::min<std::int64_t>((pairs + 31) / 32 * 32, 512);
    // The registers a thread of the partials form needs: the columns it sums (grad_weight's, and
    // grad_bias's) in f32, its vectors of grad_out and x and, unless it reads it again at each row, of the
    // weight; and the rest of the thread's: 24, and for rms_norm 4 more a vector, which it keeps until the
    // row's rstd is known and sums then (fitted to ptxas's counts at 256 to 131,072 columns, f32, f16 and
    // bf16, both compilers: with less, 8 to 88 bytes of stack). It must fit in 128 (at least 16 warps an SM)
    // and in what the block leaves a thread.
    const std::int64_t items = (vectors + threads - 1) / threads, columns = items * l.vec;
    const std::int64_t element = dtype_size(x.dtype()), block = threads * (threads <= 32 ? 256 / threads : 1);
    const std::int64_t rest = 24 + (rms_ ? 4 * items : 0), budget = std::min<std::int64_t>(128, 65536 / block);
    const auto registers = [&](bool weight_in_registers) {
      return columns * sums() + columns * (weight_in_registers ? 3 : 2) * element / 4 + rest;
    };
    // 1: the weight in registers; 2: read again at each row (from L1); 0: no partials.
    const int partials = registers(true) <= budget ? 1 : registers(false) <= budget ? 2 : 0;
    if (partials != 0) {
      l.threads = threads;
      l.rows_per_block = block / threads;
    }
    rows::add_params(p, "hidden", hidden, l);
    p.add("partials", partials);
    // Blocks an SM of the row step. With partials: what those registers allow, bound on the kernel so ptxas
    // keeps to them; that many on each SM is one wave.
    const std::int64_t min_blocks =
        partials != 0 ? std::clamp<std::int64_t>(65536 / (block * registers(partials == 1)), 1, 2048 / block) : 1;
    p.add("min_blocks", min_blocks);
    if (partials != 0) p.add("max_parts", min_blocks * reference_sm_count(target));
    if (rms_) p.add("residual", residual ? 1 : 0);
    return p;
  }

  std::vector<Params> plan(const Params& p) const override {
    return two_steps(p);  // the rows, then the columns
  }

  std::size_t workspace_bytes(const Params& p, TensorList t) const override {
    if (p.get("partials") != 0) return std::size_t(sums() * parts(p, t) * p.get("hidden")) * sizeof(float);
    return rms_ ? std::size_t(row_count(p, t)) * sizeof(float) : 0;  // rms_norm's rstd, for the column step
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g;
    if (p.get("step") == 1) {
      g.grid.x = unsigned((p.get("hidden") + 31) / 32);
      g.block.x = 256;
    } else if (p.get("partials") != 0) {
      g.grid.x = unsigned(parts(p, t));
      g.block.x = unsigned(p.get("threads") * p.get("rows"));
    } else {
      g = rows::geometry(row_count(p, t), p);
    }
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace& workspace,
                 KernelArgs& args) const override {
    const bool residual = rms_ && p.get("residual") != 0;
    for (int i : {s_.grad_x, s_.grad_out, s_.x, s_.weight, residual ? s_.grad_residual : s_.x})
      checks::expect_pointer(name(), arg(i), t[i], checks::vector_bytes(p));
    for (int i : {s_.grad_weight, s_.grad_bias})
      if (i >= 0) checks::expect_pointer(name(), arg(i), t[i], unsigned(dtype_size(p.dtype("dtype"))));
    for (int i : {s_.mean, s_.rstd})
      if (i >= 0) checks::expect_pointer(name(), arg(i), t[i], 4);
    auto optional = [&](int i) { return i >= 0 ? t[i].data : DevicePtr(0); };
    args.push_args(mojo_norm_backward::Args<void>{
        .grad_x = ptr(t[s_.grad_x]),
        .grad_weight = ptr(t[s_.grad_weight]),
        .grad_bias = ptr(optional(s_.grad_bias)),
        .grad_out = ptr(t[s_.grad_out]),
        .x = ptr(t[s_.x]),
        .weight = ptr(t[s_.weight]),
        .mean = ptr<float>(optional(s_.mean)),
        .rstd = ptr<float>(optional(s_.rstd)),
        .grad_residual = residual ? ptr(t[s_.grad_residual]) : nullptr,
        .eps = rms_ ? float(scalar(scalars, "eps")) : 0.f,
        .rows = row_count(p, t),
        .workspace = reinterpret_cast<float*>(workspace.scratch),
        .parts = p.get("partials") != 0 ? parts(p, t) : 0,
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const TensorSpec xs(dtype, x);  // first: it checks that the dims' product fits
    const std::vector<std::int64_t> cols{x.back()},
        rows{std::accumulate(x.begin(), x.end() - 1, std::int64_t(1), std::multiplies<>())};
    const TensorSpec vs(dtype, cols), ss(DType::f32, rows);
    if (rms_) return {xs, vs, xs, xs, vs, shapes::optional(shapes, "grad_residual", dtype)};
    return {xs, vs, vs, xs, xs, vs, ss, ss};
  }

 private:
  std::string_view arg(int i) const { return tensor_args()[std::size_t(i)].name; }
  // The column sums each row adds to: grad_weight's, and layer_norm's grad_bias's.
  std::int64_t sums() const { return rms_ ? 1 : 2; }
  std::int64_t row_count(const Params& p, TensorList t) const { return t[s_.x].spec.numel() / p.get("hidden"); }
  // The blocks of the partials' row step, each writing one partial (4 or 8 bytes a column, written and read
  // back, against the 6 to 12 bytes a column each row moves): a wave of max_parts blocks where every block
  // gets at least 16 row groups, else fewer but still one an SM, and never more than there are row groups.
  std::int64_t parts(const Params& p, TensorList t) const {
    const std::int64_t groups = (row_count(p, t) + p.get("rows") - 1) / p.get("rows");
    const std::int64_t wave = p.get("max_parts"), sms = wave / p.get("min_blocks");
    return std::max<std::int64_t>(std::min({wave, std::max(sms, (groups + 15) / 16), groups}), 1);
  }

  bool rms_;
  Slots s_;
};

}  // namespace

const OpDef& layer_norm_backward_op() {
  static const NormBackward op(false);
  return op;
}
const OpDef& rms_norm_backward_op() {
  static const NormBackward op(true);
  return op;
}

}  // namespace mojo
