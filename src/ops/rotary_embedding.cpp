// rotary_embedding: NeoX and GPT-J rotary position embeddings, in place on q and k.
// Template: kernel_templates/rotary_embedding.cu (params there).
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "rotary_embedding_args.h"
#include "ops/cost.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr TensorArgInfo kTensors[] = {
    {"q", "inout", "[tokens, heads, head_dim]; tokens may be strided (a view of qkv)"},
    {"k", "inout", "[tokens, kv_heads, head_dim], same dtype as q; tokens may be strided"},
    {"positions", "in", "i32 or i64 [tokens]"},
    {"cos_sin_cache", "in", "[max_pos, rot_dim], f32 or q's dtype: cos in the first half, sin in the second"},
};
constexpr ScalarArgInfo kScalars[] = {{"neox", 1, "1: rotate halves (NeoX); 0: interleaved pairs (GPT-J)"}};

constexpr OpInfo kRotaryEmbedding{
    .name = "rotary_embedding",
    .summary = "rotates q and k in place by each token's position (NeoX or GPT-J style, partial rotary dim)",
    .tensors = kTensors,
    .scalars = kScalars,
    .dtypes = kFloatTypes,
    .template_file = "rotary_embedding.cu",
    .example_shapes = "q=32x32x128 k=32x8x128 cos_sin_cache=40960x128",
};

class RotaryEmbedding final : public OpDef {
 public:
  RotaryEmbedding() : OpDef(kRotaryEmbedding) {}
  Params derive_params(TensorList t, ScalarList scalars, const Target&) const override {
    const TensorSpec &q = t[0].spec, &k = t[1].spec, &pos = t[2].spec, &cache = t[3].spec;
    checks::expect_dtype_in(name(), "q", q.dtype(), kFloatTypes);
    checks::expect_same_dtype(name(), "k", k, "q", q);
    rows::token_stride(name(), "q", q);
    rows::token_stride(name(), "k", k);
    const std::int64_t tokens = q.dim(0), head_dim = q.dim(2);
    if (k.dim(0) != tokens || k.dim(2) != head_dim)
      throw ShapeError(
          fmt::format("{}: k is {} but q is {}; they need the same tokens and head_dim", name(), k.str(), q.str()));
    if (tokens > std::int64_t(INT32_MAX))
      throw ShapeError(fmt::format("{}: {} tokens exceed the grid limit", name(), tokens));
    indices::expect(name(), "positions", pos, tokens);
    if (cache.dtype() != DType::f32) checks::expect_same_dtype(name(), "cos_sin_cache", cache, "q", q);
    checks::expect_contiguous(name(), "cos_sin_cache", cache);
    const std::int64_t rot_dim = cache.rank() == 2 ? cache.dim(1) : 0;
    if (cache.rank() != 2 || rot_dim < 2 || rot_dim % 2 != 0 || rot_dim > head_dim)
      throw ShapeError(
          fmt::format("{}: cos_sin_cache is {}; expected [max_pos, rot_dim] with rot_dim even and at "
                      "most head_dim ({})",
                      name(), cache.str(), head_dim));
    const double neox = scalar(scalars, "neox");
    if (neox != 0 && neox != 1)
      throw InvalidArgumentError(fmt::format("{}: neox is {}; expected 1 (NeoX) or 0 (GPT-J)", name(), neox));
    const std::int64_t heads = q.dim(1), kv_heads = k.dim(1);
    const std::int64_t pairs = (heads + kv_heads) * rot_dim / 2;
    Params p;
    p.add_dtype("dtype", q.dtype());
    p.add_dtype("cache", cache.dtype());
    p.add_dtype("pos", pos.dtype());
    p.add("head_dim", head_dim);
    p.add("rot_dim", rot_dim);
    p.add("heads", heads);
    p.add("kv_heads", kv_heads);
    p.add("neox", std::int64_t(neox));
    p.add("threads", std::clamp<std::int64_t>(
                         std::int64_t(std::bit_ceil(std::uint64_t(std::max<std::int64_t>(pairs, 1)))), 32, 512));
    return p;
  }

  // The cos/sin cache: only the rows the positions reach (one a token).
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    cost::recount(c, cost::bytes(t[3]), cost::rows(t[3], double(t[2].spec.numel())));
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g;
    g.grid.x = unsigned(t[0].spec.dim(0));
    g.block.x = unsigned(p.get("threads"));
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, DevicePtr, KernelArgs& args) const override {
    const unsigned size = unsigned(dtype_size(p.dtype("dtype")));
    checks::expect_pointer(name(), "q", t[0].data, size);
    checks::expect_pointer(name(), "k", t[1].data, size);
    checks::expect_pointer(name(), "positions", t[2].data, unsigned(dtype_size(t[2].spec.dtype())));
    checks::expect_pointer(name(), "cos_sin_cache", t[3].data, unsigned(dtype_size(t[3].spec.dtype())));
    args.push_args(mojo_rotary::Args<void, void, void>{
        .q = ptr(t[0]),
        .k = ptr(t[1]),
        .positions = ptr(t[2]),
        .cos_sin = ptr(t[3]),
        .tokens = t[0].spec.dim(0),
        .q_stride = rows::token_stride(name(), "q", t[0].spec),
        .k_stride = rows::token_stride(name(), "k", t[1].spec),
        .max_pos = t[3].spec.dim(0),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "positions", t[2], t[3].spec.dim(0), false, stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& q = shapes::required(name(), shapes, "q", example_shapes());
    const auto& k = shapes::required(name(), shapes, "k", example_shapes());
    const auto& cache = shapes::required(name(), shapes, "cos_sin_cache", example_shapes());
    return {TensorSpec(dtype, q), TensorSpec(dtype, k),
            TensorSpec(DType::i64, shapes::value_or(shapes, "positions", {q.front()})), TensorSpec(DType::f32, cache)};
  }
};

}  // namespace

const OpDef& rotary_embedding_op() {
  static const RotaryEmbedding op;
  return op;
}

}  // namespace mojo
