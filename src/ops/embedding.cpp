// embedding: a gather of weight rows by token id (kernel_templates/embedding.cu, params there).
#include <fmt/format.h>

#include "embedding_args.h"
#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "ops/cost.hpp"

namespace mojo {
namespace {

using checks::kFloatTypes;

constexpr TensorArgInfo kEmbeddingTensors[] = {
    {"out", "out", "[..., hidden] with one row per id, same dtype as weight, contiguous"},
    {"ids", "in", "i32 or i64 token ids, any shape, contiguous"},
    {"weight", "in", "[vocab, hidden], contiguous"},
};

constexpr OpInfo kEmbedding{
    .name = "embedding",
    .summary = "out[t, :] = weight[ids[t], :]; an id out of range gives zeros (an error with debug checks)",
    .tensors = kEmbeddingTensors,
    .dtypes = kFloatTypes,
    .template_file = "embedding.cu",
    .example_shapes = "ids=32 weight=151936x4096",
};

class Embedding final : public OpDef {
  // Its tensors' places in kEmbeddingTensors.
  static constexpr std::size_t kOut = slot(kEmbeddingTensors, "out");
  static constexpr std::size_t kIds = slot(kEmbeddingTensors, "ids");
  static constexpr std::size_t kWeight = slot(kEmbeddingTensors, "weight");

 public:
  Embedding() : OpDef(kEmbedding) {}
  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec &out = t[kOut].spec, &ids = t[kIds].spec, &w = t[kWeight].spec;
    checks::expect_dtype_in(name(), "weight", w.dtype(), kFloatTypes);
    if (w.rank() != 2) throw ShapeError(fmt::format("embedding: weight is {}; expected [vocab, hidden]", w.str()));
    checks::expect_contiguous(name(), "weight", w);
    const std::int64_t hidden = rows::cols_of(name(), "weight", w);
    indices::expect(name(), "ids", ids, ids.numel());
    checks::expect_same_dtype(name(), "out", out, "weight", w);
    checks::expect_contiguous(name(), "out", out);
    if (out.rank() < 1 || out.dim(out.rank() - 1) != hidden || out.numel() != ids.numel() * hidden)
      throw ShapeError(
          fmt::format("embedding: out is {}; expected {} rows of {} (one per id)", out.str(), ids.numel(), hidden));
    if (ids.numel() > std::int64_t(INT32_MAX)) throw ShapeError("embedding: more ids than the grid can take");
    Params p;
    p.add_dtype("dtype", w.dtype());
    p.add_dtype("ids", ids.dtype());
    rows::add_params(p, "hidden", hidden, rows::pick(hidden, w.dtype(), {t[kOut], t[kWeight]}));
    return p;
  }

  // The weight: only the rows the ids reach (as many as there are ids).
  IdealCost ideal_cost(TensorList t, ScalarList s) const override {
    IdealCost c = OpDef::ideal_cost(t, s);
    cost::recount(c, cost::bytes(t[kWeight]), cost::rows(t[kWeight], double(t[kIds].spec.numel())));
    return c;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return rows::geometry(t[kIds].spec.numel(), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    checks::expect_pointer(name(), "out", t[kOut], bytes);
    checks::expect_pointer(name(), "ids", t[kIds], unsigned(dtype_size(t[kIds].spec.dtype())));
    checks::expect_pointer(name(), "weight", t[kWeight], bytes);
    args.push_args(mojo_embedding::Args<void, void>{
        .out = ptr(t[kOut]),
        .ids = ptr(t[kIds]),
        .weight = ptr(t[kWeight]),
        .tokens = t[kIds].spec.numel(),
        .vocab = t[kWeight].spec.dim(0),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "ids", t[kIds], t[kWeight].spec.dim(0), false, stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& ids = shapes::required(name(), shapes, "ids", example_shapes());
    const auto& w = shapes::required(name(), shapes, "weight", example_shapes());
    std::vector<std::int64_t> out = ids;
    out.push_back(w.back());
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", out)), TensorSpec(DType::i64, ids), TensorSpec(dtype, w)};
  }
};

}  // namespace

const OpDef& embedding_op() {
  static const Embedding op;
  return op;
}

}  // namespace mojo
