// gemm ([M, K] x [K, N]) and gemm_batched (a batch of those, strided); the tiles: gemm_tile.hpp.
#include <fmt/format.h>

#include <algorithm>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/gemm_tile.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/cost.hpp"

namespace mojo {
namespace {

constexpr TensorArgInfo kGemmTensors[] = {
    {"c", "inout", "[M, N], a's dtype or f32; read when beta != 0; rows may be strided"},
    {"a", "in", "[M, K], or [K, M] with trans_a; f16/bf16 (tensor cores) or f32 (exact); rows may be strided"},
    {"b", "in", "[K, N], or [N, K] with trans_b; same dtype as a"},
};
constexpr TensorArgInfo kBatchedTensors[] = {
    {"c", "inout", "[batch, M, N], a's dtype or f32; read when beta != 0"},
    {"a", "in", "[batch, M, K], or [batch, K, M] with trans_a; f16, bf16 or f32"},
    {"b", "in", "[batch, K, N], or [batch, N, K] with trans_b; same dtype as a"},
};
constexpr ScalarArgInfo kGemmScalars[] = {{"alpha", 1, "scales a * b"},
                                          {"beta", 0, "scales the old c (0: c is only written)"},
                                          {"trans_a", 0, "1: a is stored [K, M]"},
                                          {"trans_b", 0, "1: b is stored [N, K] (the LLM weight layout)"},
                                          {"tf32", 0, "1: f32 inputs on tensor cores as tf32 (10-bit mantissa)"},
                                          {"path", 0, kPathDoc},
                                          {"splits", 0, kSplitsDoc}};

// gemm ([M, K] x [K, N]) and gemm_batched (a batch of those, strided).
constexpr OpInfo kGemm{
    .name = "gemm",
    .summary = "c = alpha * op(a) * op(b) + beta * c, op = N or T, on tensor cores (fp32 accumulation)",
    .tensors = kGemmTensors,
    .scalars = kGemmScalars,
    .dtypes = kTileInputTypes,
    .template_file = "gemm.cu",
    .example_shapes = "a=4096x4096 b=4096x4096",
};
constexpr OpInfo kGemmBatched{
    .name = "gemm_batched",
    .summary = "c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for each batch i, on tensor cores",
    .tensors = kBatchedTensors,
    .scalars = kGemmScalars,
    .dtypes = kTileInputTypes,
    .template_file = "gemm.cu",
    .example_shapes = "a=8x512x128 b=8x128x512",
};

class Gemm final : public TileOp {
  // Its tensors' places in kGemmTensors (kBatchedTensors has them in the same places).
  static constexpr std::size_t kC = slot(kGemmTensors, "c");
  static constexpr std::size_t kA = slot(kGemmTensors, "a");
  static constexpr std::size_t kB = slot(kGemmTensors, "b");
  static_assert(slot(kBatchedTensors, "c") == kC && slot(kBatchedTensors, "a") == kA &&
                slot(kBatchedTensors, "b") == kB);

 public:
  explicit Gemm(bool batched) : TileOp(batched ? kGemmBatched : kGemm), batched_(batched) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const Dims d = dims(t, zero_or_one(*this, scalars, "trans_a"), zero_or_one(*this, scalars, "trans_b"));
    const TensorSpec &c = t[kC].spec, &a = t[kA].spec;
    checks::expect_dtype_in(name(), "a", a.dtype(), kTileInputTypes);
    const bool tf32 = tf32_of(*this, scalars, a.dtype());
    expect_tensor_cores(name(), a.dtype(), tf32, target);
    checks::expect_same_dtype(name(), "b", t[kB].spec, "a", a);
    if (c.dtype() != a.dtype() && c.dtype() != DType::f32)
      throw DTypeError(fmt::format("{}: c has dtype {}; expected {} (as a) or f32", name(), dtype_name(c.dtype()),
                                   dtype_name(a.dtype())));
    Params p;
    p.add_dtype("dtype", a.dtype());
    p.add_dtype("out", c.dtype());
    const bool aligned = chunk_aligned(a.dtype(), t[kA].data, {d.lda, d.batch_a}) &&
                         chunk_aligned(a.dtype(), t[kB].data, {d.ldb, d.batch_b});
    // TMA walks batches by their stride: each batch's operand must lie apart from the others.
    const bool batches_apart =
        d.batch == 1 || (d.batch_a >= (d.trans_a ? d.k : d.m) * d.lda && d.batch_b >= (d.trans_b ? d.n : d.k) * d.ldb);
    const bool wgmma_ok = wgmma_possible(target, a.dtype(), aligned && batches_apart, d.m, d.n, d.k);
    // A requested split counts as batches for the tile: the tile fills the SMs with tiles x splits units.
    const std::int64_t splits = requested_splits(*this, scalars);
    const TileConfig tile =
        split_k(pick_tile(d.m, d.n, d.k, a.dtype(), tf32, target, wgmma_ok, d.batch * std::max<std::int64_t>(splits, 1),
                          path_of(*this, scalars, wgmma_ok, target),
                          d.trans_b ? Sm90Tiles::any_width : Sm90Tiles::widths_of_64),
                d.m, d.n, d.k, d.batch, target, splits);
    add_tile(p, tile);
    p.add("ta", d.trans_a);
    p.add("tb", d.trans_b);
    p.add("vec", vec_param(tile, aligned));
    p.add("beta", scalar(scalars, "beta") != 0 ? 1 : 0);
    p.add("tf32", tf32);
    p.add("wgmma", tile.wgmma);
    return p;
  }

  // c = alpha a b + beta c: 2 M N K FLOPs a batch; c is only written when beta is 0.
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    const Dims d = dims(t, zero_or_one(*this, s, "trans_a"), zero_or_one(*this, s, "trans_b"));
    c.flops = 2.0 * double(d.m) * double(d.n) * double(d.k) * double(d.batch);
    c.weight_bytes = cost::bytes(t[kB]);
    if (scalar(s, "beta") == 0) cost::recount(c, 2 * cost::bytes(t[kC]), cost::bytes(t[kC]));
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Dims d = dims(t, p.get("ta"), p.get("tb"));
    return tile_geometry(p, d.m, d.n, d.batch);
  }
  std::size_t workspace_bytes(const Params& p, TensorList t) const override {
    const Dims d = dims(t, p.get("ta"), p.get("tb"));
    return split_workspace_bytes(p, d.m, d.n, d.batch);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace& workspace,
                 KernelArgs& args) const override {
    const Dims d = dims(t, p.get("ta"), p.get("tb"));
    const unsigned chunk = operand_alignment(p);
    checks::expect_pointer(name(), "c", t[kC], unsigned(dtype_size(t[kC].spec.dtype())));
    checks::expect_pointer(name(), "a", t[kA], chunk);
    checks::expect_pointer(name(), "b", t[kB], chunk);
    push_kernel_args(args,
                     {.c = t[kC].data,
                      .a = t[kA].data,
                      .b = t[kB].data,
                      .alpha = float(scalar(scalars, "alpha")),
                      .beta = float(scalar(scalars, "beta")),
                      .m = d.m,
                      .n = d.n,
                      .k = d.k,
                      .lda = d.lda,
                      .ldb = d.ldb,
                      .ldc = d.ldc,
                      .batch_a = d.batch_a,
                      .batch_b = d.batch_b,
                      .batch_c = d.batch_c,
                      .batches = d.batch,
                      .partials = workspace.scratch,
                      .mn_major_a = d.trans_a == 1,
                      .mn_major_b = d.trans_b == 0},
                     p);
  }

  std::string bucket(TensorList t) const override {
    const TensorSpec &c = t[kC].spec, &a = t[kA].spec;
    const int r = c.rank() - 2;
    const std::int64_t m = c.dim(r), k = m > 0 ? a.dim(r) * a.dim(r + 1) / m : 0;
    return shape_bucket(m, c.dim(r + 1), k);
  }
  bool safe(TensorList, ScalarList scalars) const override { return scalar(scalars, "beta") == 0; }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& a = shapes::required(name(), shapes, "a", example_shapes());
    const auto& b = shapes::required(name(), shapes, "b", example_shapes());
    std::vector<std::int64_t> c = a;  // [.., M, N] for the untransposed layouts
    if (!c.empty() && !b.empty()) c.back() = b.back();
    return {TensorSpec(dtype, shapes::value_or(shapes, "c", c)), TensorSpec(dtype, a), TensorSpec(dtype, b)};
  }
  // c = [.., M, N] from a and b as stored: [.., K, M] with trans_a, [.., N, K] with trans_b.
  void complete_shapes(ShapeMap& shapes, ScalarList scalars) const override {
    const auto a = shapes.find("a"), b = shapes.find("b");
    if (shapes.contains("c") || a == shapes.end() || b == shapes.end() || a->second.size() < 2 || b->second.size() < 2)
      return;
    std::vector<std::int64_t> c = a->second;
    if (scalar(scalars, "trans_a") != 0) c[c.size() - 2] = a->second.back();
    c.back() = scalar(scalars, "trans_b") != 0 ? b->second[b->second.size() - 2] : b->second.back();
    shapes.emplace("c", std::move(c));
  }

 private:
  struct Dims {
    std::int64_t m, n, k, batch, lda, ldb, ldc, batch_a, batch_b, batch_c;
    std::int64_t trans_a, trans_b;
  };
  // Shapes, strides and transposes, validated against each other.
  Dims dims(TensorList t, std::int64_t trans_a, std::int64_t trans_b) const {
    const int rank = batched_ ? 3 : 2;
    const char* names[] = {"c", "a", "b"};
    for (int i = 0; i < 3; ++i)
      if (t[i].spec.rank() != rank)
        throw ShapeError(fmt::format("{}: {} is {}; expected rank {} ({})", name(), names[i], t[i].spec.str(), rank,
                                     tensor_args()[i].doc));
    const TensorSpec &c = t[kC].spec, &a = t[kA].spec, &b = t[kB].spec;
    const int r = rank - 2;  // index of the row dim
    Dims d{};
    d.trans_a = trans_a;
    d.trans_b = trans_b;
    d.m = a.dim(r + (d.trans_a ? 1 : 0));
    d.k = a.dim(r + (d.trans_a ? 0 : 1));
    const std::int64_t kb = b.dim(r + (d.trans_b ? 1 : 0));
    d.n = b.dim(r + (d.trans_b ? 0 : 1));
    if (kb != d.k)
      throw ShapeError(fmt::format("{}: a is {} and b is {}{}: their K ({} and {}) differ", name(), a.str(), b.str(),
                                   d.trans_a || d.trans_b ? " (with the transposes given)" : "", d.k, kb));
    if (c.dim(r) != d.m || c.dim(r + 1) != d.n)
      throw ShapeError(fmt::format("{}: c is {}; expected [{}{}, {}]", name(), c.str(),
                                   batched_ ? fmt::format("{}, ", a.dim(0)) : "", d.m, d.n));
    d.batch = batched_ ? a.dim(0) : 1;
    if (batched_ && (b.dim(0) != d.batch || c.dim(0) != d.batch))
      throw ShapeError(fmt::format("{}: batch sizes differ: c {}, a {}, b {}", name(), c.str(), a.str(), b.str()));
    checked_dim(name(), "M", d.m);
    checked_dim(name(), "N", d.n);
    checked_dim(name(), "K", d.k);
    checked_dim(name(), "batch", d.batch);
    d.lda = row_stride(name(), "a", a);
    d.ldb = row_stride(name(), "b", b);
    d.ldc = row_stride(name(), "c", c);
    if (batched_) {
      d.batch_a = a.stride(0);
      d.batch_b = b.stride(0);
      d.batch_c = c.stride(0);
    }
    return d;
  }
  bool batched_;
};

}  // namespace

const OpDef& gemm_op() {
  static const Gemm op(false);
  return op;
}
const OpDef& gemm_batched_op() {
  static const Gemm op(true);
  return op;
}

}  // namespace mojo
