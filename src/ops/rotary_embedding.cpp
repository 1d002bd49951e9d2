// rotary_embedding: NeoX and GPT-J rotary position embeddings, in place on q and k.
// Template: kernel_templates/rotary_embedding.cu (params there).
#include <fmt/format.h>

#include <algorithm>

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

// The tensors' places in kTensors.
constexpr std::size_t kQ = slot(kTensors, "q");
constexpr std::size_t kK = slot(kTensors, "k");
constexpr std::size_t kPositions = slot(kTensors, "positions");
constexpr std::size_t kCosSinCache = slot(kTensors, "cos_sin_cache");

// How the kernel cuts a token's rotation into work: the widest vectors (up to 16 bytes) every head start, token
// start and pointer allow, the cos/sin loads likewise, and the heads a block takes. A block does about 64 vectors
// (a thread each), so a few tokens still spread over the SMs and a block's warps read whole heads; none of it
// depends on the token count, so one kernel serves every batch.
struct Layout {
  std::int64_t vec = 1, cvec = 1, threads = 64, heads_per_block = 1;
};
Layout layout(TensorList t, std::int64_t head_dim, std::int64_t rot_dim, bool neox) {
  const TensorSpec &q = t[kQ].spec, &cache = t[kCosSinCache].spec;
  const std::int64_t size = std::int64_t(dtype_size(q.dtype())), csize = std::int64_t(dtype_size(cache.dtype()));
  const std::int64_t half = rot_dim / 2;
  unsigned x_align =
      std::min({checks::alignment_of(t[kQ].data), checks::alignment_of(t[kK].data),
                checks::alignment_of(DevicePtr(rows::token_stride("rotary_embedding", "q", q) * size)),
                checks::alignment_of(DevicePtr(rows::token_stride("rotary_embedding", "k", t[kK].spec) * size)),
                checks::alignment_of(DevicePtr(head_dim * size))});
  if (neox) x_align = std::min(x_align, checks::alignment_of(DevicePtr(half * size)));
  Layout l;
  l.vec = checks::widest_vector(neox ? half : rot_dim, size, x_align);
  const std::int64_t pairs = neox ? l.vec : std::max<std::int64_t>(l.vec / 2, 1);
  const unsigned c_align =
      std::min({checks::alignment_of(t[kCosSinCache].data), checks::alignment_of(DevicePtr(rot_dim * csize)),
                checks::alignment_of(DevicePtr(half * csize))});
  l.cvec = checks::widest_vector(pairs, csize, c_align);  // a unit's cos (and sin) run: `pairs` of them
  const std::int64_t chunks = half / pairs;
  l.threads = std::clamp<std::int64_t>((chunks + 31) / 32 * 32, 64, 256);
  l.heads_per_block = std::max<std::int64_t>(l.threads / chunks, 1);
  return l;
}

class RotaryEmbedding final : public OpDef {
 public:
  RotaryEmbedding() : OpDef(kRotaryEmbedding) {}
  Params derive_params(TensorList t, ScalarList scalars, const Target&) const override {
    const TensorSpec &q = t[kQ].spec, &k = t[kK].spec, &pos = t[kPositions].spec, &cache = t[kCosSinCache].spec;
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
    if (heads + kv_heads > 65535)  // a block takes one or more heads of a token: grid.y's limit
      throw ShapeError(fmt::format("{}: {} heads of q and {} of k; supported: 65535 in all", name(), heads, kv_heads));
    const Layout l = layout(t, head_dim, rot_dim, neox != 0);
    Params p;
    p.add_dtype("dtype", q.dtype());
    p.add_dtype("cache", cache.dtype());
    p.add_dtype("pos", pos.dtype());
    p.add("head_dim", head_dim);
    p.add("rot_dim", rot_dim);
    p.add("heads", heads);
    p.add("kv_heads", kv_heads);
    p.add("neox", std::int64_t(neox));
    p.add("vec", l.vec);
    p.add("cvec", l.cvec);
    p.add("threads", l.threads);
    p.add("hpb", l.heads_per_block);
    return p;
  }

  // The cos/sin cache: only the rows the positions reach (one a token).
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    cost::recount(c, cost::bytes(t[kCosSinCache]), cost::rows(t[kCosSinCache], double(t[kPositions].spec.numel())));
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g;
    const std::int64_t heads = p.get("heads") + p.get("kv_heads"), per_block = p.get("hpb");
    g.grid.x = unsigned(t[kQ].spec.dim(0));
    g.grid.y = unsigned((heads + per_block - 1) / per_block);
    g.block.x = unsigned(p.get("threads"));
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    checks::expect_pointer(name(), "q", t[kQ], bytes);
    checks::expect_pointer(name(), "k", t[kK], bytes);
    checks::expect_pointer(name(), "positions", t[kPositions], unsigned(dtype_size(t[kPositions].spec.dtype())));
    checks::expect_pointer(name(), "cos_sin_cache", t[kCosSinCache],
                           unsigned(p.get("cvec") * std::int64_t(dtype_size(t[kCosSinCache].spec.dtype()))));
    args.push_args(mojo_rotary::Args<void, void, void>{
        .q = ptr(t[kQ]),
        .k = ptr(t[kK]),
        .positions = ptr(t[kPositions]),
        .cos_sin = ptr(t[kCosSinCache]),
        .tokens = t[kQ].spec.dim(0),
        .q_stride = rows::token_stride(name(), "q", t[kQ].spec),
        .k_stride = rows::token_stride(name(), "k", t[kK].spec),
        .max_pos = t[kCosSinCache].spec.dim(0),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "positions", t[kPositions], t[kCosSinCache].spec.dim(0), false, stream);
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
