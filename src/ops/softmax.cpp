// softmax, log_softmax and softmax_backward over the last dim.
// Template: kernel_templates/softmax.cu (params there).
#include <fmt/format.h>

#include "mojo/error.hpp"
#include "mojo/perf_model.hpp"
#include "ops/checks.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "softmax_args.h"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr TensorArgInfo kForwardTensors[] = {
    {"out", "out", "[..., cols], same dtype as x; rows may be strided; may be x (in place)", "x"},
    {"x", "in", "[..., cols]; rows may be strided"},
};
constexpr TensorArgInfo kBackwardTensors[] = {
    {"grad_x", "out", "[..., cols], contiguous; may be grad_out (in place)", "grad_out"},
    {"grad_out", "in", "[..., cols], contiguous"},
    {"out", "in", "[..., cols]: the forward softmax's output, contiguous"},
};

constexpr ScalarArgInfo kScalars[] = {
    {"cooperative", -1,
     "few long rows split over blocks: -1: one cooperative launch where the grid fits on half the target's SMs "
     "(and a thread's share of a chunk in registers), else two launches; 0: two launches; 1: one cooperative "
     "launch, over fewer blocks a row where that is needed to fit the target's SMs"},
};

// Static shared memory the row kernels keep beside the cache (their reductions' scratch: 1152 bytes in the cubins).
constexpr std::int64_t kStaticSharedReserve = 2048;

// Rows as the kernels see them: one block each, or, for fewer rows than the target's GPU has SMs, each split over
// several blocks (the chunked form: a plan of two steps, or one cooperative launch; softmax.cu). A row a block
// reads twice (longer than MOJO_ROW_REGISTER_VECTORS a thread) keeps as many of its first vectors in shared
// memory as one block may hold, for each of the `arrays` tensors it reads: "cache".
void add_row_params(const OpDef& op, ScalarList scalars, Params& p, std::int64_t rows, std::int64_t cols,
                    const rows::Layout& layout, int arrays, DType dtype, const Target& target) {
  rows::Chunking c = rows::chunk(rows, cols, layout.vec, target);
  const auto one_block_a_row = [&] {
    return InvalidArgumentError(
        fmt::format("{}: cooperative = 1 is for few long rows split over blocks; these {} rows take a block each",
                    op.name(), rows));
  };
  if (rows >= reference_sm_count(target) || c.chunks == 1) {
    if (op.scalar(scalars, "cooperative") == 1) throw one_block_a_row();
    rows::add_params(p, "cols", cols, layout);
    const std::int64_t vectors = cols / layout.vec, per_thread = (vectors + layout.threads - 1) / layout.threads;
    const std::int64_t vector_bytes = layout.vec * std::int64_t(dtype_size(dtype)) * arrays;
    const std::int64_t in_registers = MOJO_ROW_REGISTER_VECTORS(layout.threads * layout.rows_per_block, arrays);
    const bool read_twice = layout.rows_per_block == 1 && per_thread > in_registers;
    p.add("cache", read_twice ? std::min(vectors, (max_shared_per_block(target) - kStaticSharedReserve) / vector_bytes)
                              : 0);
    return;
  }
  // The cooperative form keeps a thread's share of its chunk in registers (softmax.cu's ChunkInRegisters).
  const auto per_thread = [&] {
    const std::int64_t chunk_vectors = (cols / layout.vec + c.chunks - 1) / c.chunks;
    return (chunk_vectors + c.threads - 1) / c.threads;
  };
  const bool cooperative = rows::cooperative(op, scalars, rows, cols, layout.vec, target, c,
                                             per_thread() <= MOJO_SOFTMAX_COOPERATIVE_VECTORS);
  if (cooperative && c.chunks == 1) throw one_block_a_row();  // asked for, and fitted to the SMs
  if (cooperative && per_thread() > MOJO_SOFTMAX_COOPERATIVE_VECTORS)
    throw InvalidArgumentError(fmt::format(
        "{}: cooperative = 1 keeps a thread's share of a chunk in registers, at most {} vectors; these rows need {}",
        op.name(), MOJO_SOFTMAX_COOPERATIVE_VECTORS, per_thread()));
  p.add("cols", cols);
  p.add("vec", layout.vec);
  p.add("threads", c.threads);
  p.add("chunks", c.chunks);
  p.add("cooperative", cooperative ? 1 : 0);
}
bool chunked(const Params& p) { return p.get_or("chunks", 1) > 1; }
bool cooperative(const Params& p) { return p.get_or("cooperative", 0) == 1; }
// The entry point of a chunked form's kernels: `op`'s macro, then _chunks (two steps) or _cooperative.
std::string chunked_entry(std::string_view op, const Params& p) {
  return fmt::format("MOJO_KERNEL_{}_{}", op, cooperative(p) ? "cooperative" : "chunks");
}
// The row cache's bytes: `arrays` arrays of "cache" vectors.
unsigned cache_bytes(const Params& p, int arrays) {
  return unsigned(p.get_or("cache", 0) * arrays * p.get("vec") * std::int64_t(dtype_size(p.dtype("dtype"))));
}

LaunchGeometry row_geometry(std::int64_t rows, const Params& p, int arrays) {
  if (!chunked(p)) {
    LaunchGeometry g = rows::geometry(rows, p);
    g.dynamic_smem = cache_bytes(p, arrays);
    return g;
  }
  LaunchGeometry g;
  g.grid.x = unsigned(rows * p.get("chunks"));
  g.block.x = unsigned(p.get("threads"));
  g.cooperative = cooperative(p);
  return g;
}

// What softmax's forward and backward share: rows of one tensor (`rows_of`, `arrays` of them read a row), a
// block each or chunked (`kernel`'s _chunks and _cooperative entry points), `parts` floats a chunk in the
// workspace.
class SoftmaxRows : public OpDef {
 public:
  SoftmaxRows(const OpInfo& info, std::string_view kernel, std::size_t rows_of, int arrays, int parts)
      : OpDef(info), kernel_(kernel), rows_of_(rows_of), arrays_(arrays), parts_(parts) {}

  std::vector<Params> plan(const Params& p) const override {
    return chunked(p) && !cooperative(p) ? two_steps(p) : std::vector<Params>{p};
  }
  std::string entry_macro(const Params& p) const override {
    return chunked(p) ? chunked_entry(kernel_, p) : OpDef::entry_macro(p);
  }
  std::size_t workspace_bytes(const Params& p, TensorList t) const override {
    return chunked(p) ? std::size_t(rows(p, t) * p.get("chunks") * parts_) * sizeof(float) : 0;
  }
  std::size_t sync_words(const Params& p, TensorList t) const override {
    return cooperative(p) ? std::size_t(rows(p, t)) * 2 : 0;
  }
  LaunchGeometry geometry(const Params& p, TensorList t) const override { return row_geometry(rows(p, t), p, arrays_); }
  unsigned max_dynamic_smem(const Params& p) const override { return cache_bytes(p, arrays_); }

 protected:
  std::int64_t rows(const Params& p, TensorList t) const { return t[rows_of_].spec.numel() / p.get("cols"); }
  void add_params(ScalarList scalars, Params& p, std::int64_t rows, std::int64_t cols, const rows::Layout& layout,
                  DType dtype, const Target& target) const {
    add_row_params(*this, scalars, p, rows, cols, layout, arrays_, dtype, target);
  }

 private:
  std::string_view kernel_;
  std::size_t rows_of_;
  int arrays_, parts_;
};

constexpr OpInfo kSoftmax{
    .name = "softmax",
    .summary = "out = exp(x - max) / sum(exp(x - max)) over the last dim",
    .tensors = kForwardTensors,
    .scalars = kScalars,
    .dtypes = kFloatTypes,
    .template_file = "softmax.cu",
    .example_shapes = "x=32x151936",
};
constexpr OpInfo kLogSoftmax{
    .name = "log_softmax",
    .summary = "out = x - max - log(sum(exp(x - max))) over the last dim",
    .tensors = kForwardTensors,
    .scalars = kScalars,
    .dtypes = kFloatTypes,
    .template_file = "softmax.cu",
    .example_shapes = "x=32x151936",
};

class Softmax final : public SoftmaxRows {
  // Its tensors' places in kForwardTensors.
  static constexpr std::size_t kOut = slot(kForwardTensors, "out");
  static constexpr std::size_t kX = slot(kForwardTensors, "x");

 public:
  // A chunk's part: its max and sum.
  explicit Softmax(bool log) : SoftmaxRows(log ? kLogSoftmax : kSoftmax, "softmax", 1, 1, 2), log_(log) {}
  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const TensorSpec &out = t[kOut].spec, &x = t[kX].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kFloatTypes);
    const std::int64_t cols = rows::cols_of(name(), "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    checks::expect_same_shape(name(), "out", out, "x", x);
    rows::stride(name(), "out", out);
    rows::stride(name(), "x", x);
    const std::int64_t rows = rows::count(name(), x);
    Params p;
    p.add_dtype("dtype", x.dtype());
    add_params(scalars, p, rows, cols, rows::pick(cols, x.dtype(), {t[kOut], t[kX]}), x.dtype(), target);
    p.add("log", log_ ? 1 : 0);
    return p;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace& workspace,
                 KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    checks::expect_pointer(name(), "out", t[kOut], bytes);
    checks::expect_pointer(name(), "x", t[kX], bytes);
    args.push_args(mojo_softmax::Args<void>{
        .out = ptr(t[kOut]),
        .x = ptr(t[kX]),
        .rows = rows(p, t),
        .out_stride = rows::stride(name(), "out", t[kOut].spec),
        .x_stride = rows::stride(name(), "x", t[kX].spec),
        .parts = ptr<float>(workspace.scratch),
        .sync = ptr<unsigned>(workspace.sync),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", x)), TensorSpec(dtype, x)};
  }

 private:
  bool log_;
};

constexpr OpInfo kSoftmaxBackward{
    .name = "softmax_backward",
    .summary = "grad_x = out * (grad_out - sum(grad_out * out)) over the last dim, from softmax's output",
    .tensors = kBackwardTensors,
    .scalars = kScalars,
    .dtypes = kFloatTypes,
    .template_file = "softmax.cu",
    .example_shapes = "out=32x151936",
};

class SoftmaxBackward final : public SoftmaxRows {
  // Its tensors' places in kBackwardTensors.
  static constexpr std::size_t kGradX = slot(kBackwardTensors, "grad_x");
  static constexpr std::size_t kGradOut = slot(kBackwardTensors, "grad_out");
  static constexpr std::size_t kOut = slot(kBackwardTensors, "out");

 public:
  // A chunk's part: its sum of grad_out * out.
  SoftmaxBackward() : SoftmaxRows(kSoftmaxBackward, "softmax_backward", 2, 2, 1) {}
  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const TensorSpec& y = t[kOut].spec;
    checks::expect_dtype_in(name(), "out", y.dtype(), kFloatTypes);
    const std::int64_t cols = rows::cols_of(name(), "out", y);
    for (std::size_t i = 0; i < 3; ++i) {
      checks::expect_same_dtype(name(), kBackwardTensors[i].name, t[i].spec, "out", y);
      checks::expect_same_shape(name(), kBackwardTensors[i].name, t[i].spec, "out", y);
      checks::expect_contiguous(name(), kBackwardTensors[i].name, t[i].spec);
    }
    const std::int64_t rows = rows::count(name(), y);
    Params p;
    p.add_dtype("dtype", y.dtype());
    add_params(scalars, p, rows, cols, rows::pick(cols, y.dtype(), {t[kGradX], t[kGradOut], t[kOut]}), y.dtype(),
               target);
    return p;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace& workspace,
                 KernelArgs& args) const override {
    const unsigned bytes = checks::vector_bytes(p);
    for (std::size_t i = 0; i < 3; ++i) checks::expect_pointer(name(), kBackwardTensors[i].name, t[i], bytes);
    args.push_args(mojo_softmax::BackwardArgs<void>{
        .grad_x = ptr(t[kGradX]),
        .grad_out = ptr(t[kGradOut]),
        .out = ptr(t[kOut]),
        .rows = rows(p, t),
        .parts = ptr<float>(workspace.scratch),
        .sync = ptr<unsigned>(workspace.sync),
    });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& y = shapes::required(name(), shapes, "out", example_shapes());
    TensorSpec ys(dtype, y);
    return {ys, ys, ys};
  }
};

}  // namespace

const OpDef& softmax_op() {
  static const Softmax op(false);
  return op;
}
const OpDef& log_softmax_op() {
  static const Softmax op(true);
  return op;
}
const OpDef& softmax_backward_op() {
  static const SoftmaxBackward op;
  return op;
}

}  // namespace mojo
