// group_gemm: many products of different M sharing N and K (MoE experts) in one launch; and
// group_gemm_weight_grad, its weights' gradient: a product a group over that group's rows. The tiles:
// gemm_tile.hpp.
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

constexpr TensorArgInfo kGroupTensors[] = {
    {"out", "out", "[rows, N] ([rows, N / 2] gated), same dtype as x: each group's rows written with its own weight"},
    {"x", "in", "[rows, K] f16, bf16 or f32, the groups' rows one after another (tokens sorted by expert)"},
    {"weight", "in",
     "[groups, N, K]: one [N, K] matrix per group (expert); gated: rows 2j, 2j + 1 are gate_j, up_j; with "
     "weight_kn, [groups, K, N]"},
    {"offsets", "in", "i32 or i64 [groups + 1]: group g owns rows [offsets[g], offsets[g + 1])"},
};
constexpr ScalarArgInfo kGroupScalars[] = {
    {"tf32", 0, "1: f32 inputs on tensor cores as tf32"},
    {"path", 0, kPathDoc},
    {"gated_activation", 0,
     "0: none; 1 gelu, 2 gelu (tanh), 3 silu: the MoE MLP's act-and-mul fused: out[r, j] = act(gate_j) * up_j "
     "from interleaved gate/up weight rows"},
    {"weight_kn", 0,
     "1: weight is stored [groups, K, N] and out[rows of g] = x * weight[g]: another product's [groups, N, K] "
     "weights as they are, for its input's gradient (no transposed copy)"}};

// group_gemm: many products of different M sharing N and K (MoE experts), one launch.
constexpr OpInfo kGroupGemm{
    .name = "group_gemm",
    .summary = "out[rows of g] = x[rows of g] * weight[g]^T for every group g (MoE experts) in one launch",
    .tensors = kGroupTensors,
    .scalars = kGroupScalars,
    .dtypes = kTileInputTypes,
    .template_file = "gemm.cu",
    .example_shapes = "x=4096x4096 weight=64x1536x4096 offsets=65",
};

// Offsets decide which rows the kernels touch (they clamp them to x): with debug checks on they are read back and
// must be a non-decreasing range within the rows of x.
void check_offsets(std::string_view op, const Tensor& offsets, std::int64_t rows, StreamHandle stream) {
  const std::vector<std::int64_t> off = indices::read(offsets, stream);
  for (std::size_t g = 0; g + 1 < off.size(); ++g)
    if (off[g] < 0 || off[g] > off[g + 1] || off[g + 1] > rows)
      throw InvalidArgumentError(
          fmt::format("{}: offsets[{}..{}] = {}, {} are not a non-decreasing range within the {} rows of x", op, g,
                      g + 1, off[g], off[g + 1], rows));
}

// offsets: `groups` + 1 of i32 or i64.
void expect_offsets(std::string_view op, const TensorSpec& off, std::int64_t groups) {
  checks::expect_dtype_in(op, "offsets", off.dtype(), indices::kTypes);
  if (off.rank() != 1 || off.dim(0) != groups + 1 || !off.is_contiguous())
    throw ShapeError(fmt::format("{}: offsets is {}; expected [{}] (groups + 1)", op, off.str(), groups + 1));
}

class GroupGemm final : public TileOp {
  // Its tensors' places in kGroupTensors.
  static constexpr std::size_t kOut = slot(kGroupTensors, "out");
  static constexpr std::size_t kX = slot(kGroupTensors, "x");
  static constexpr std::size_t kWeight = slot(kGroupTensors, "weight");
  static constexpr std::size_t kOffsets = slot(kGroupTensors, "offsets");

 public:
  GroupGemm() : TileOp(kGroupGemm) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const Dims d = dims(t, scalars);
    const DType dtype = t[kX].spec.dtype();
    const bool tf32 = tf32_of(*this, scalars, dtype);
    expect_tensor_cores(name(), dtype, tf32, target);
    Params p;
    p.add_dtype("dtype", dtype);
    // The tile for a typical group: rows / groups (decode-sized groups get the thin tile).
    const std::int64_t typical = std::max<std::int64_t>(1, d.rows / std::max<std::int64_t>(d.groups, 1));
    const bool aligned = chunk_aligned(dtype, t[kX].data, {d.ldx}) &&
                         chunk_aligned(dtype, t[kWeight].data, {d.weight_kn ? d.n : d.k, d.n * d.k});
    const bool wgmma_ok = wgmma_possible(target, dtype, aligned, d.rows, d.n, d.k);
    const TileConfig tile = pick_tile(typical, d.n * d.groups, d.k, dtype, tf32, target, wgmma_ok, 1,
                                      path_of(*this, scalars, wgmma_ok, target));
    add_tile(p, tile);
    p.add("vec", vec_param(tile, aligned));
    p.add("offsets", std::int64_t(dtype_size(t[kOffsets].spec.dtype())));
    p.add("tf32", tf32);
    p.add("wgmma", tile.wgmma);
    const int gated = gated_activation(scalars);
    p.add("act", gated != 0 ? gated + kGated : 0);
    p.add("tb", d.weight_kn ? 0 : 1);  // gemm.cu's TRANS_B: the weights stored [N, K]
    return p;
  }

  // Every row of x through its group's [N, K] weight; every group's weight read (none empty).
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    const Dims d = dims(t, s);
    c.flops = 2.0 * double(d.rows) * double(d.n) * double(d.k);
    c.weight_bytes = cost::bytes(t[kWeight]);
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Dims d = dims(t, layout_of(p));
    return group_tile_geometry(p, d.rows, d.n, d.groups);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace&, KernelArgs& args) const override {
    const Dims d = dims(t, scalars);
    const unsigned chunk = operand_alignment(p);
    checks::expect_pointer(name(), "out", t[kOut], unsigned(dtype_size(t[kOut].spec.dtype())));
    checks::expect_pointer(name(), "x", t[kX], chunk);
    checks::expect_pointer(name(), "weight", t[kWeight], chunk);
    checks::expect_pointer(name(), "offsets", t[kOffsets], unsigned(dtype_size(t[kOffsets].spec.dtype())));
    push_kernel_args(args,
                     {.c = t[kOut].data,
                      .a = t[kX].data,
                      .b = t[kWeight].data,
                      .m = d.rows,
                      .n = d.n,
                      .k = d.k,
                      .lda = d.ldx,
                      .ldb = d.weight_kn ? d.n : d.k,
                      .ldc = d.ldo,
                      .batch_b = d.n * d.k,  // one weight matrix per group
                      .offsets = t[kOffsets].data,
                      .total_rows = d.rows,
                      .batches = d.groups,
                      .mn_major_b = d.weight_kn},
                     p);
  }

  void check_data(TensorList t, ScalarList scalars, StreamHandle stream) const override {
    check_offsets(name(), t[kOffsets], dims(t, scalars).rows, stream);
  }

  // Rows a group, and the weights' two dims (their order follows the layout, which bucket is not told).
  std::string bucket(TensorList t) const override {
    const TensorSpec& w = t[kWeight].spec;
    if (w.rank() != 3) return shape_bucket(0, 0, 0);
    return shape_bucket(t[kX].spec.dim(0) / std::max<std::int64_t>(w.dim(0), 1), w.dim(1), w.dim(2));
  }
  bool safe(TensorList, ScalarList) const override { return true; }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const auto& w = shapes::required(name(), shapes, "weight", example_shapes());
    std::vector<std::int64_t> out = x;
    if (!out.empty() && w.size() == 3) out.back() = w[1];
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", out)), TensorSpec(dtype, x), TensorSpec(dtype, w),
            TensorSpec(DType::i64, shapes::value_or(shapes, "offsets", {w.empty() ? 1 : w.front() + 1}))};
  }
  // out [rows, N], N the weights' rows or, with weight_kn, their columns; gated, half of it.
  void complete_shapes(ShapeMap& shapes, ScalarList scalars) const override {
    const auto x = shapes.find("x"), w = shapes.find("weight");
    const Layout l = layout_of(scalars);
    if (shapes.contains("out") || x == shapes.end() || w == shapes.end() || x->second.empty() ||
        w->second.size() != 3 || (!l.gated && !l.weight_kn))
      return;
    std::vector<std::int64_t> out = x->second;
    out.back() = w->second[l.weight_kn ? 2 : 1] / (l.gated ? 2 : 1);
    shapes.emplace("out", std::move(out));
  }

 private:
  // The gated_activation scalar, checked: 0 or an activation code.
  int gated_activation(ScalarList scalars) const {
    const double act = scalar(scalars, "gated_activation");
    if (act != 0 && act != int(Act::gelu) && act != int(Act::gelu_tanh) && act != int(Act::silu))
      throw InvalidArgumentError(fmt::format(
          "{}: gated_activation is {}; expected 0 (none), 1 (gelu), 2 (gelu tanh) or 3 (silu)", name(), act));
    return int(act);
  }
  // What the scalars (or the params, which record them) say of the tensors: out gated ([rows, N / 2]), the
  // weights stored [groups, K, N].
  struct Layout {
    bool gated = false, weight_kn = false;
  };
  Layout layout_of(ScalarList scalars) const {
    return {gated_activation(scalars) != 0, zero_or_one(*this, scalars, "weight_kn") != 0};
  }
  static Layout layout_of(const Params& p) { return {p.get("act") >= kGated, p.get("tb") == 0}; }
  struct Dims {
    std::int64_t rows, groups, n, k, ldx, ldo;
    bool weight_kn;
  };
  Dims dims(TensorList t, ScalarList scalars) const { return dims(t, layout_of(scalars)); }
  Dims dims(TensorList t, const Layout& l) const {
    const TensorSpec &out = t[kOut].spec, &x = t[kX].spec, &w = t[kWeight].spec, &off = t[kOffsets].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kTileInputTypes);
    checks::expect_same_dtype(name(), "weight", w, "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    if (x.rank() != 2) throw ShapeError(fmt::format("{}: x is {}; expected [rows, K]", name(), x.str()));
    if (w.rank() != 3 || w.dim(l.weight_kn ? 1 : 2) != x.dim(1) || !w.is_contiguous())
      throw ShapeError(
          fmt::format("{}: weight is {}; expected contiguous [groups, {}", name(), w.str(),
                      l.weight_kn ? fmt::format("{}, N] (weight_kn)", x.dim(1)) : fmt::format("N, {}]", x.dim(1))));
    Dims d{};
    d.rows = x.dim(0);
    d.groups = w.dim(0);
    d.weight_kn = l.weight_kn;
    d.n = w.dim(l.weight_kn ? 2 : 1);
    d.k = x.dim(1);
    if (l.gated && d.n % 2 != 0)
      throw ShapeError(
          fmt::format("{}: weight is {}; a gated product needs (gate, up) pairs: an even N", name(), w.str()));
    const std::int64_t out_n = l.gated ? d.n / 2 : d.n;
    if (out.rank() != 2 || out.dim(0) != d.rows || out.dim(1) != out_n)
      throw ShapeError(fmt::format("{}: out is {}; expected [{}, {}]", name(), out.str(), d.rows, out_n));
    expect_offsets(name(), off, d.groups);
    checked_dim(name(), "rows", d.rows);
    checked_dim(name(), "N", d.n);
    checked_dim(name(), "K", d.k);
    checked_dim(name(), "groups", d.groups);
    d.ldx = row_stride(name(), "x", x);
    d.ldo = row_stride(name(), "out", out);
    return d;
  }
};

constexpr TensorArgInfo kWeightGradTensors[] = {
    {"grad_weight", "out", "[groups, N, K], contiguous, same dtype as x: group g's weight gradient (zeros: no rows)"},
    {"grad_out", "in", "[rows, N], same dtype as x: the gradient of group_gemm's out (ungated)"},
    {"x", "in", "[rows, K] f16, bf16 or f32: group_gemm's x, the groups' rows one after another"},
    {"offsets", "in", "i32 or i64 [groups + 1]: group g owns rows [offsets[g], offsets[g + 1])"},
};
constexpr ScalarArgInfo kWeightGradScalars[] = {{"tf32", 0, "1: f32 inputs on tensor cores as tf32"},
                                                {"path", 0, kPathDoc}};
constexpr OpInfo kGroupGemmWeightGrad{
    .name = "group_gemm_weight_grad",
    .summary =
        "grad_weight[g] = grad_out[rows of g]^T * x[rows of g] for every group g: group_gemm's weights' "
        "gradient in one launch",
    .tensors = kWeightGradTensors,
    .scalars = kWeightGradScalars,
    .dtypes = kTileInputTypes,
    .template_file = "gemm.cu",
    .example_shapes = "grad_out=4096x1536 x=4096x4096 offsets=65",
};

// A product a group, summing over its rows: C[g] = A^T B with A = grad_out's rows ([rows_g, N], so op(A) is
// [N, rows_g]) and B = x's ([rows_g, K]), both MN-major. On the sm_90a path a group's last k tile is copied
// with cp.async, zeros past its rows (gemm_sm90.cuh).
class GroupGemmWeightGrad final : public TileOp {
  static constexpr std::size_t kGradWeight = slot(kWeightGradTensors, "grad_weight");
  static constexpr std::size_t kGradOut = slot(kWeightGradTensors, "grad_out");
  static constexpr std::size_t kX = slot(kWeightGradTensors, "x");
  static constexpr std::size_t kOffsets = slot(kWeightGradTensors, "offsets");

 public:
  GroupGemmWeightGrad() : TileOp(kGroupGemmWeightGrad) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const Dims d = dims(t);
    const DType dtype = t[kX].spec.dtype();
    const bool tf32 = tf32_of(*this, scalars, dtype);
    expect_tensor_cores(name(), dtype, tf32, target);
    Params p;
    p.add_dtype("dtype", dtype);
    // The tile for the groups' [N, K] outputs, over a typical group's rows.
    const bool aligned =
        chunk_aligned(dtype, t[kGradOut].data, {d.ld_grad}) && chunk_aligned(dtype, t[kX].data, {d.ldx});
    const bool wgmma_ok = wgmma_possible(target, dtype, aligned, d.n, d.k, d.rows);
    const TileConfig tile = pick_tile(d.n, d.k, typical_rows(d), dtype, tf32, target, wgmma_ok, d.groups,
                                      path_of(*this, scalars, wgmma_ok, target), Sm90Tiles::widths_of_64);
    add_tile(p, tile);
    p.add("vec", vec_param(tile, aligned));
    p.add("offsets", std::int64_t(dtype_size(t[kOffsets].spec.dtype())));
    p.add("tf32", tf32);
    p.add("wgmma", tile.wgmma);
    return p;
  }

  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    const Dims d = dims(t);
    c.flops = 2.0 * double(d.rows) * double(d.n) * double(d.k);
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Dims d = dims(t);
    return tile_geometry(p, d.n, d.k, d.groups);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    const Dims d = dims(t);
    const unsigned chunk = operand_alignment(p);
    checks::expect_pointer(name(), "grad_weight", t[kGradWeight], unsigned(dtype_size(t[kX].spec.dtype())));
    checks::expect_pointer(name(), "grad_out", t[kGradOut], chunk);
    checks::expect_pointer(name(), "x", t[kX], chunk);
    checks::expect_pointer(name(), "offsets", t[kOffsets], unsigned(dtype_size(t[kOffsets].spec.dtype())));
    push_kernel_args(args,
                     {.c = t[kGradWeight].data,
                      .a = t[kGradOut].data,
                      .b = t[kX].data,
                      .m = d.n,
                      .n = d.k,
                      .k = d.rows,  // the sm_90a path's maps: a and b of every row
                      .lda = d.ld_grad,
                      .ldb = d.ldx,
                      .ldc = d.k,
                      .batch_c = d.n * d.k,  // one gradient matrix per group
                      .offsets = t[kOffsets].data,
                      .total_rows = d.rows,
                      .batches = d.groups,
                      .mn_major_a = true,
                      .mn_major_b = true,
                      .group_k = true},
                     p);
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    check_offsets(name(), t[kOffsets], dims(t).rows, stream);
  }

  std::string bucket(TensorList t) const override {
    const Dims d = dims(t);
    return shape_bucket(d.n, d.k, typical_rows(d));
  }
  bool safe(TensorList, ScalarList) const override { return true; }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& g = shapes::required(name(), shapes, "grad_out", example_shapes());
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const auto& off = shapes::required(name(), shapes, "offsets", example_shapes());
    const std::vector<std::int64_t> grad_weight = {off.size() == 1 ? off[0] - 1 : 0, g.size() == 2 ? g[1] : 0,
                                                   x.size() == 2 ? x[1] : 0};
    return {TensorSpec(dtype, shapes::value_or(shapes, "grad_weight", grad_weight)), TensorSpec(dtype, g),
            TensorSpec(dtype, x), TensorSpec(DType::i64, off)};
  }

 private:
  struct Dims {
    std::int64_t rows, groups, n, k, ld_grad, ldx;
  };
  static std::int64_t typical_rows(const Dims& d) {
    return std::max<std::int64_t>(1, d.rows / std::max<std::int64_t>(d.groups, 1));
  }
  Dims dims(TensorList t) const {
    const TensorSpec &gw = t[kGradWeight].spec, &g = t[kGradOut].spec, &x = t[kX].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kTileInputTypes);
    checks::expect_same_dtype(name(), "grad_out", g, "x", x);
    checks::expect_same_dtype(name(), "grad_weight", gw, "x", x);
    if (x.rank() != 2) throw ShapeError(fmt::format("{}: x is {}; expected [rows, K]", name(), x.str()));
    if (g.rank() != 2 || g.dim(0) != x.dim(0))
      throw ShapeError(fmt::format("{}: grad_out is {}; expected [{}, N] (x's rows)", name(), g.str(), x.dim(0)));
    Dims d{};
    d.rows = x.dim(0);
    d.n = g.dim(1);
    d.k = x.dim(1);
    if (gw.rank() != 3 || gw.dim(1) != d.n || gw.dim(2) != d.k || !gw.is_contiguous())
      throw ShapeError(
          fmt::format("{}: grad_weight is {}; expected contiguous [groups, {}, {}]", name(), gw.str(), d.n, d.k));
    d.groups = gw.dim(0);
    expect_offsets(name(), t[kOffsets].spec, d.groups);
    checked_dim(name(), "rows", d.rows);
    checked_dim(name(), "N", d.n);
    checked_dim(name(), "K", d.k);
    checked_dim(name(), "groups", d.groups);
    d.ld_grad = row_stride(name(), "grad_out", g);
    d.ldx = row_stride(name(), "x", x);
    return d;
  }
};

}  // namespace

const OpDef& group_gemm_op() {
  static const GroupGemm op;
  return op;
}

const OpDef& group_gemm_weight_grad_op() {
  static const GroupGemmWeightGrad op;
  return op;
}

}  // namespace mojo
