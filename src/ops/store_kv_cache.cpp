// store_kv_cache: a scatter of new tokens' k and v into a paged KV cache by slot
// (kernel_templates/store_kv_cache.cu, params there).
#include <fmt/format.h>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "store_kv_cache_args.h"
#include "ops/cost.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;

constexpr TensorArgInfo kKvTensors[] = {
    {"k_cache", "inout", "[num_blocks, block_size, kv_heads, head_dim], contiguous"},
    {"v_cache", "inout", "same shape and dtype as k_cache"},
    {"k", "in", "[tokens, kv_heads, head_dim]; tokens may be strided (a view of qkv)"},
    {"v", "in", "[tokens, kv_heads, head_dim]; tokens may be strided"},
    {"slot_mapping", "in", "i32 or i64 [tokens]: block * block_size + offset; < 0 skips the token"},
};

constexpr OpInfo kStoreKvCache{
    .name = "store_kv_cache",
    .summary = "writes k and v of new tokens into a paged KV cache at slot_mapping; slots < 0 are skipped",
    .tensors = kKvTensors,
    .dtypes = kFloatTypes,
    .template_file = "store_kv_cache.cu",
    .example_shapes = "k_cache=2048x16x8x128 k=32x8x128",
};

class StoreKvCache final : public OpDef {
  // Its tensors' places in kKvTensors.
  static constexpr std::size_t kKCache = slot(kKvTensors, "k_cache");
  static constexpr std::size_t kVCache = slot(kKvTensors, "v_cache");
  static constexpr std::size_t kK = slot(kKvTensors, "k");
  static constexpr std::size_t kV = slot(kKvTensors, "v");
  static constexpr std::size_t kSlotMapping = slot(kKvTensors, "slot_mapping");

 public:
  StoreKvCache() : OpDef(kStoreKvCache) {}
  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec &kc = t[kKCache].spec, &vc = t[kVCache].spec, &k = t[kK].spec, &v = t[kV].spec;
    checks::expect_dtype_in(name(), "k_cache", kc.dtype(), kFloatTypes);
    if (kc.rank() != 4)
      throw ShapeError(
          fmt::format("store_kv_cache: k_cache is {}; expected [num_blocks, block_size, kv_heads, "
                      "head_dim]",
                      kc.str()));
    checks::expect_same_dtype(name(), "v_cache", vc, "k_cache", kc);
    checks::expect_same_shape(name(), "v_cache", vc, "k_cache", kc);
    checks::expect_contiguous(name(), "k_cache", kc);
    checks::expect_contiguous(name(), "v_cache", vc);
    const std::int64_t row = kc.dim(2) * kc.dim(3);
    for (std::size_t i : {2, 3}) {
      const TensorSpec& s = t[i].spec;
      checks::expect_same_dtype(name(), kKvTensors[i].name, s, "k_cache", kc);
      if (s.rank() != 3 || s.dim(1) != kc.dim(2) || s.dim(2) != kc.dim(3))
        throw ShapeError(fmt::format("store_kv_cache: {} is {}; expected [tokens, {}, {}] to match the cache",
                                     kKvTensors[i].name, s.str(), kc.dim(2), kc.dim(3)));
      rows::token_stride(name(), kKvTensors[i].name, s);
    }
    if (v.dim(0) != k.dim(0))
      throw ShapeError(fmt::format("store_kv_cache: k has {} tokens but v has {}", k.dim(0), v.dim(0)));
    if (k.dim(0) > std::int64_t(INT32_MAX)) throw ShapeError("store_kv_cache: more tokens than the grid can take");
    indices::expect(name(), "slot_mapping", t[kSlotMapping].spec, k.dim(0));
    if (row < 1 || row > rows::kMaxCols)
      throw ShapeError(
          fmt::format("store_kv_cache: kv_heads * head_dim = {}; supported: 1 to {}", row, rows::kMaxCols));
    Params p;
    p.add_dtype("dtype", kc.dtype());
    p.add_dtype("slots", t[kSlotMapping].spec.dtype());
    rows::add_params(p, "row", row,
                     rows::pick(row, kc.dtype(), {t[kKCache], t[kVCache], as_rows(t[kK]), as_rows(t[kV])}));
    return p;
  }

  // The caches ([blocks, page, kv_heads, D]): only the slots written, one a token, never read.
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    const double slots = double(t[kSlotMapping].spec.numel());
    for (int i : {0, 1}) {
      const double page = t[i].spec.rank() < 2 ? 1 : double(std::max<std::int64_t>(t[i].spec.dim(1), 1));
      cost::recount(c, 2 * cost::bytes(t[i]), cost::rows(t[i], slots / page));
    }
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override { return rows::geometry(t[kK].spec.dim(0), p); }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    for (std::size_t i = 0; i < 4; ++i) checks::expect_pointer(name(), kKvTensors[i].name, t[i], bytes);
    checks::expect_pointer(name(), "slot_mapping", t[kSlotMapping], unsigned(dtype_size(t[kSlotMapping].spec.dtype())));
    args.push_args(mojo_kv_cache::Args<void, void>{
        .k_cache = ptr(t[kKCache]),
        .v_cache = ptr(t[kVCache]),
        .k = ptr(t[kK]),
        .v = ptr(t[kV]),
        .slots = ptr(t[kSlotMapping]),
        .tokens = t[kK].spec.dim(0),
        .num_slots = t[kKCache].spec.dim(0) * t[kKCache].spec.dim(1),
        .k_stride = rows::token_stride(name(), "k", t[kK].spec),
        .v_stride = rows::token_stride(name(), "v", t[kV].spec),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "slot_mapping", t[kSlotMapping], t[kKCache].spec.dim(0) * t[kKCache].spec.dim(1), true,
                         stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& kc = shapes::required(name(), shapes, "k_cache", example_shapes());
    const auto& k = shapes::required(name(), shapes, "k", example_shapes());
    return {TensorSpec(dtype, kc), TensorSpec(dtype, shapes::value_or(shapes, "v_cache", kc)), TensorSpec(dtype, k),
            TensorSpec(dtype, shapes::value_or(shapes, "v", k)),
            TensorSpec(DType::i64, shapes::value_or(shapes, "slot_mapping", {k.front()}))};
  }

 private:
  // k and v seen as [tokens, kv_heads * head_dim] rows (checked: their heads are contiguous).
  Tensor as_rows(const Tensor& t) const {
    const std::int64_t shape[] = {t.spec.dim(0), t.spec.dim(1) * t.spec.dim(2)};
    const std::int64_t strides[] = {rows::token_stride(name(), "k", t.spec), 1};
    return {TensorSpec(t.spec.dtype(), shape, strides), t.data};
  }
};

}  // namespace

const OpDef& store_kv_cache_op() {
  static const StoreKvCache op;
  return op;
}

}  // namespace mojo
