#include "ops/rows.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "mojo/error.hpp"
#include "mojo/perf_model.hpp"
#include "ops/checks.hpp"

namespace mojo::rows {

std::int64_t cols_of(std::string_view op, std::string_view arg, const TensorSpec& t) {
  if (t.rank() < 1) throw ShapeError(fmt::format("{}: {} must have at least one dimension", op, arg));
  const std::int64_t cols = t.dim(t.rank() - 1);
  if (cols < 1 || cols > kMaxCols)
    throw ShapeError(fmt::format("{}: the last dim of {} is {}; supported: 1 to {}", op, arg, cols, kMaxCols));
  return cols;
}

std::int64_t count(std::string_view op, const TensorSpec& t) {
  const std::int64_t n = t.numel() / t.dim(t.rank() - 1);
  if (n > std::int64_t(INT32_MAX))
    throw ShapeError(fmt::format("{}: {} rows exceed the grid limit of {}", op, n, INT32_MAX));
  return n;
}

std::int64_t stride(std::string_view op, std::string_view arg, const TensorSpec& t) {
  const int r = t.rank();
  bool ok = t.dim(r - 1) == 1 || t.stride(r - 1) == 1;
  for (int i = 0; ok && i + 2 < r; ++i) ok = t.dim(i) == 1 || t.stride(i) == t.stride(i + 1) * t.dim(i + 1);
  if (r >= 2 && t.stride(r - 2) < t.dim(r - 1) && t.numel() / t.dim(r - 1) > 1) ok = false;  // overlapping rows
  if (!ok)
    throw ShapeError(
        fmt::format("{}: {} {} has strides this op cannot take: the last dim needs unit stride and "
                    "the rows an even stride of at least the row length",
                    op, arg, t.str()));
  return r >= 2 ? t.stride(r - 2) : t.dim(0);
}

std::int64_t token_stride(std::string_view op, std::string_view arg, const TensorSpec& t) {
  if (t.rank() != 3)
    throw ShapeError(fmt::format("{}: {} is {}; expected [tokens, heads, head_dim]", op, arg, t.str()));
  if (t.numel() == 0) return t.dim(1) * t.dim(2);  // no token to place (torch gives [17, 4, 0] strides 4, 1, 1)
  const bool ok = (t.dim(2) == 1 || t.stride(2) == 1) && (t.dim(1) == 1 || t.stride(1) == t.dim(2)) &&
                  (t.dim(0) <= 1 || t.stride(0) >= t.dim(1) * t.dim(2));
  if (!ok)
    throw ShapeError(
        fmt::format("{}: {} {} needs each token's heads contiguous ([heads, head_dim] row-major)", op, arg, t.str()));
  return t.dim(0) <= 1 ? t.dim(1) * t.dim(2) : t.stride(0);
}

void check_vector(std::string_view op, std::string_view arg, const TensorSpec& t, const TensorSpec& x,
                  std::int64_t cols) {
  checks::expect_same_dtype(op, arg, t, "x", x);
  if (t.rank() != 1 || t.dim(0) != cols)
    throw ShapeError(fmt::format("{}: {} has shape [{}]; expected [{}] (the last dim of x)", op, arg,
                                 fmt::join(t.shape(), ", "), cols));
  checks::expect_contiguous(op, arg, t);
}

bool check_stats(std::string_view op, TensorList t, std::size_t mean_index, std::int64_t rows, bool optional) {
  const TensorSpec &mean = t[mean_index].spec, &rstd = t[mean_index + 1].spec;
  if (optional && mean.rank() == 0 && rstd.rank() == 0) return false;
  for (std::size_t i : {mean_index, mean_index + 1}) {
    const std::string_view arg = i == mean_index ? "mean" : "rstd";
    const TensorSpec& s = t[i].spec;
    if (s.rank() == 0 && optional) throw ShapeError(fmt::format("{}: give both mean and rstd, or neither", op));
    checks::expect_dtype_in(op, arg, s.dtype(), std::span<const DType>(checks::kFloatTypes, 1));
    if (s.numel() != rows || !s.is_contiguous())
      throw ShapeError(fmt::format("{}: {} is {}; expected a contiguous f32 tensor of {} elements (one per row)", op,
                                   arg, s.str(), rows));
  }
  return true;
}

void expect_pointers(std::string_view op, std::span<const TensorArgInfo> infos, TensorList t, const Params& p) {
  const unsigned bytes = checks::vector_bytes(p);
  for (std::size_t i = 0; i < t.size(); ++i)
    if (infos[i].role != std::string_view("stats")) checks::expect_pointer(op, infos[i].name, t[i], bytes);
}

unsigned alignment(DType dtype, std::initializer_list<Tensor> tensors) {
  const std::int64_t size = std::int64_t(dtype_size(dtype));
  unsigned a = 256;
  for (const Tensor& t : tensors) {
    a = std::min(a, checks::alignment_of(t.data));
    if (t.spec.rank() >= 2)  // every row start must be aligned too
      a = std::min(a, checks::alignment_of(DevicePtr(t.spec.stride(t.spec.rank() - 2) * size)));
  }
  return a;
}

Layout pick(std::int64_t cols, DType dtype, std::initializer_list<Tensor> tensors, std::int64_t max_threads,
            std::int64_t vectors_per_thread) {
  return pick_aligned(cols, dtype, alignment(dtype, tensors), max_threads, vectors_per_thread);
}

Layout pick_aligned(std::int64_t cols, DType dtype, unsigned alignment, std::int64_t max_threads,
                    std::int64_t vectors_per_thread) {
  const std::int64_t size = std::int64_t(dtype_size(dtype));
  Layout l;
  l.vec = checks::widest_vector(cols, size, alignment);

  const std::int64_t vectors = cols / l.vec;
  if (vectors <= 16) {  // narrow rows: a few lanes per row, many rows per 128-thread block
    l.threads = std::int64_t(std::bit_ceil(std::uint64_t(vectors)));
    l.rows_per_block = 128 / l.threads;
  } else {
    l.threads = std::clamp<std::int64_t>((vectors + vectors_per_thread - 1) / vectors_per_thread, 32, max_threads);
    l.threads = (l.threads + 31) / 32 * 32;
    l.rows_per_block = l.threads == 32 ? 4 : 1;
  }
  return l;
}

void add_params(Params& p, std::string_view cols_name, std::int64_t cols, const Layout& l) {
  p.add(cols_name, cols);
  p.add("vec", l.vec);
  p.add("threads", l.threads);
  p.add("rows", l.rows_per_block);
}

Chunking chunk(std::int64_t rows, std::int64_t cols, std::int64_t vec, const Target& target, std::int64_t max_chunks) {
  const std::int64_t slots = 2 * reference_sm_count(target);  // two blocks an SM
  Chunking c;
  if (rows == 0) return c;  // nothing to launch: one block a row of none
  // Of the counts just below and just above two blocks an SM, the one whose last wave (at two blocks an SM, what
  // sample's kernels hold) is fuller, the larger on a tie: 16 rows take 16 chunks (256 blocks, 0.97 of a wave),
  // not 17 (272: 8 blocks in a second wave).
  const auto fill = [&](std::int64_t chunks) { return wave_fill(std::uint64_t(rows * chunks), std::uint64_t(slots)); };
  const std::int64_t most = std::min({(cols + kMinChunk - 1) / kMinChunk, kMaxChunks, max_chunks});
  const std::int64_t above = (slots + rows - 1) / rows, below = std::max<std::int64_t>(slots / rows, 1);
  std::int64_t wanted = fill(below) > fill(above) ? below : above;
  // More rows than a wave holds: the count up to kMaxChunksPastAWave whose waves (of blocks of 1/chunks of a
  // row) take the least time, ceil(rows x chunks / slots) / chunks, the fewest on a tie; and only where that is a
  // tenth less than a block a row, since the merges of a row's chunks cost what this does not count. sm_80's B
  // 256 (216 slots): 4 chunks, 1024 blocks in 5 waves of quarter rows (1.25 a row's time), not 2 of whole rows;
  // B 1000 stays whole (3 chunks would save 7%).
  if (rows > slots) {
    const auto time = [&](std::int64_t chunks) { return double((rows * chunks + slots - 1) / slots) / double(chunks); };
    std::int64_t best = 1;
    for (std::int64_t chunks = 2; chunks <= std::min(kMaxChunksPastAWave, most); ++chunks)
      if (time(chunks) < time(best)) best = chunks;
    if (time(best) <= 0.9 * time(1)) wanted = best;
  }
  c.chunks = std::clamp<std::int64_t>(wanted, 1, std::max<std::int64_t>(most, 1));
  const std::int64_t chunk_vectors = (cols / vec + c.chunks - 1) / c.chunks;
  c.threads = std::clamp<std::int64_t>(std::int64_t(std::bit_ceil(std::uint64_t((chunk_vectors + 7) / 8))), 64, 512);
  return c;
}

bool cooperative(const OpDef& op, ScalarList scalars, std::int64_t rows, std::int64_t cols, std::int64_t vec,
                 const Target& target, Chunking& c, bool worth_it) {
  const double asked = op.scalar(scalars, "cooperative");
  if (asked != -1 && asked != 0 && asked != 1)
    throw InvalidArgumentError(
        fmt::format("{}: cooperative is {}; expected -1 (the heuristic's choice), 0 or 1", op.name(), asked));
  const std::int64_t sms = reference_sm_count(target);
  if (asked == -1) return worth_it && rows * c.chunks <= sms / 2;
  if (asked == 0) return false;
  if (rows > sms)
    throw InvalidArgumentError(fmt::format(
        "{}: cooperative = 1 needs every block resident at once, one a row at the least: {} rows; {} has {} SMs",
        op.name(), rows, target.sm_name(), sms));
  if (rows * c.chunks > sms) c = chunk(rows, cols, vec, target, sms / rows);
  return true;
}

LaunchGeometry geometry(std::int64_t rows, const Params& p) {
  const std::int64_t per_block = p.get("rows");
  LaunchGeometry g;
  g.grid.x = unsigned((rows + per_block - 1) / per_block);
  g.block.x = unsigned(p.get("threads") * per_block);
  return g;
}

}  // namespace mojo::rows
