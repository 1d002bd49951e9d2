// The tile ops' shared part (gemm_tile.hpp).
#include "ops/gemm_tile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <tuple>
#include <utility>

#include "gemm_args.h"
#include "mojo/error.hpp"
#include "mojo/perf_model.hpp"
#include "ops/checks.hpp"

namespace mojo {
namespace {

// The sm_90a tiles: 128 rows (two consumer warpgroups) by 256 or 128 columns.
constexpr TileConfig kWgmmaWide{.bm = 128, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .wgmma = true};
constexpr TileConfig kWgmmaNarrow{.bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .wgmma = true};

// The tile's params, each a TileConfig member: add_tile, with_tile and tile_of convert through this one list
// (wgmma, element_bytes and tensor_cores come from params of the op's own).
constexpr std::pair<std::string_view, int TileConfig::*> kTileParams[] = {
    {"bm", &TileConfig::bm}, {"bn", &TileConfig::bn},           {"bk", &TileConfig::bk},
    {"wm", &TileConfig::wm}, {"wn", &TileConfig::wn},           {"stages", &TileConfig::stages},
    {"ks", &TileConfig::ks}, {"swizzle", &TileConfig::swizzle}, {"splits", &TileConfig::splits}};

// The deepest ring pick_wgmma_tile starts from; `fit` then takes the deepest that fits shared memory. DeepGEMM's
// sm90 heuristic does the same ("always pick the largest number of stages", from 32 down): a narrow tile streams
// weights through few bytes a stage, and only a deep ring keeps enough of them in flight. The H200 run of
// 2026-11-27 read Qwen3-8B's o_proj and down weights at 3.5 TB/s (a straight line through their times at M 64)
// with 64 x 32 tiles 8 stages deep: 32 KB of B in flight an SM, where the 4.27 TB/s copy needs ~39 KB at the
// ~1.2 us that implies; 16 of those stages fit.
constexpr int kMaxWgmmaStages = 32;

// Kept from the opt-in for the kernels' static shared memory, which a launch adds to the dynamic: 1 KB in the
// tile kernels' cubins (GemmCompiles checks the sum on each path's cubins).
constexpr unsigned kStaticSmemReserve = 1024;

// A tensor-core tile for `element_bytes` inputs on `target`: tf32 steps K by
// 16 (4-byte fragments need the registers), and the pipeline is as deep as
// the target's shared memory allows.
TileConfig fit(TileConfig c, int element_bytes, const Target& target) {
  c.element_bytes = element_bytes;
  if (element_bytes == 4 && !c.wgmma) c.bk = 16;
  while (c.stages > 2 && c.smem_bytes() + kStaticSmemReserve > max_shared_per_block(target)) --c.stages;
  return c;
}

// `p` with each value replaced by `replace(name, value)`.
template <class F>
Params rewritten(const Params& p, F replace) {
  Params out;
  for (const Param& x : p.items()) {
    const std::int64_t v = replace(std::string_view(x.name), x.value);
    if (x.is_dtype)
      out.add_dtype(x.name, DType(v));
    else
      out.add(x.name, v);
  }
  return out;
}

// `p` with its tile params replaced by `c`'s.
Params with_tile(const Params& p, const TileConfig& c) {
  return rewritten(p, [&](std::string_view name, std::int64_t v) -> std::int64_t {
    if (name == "wgmma") return c.wgmma;
    for (const auto& [param, member] : kTileParams)
      if (name == param) return c.*member;
    return v;
  });
}

}  // namespace

TileConfig pick_wgmma_tile(std::int64_t m, std::int64_t n, std::int64_t batch, Sm90Tiles widths, const Target& target) {
  const std::int64_t sms = reference_sm_count(target);
  // DeepGEMM's order: fewer waves of tiles; a fuller last wave; a larger tile (fewer tiles read the same rows
  // of A and B); a squarer one (of equal area, it loads the fewest bytes a k step: bm + bn rows).
  auto rank = [&](const TileConfig& c) {
    const std::int64_t tiles = c.tiles(m, n, batch);
    return std::tuple{-(tiles + sms - 1) / sms, wave_fill(std::uint64_t(tiles), std::uint64_t(sms)), c.bm * c.bn,
                      -(c.bm + c.bn)};
  };
  TileConfig best{};
  for (int bm : {64, 128}) {
    if (bm == 128 && m <= 64) continue;  // all padding
    for (int bn = 256; bn >= 16; bn -= widths == Sm90Tiles::widths_of_64 ? 64 : 16) {
      const TileConfig c{
          .bm = bm, .bn = bn, .bk = 64, .wm = bm / 64, .wn = 1, .stages = kMaxWgmmaStages, .wgmma = true};
      if (best.bm == 0 || rank(c) > rank(best)) best = c;
    }
  }
  return fit(best, 2, target);
}

TileConfig pick_tile(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, bool tf32, const Target& target,
                     bool wgmma_ok, std::int64_t batch, Path path, Sm90Tiles sm90_tiles) {
  if (dtype == DType::f32 && !tf32) return {64, 64, 16, 2, 4, 1, 4, false};  // 256 threads of 4 x 4 outputs
  const std::int64_t sms = reference_sm_count(target);
  auto tiles = [&](const TileConfig& c) { return c.tiles(m, n, batch); };
  if (sm90_tiles != Sm90Tiles::fixed && (path == Path::sm90 || (wgmma_ok && path == Path::any))) {
    const TileConfig c = pick_wgmma_tile(m, n, batch, sm90_tiles, target);
    if (path == Path::sm90 || m > kSm80PathMaxRows || c.bn >= kDecodeWgmmaMinCols) return c;
  }
  if (path == Path::sm90) return fit(n > 128 ? kWgmmaWide : kWgmmaNarrow, 2, target);
  if (wgmma_ok && m > 64 && path == Path::any) {
    if (tiles(kWgmmaWide) >= sms) return fit(kWgmmaWide, 2, target);
    if (tiles(kWgmmaNarrow) >= sms / 2) return fit(kWgmmaNarrow, 2, target);
  }
  TileConfig c = m <= 16   ? TileConfig{16, 64, 64, 1, 2, 4}     // decode: 64 threads, many blocks along N
                 : m <= 64 ? TileConfig{64, 64, 32, 2, 2, 4}     // 128 threads, 32x32 per warp
                           : TileConfig{128, 128, 32, 2, 4, 4};  // 256 threads, 64x32 per warp
  if (c.bm == 128 && tiles(c) < sms) c = {64, 64, 32, 2, 2, 4};
  if (c.bm == 16 && tiles(c) < sms) c = {16, 32, 64, 1, 2, 4};  // 16x16 per warp
  if (c.bm == 16)
    while (c.ks < 4 && tiles(c) * c.ks * 2 <= 4 * sms && k >= std::int64_t(c.ks) * 2 * c.bk * 2) c.ks *= 2;
  return fit(c, int(dtype_size(dtype)), target);
}

std::int64_t requested_splits(const OpDef& op, ScalarList scalars) {
  const double v = op.scalar(scalars, "splits");
  if (!(v >= 0 && v <= kMaxSplits && v == double(std::int64_t(v))))
    throw InvalidArgumentError(
        fmt::format("{}: splits is {}; expected 0 (the heuristic's choice) or a whole number from 1 to {}", op.name(),
                    v, kMaxSplits));
  return std::int64_t(v);
}

TileConfig split_k(TileConfig c, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch,
                   const Target& target, std::int64_t requested) {
  const std::int64_t k_tiles = std::max<std::int64_t>(1, (k + c.bk - 1) / c.bk);
  // The sm_80 path's splits are grid.z's, with the batches; the workspace's floats stay within a tensor's 2^59
  // elements, so that its bytes fit a size_t.
  const std::int64_t outputs = std::max<std::int64_t>(1, batch * m * n);
  const std::int64_t most = std::max<std::int64_t>(
      1, std::min<std::int64_t>(
             {kMaxSplits, k_tiles, c.wgmma ? kMaxSplits : 65535 / batch, (std::int64_t(1) << 59) / outputs}));
  if (requested > 0) {
    c.splits = int(std::clamp<std::int64_t>(requested, 1, most));
    return c;
  }
  const std::int64_t sms = reference_sm_count(target), tiles = c.tiles(m, n, batch);
  c.splits = 1;
  if (tiles == 0 || 10 * tiles >= 9 * sms) return c;
  // The model's time, in bytes moved at one SM's share of the bandwidth: the busiest SM's units, each a slice of
  // its tile's operands (rows of A past M are not loaded), and the sums each split writes and the reduce reads.
  const double tile_bytes = double(std::min<std::int64_t>(m, c.bm) + c.bn) * double(k) * c.element_bytes;
  auto cost = [&](std::int64_t splits) {
    const double busiest = double((tiles * splits + sms - 1) / sms) / double(splits) * tile_bytes * double(sms);
    return busiest + (splits > 1 ? 8.0 * double(splits * batch * m * n) : 0.0);
  };
  for (std::int64_t splits = 2; splits <= most && k_tiles >= splits * kMinSplitKTiles; splits *= 2)
    if (cost(splits) < cost(c.splits)) c.splits = int(splits);
  return c;
}

std::size_t split_workspace_bytes(const Params& p, std::int64_t m, std::int64_t n, std::int64_t batch) {
  const std::int64_t splits = splits_of(p);
  return splits > 1 ? std::size_t(splits * batch * m * n) * sizeof(float) : 0;
}

void expect_tensor_cores(std::string_view op, DType dtype, bool tf32, const Target& target) {
  if ((dtype != DType::f32 || tf32) && target.sm < 80)
    throw ArchError(
        fmt::format("{}: needs tensor cores for f16/bf16/tf32 (mma.sync, cp.async): sm_80 or "
                    "later; the target is {} (exact f32 runs anywhere)",
                    op, target.sm_name()));
}

std::int64_t row_stride(std::string_view op, std::string_view arg, const TensorSpec& t) {
  const int r = t.rank();
  if (t.stride(r - 1) != 1 && t.dim(r - 1) > 1)
    throw ShapeError(
        fmt::format("{}: {} {} has a non-unit stride in its last dim; rows must be contiguous", op, arg, t.str()));
  const std::int64_t ld = t.stride(r - 2);
  if (ld < t.dim(r - 1) && t.dim(r - 2) > 1)
    throw ShapeError(
        fmt::format("{}: {} {} has overlapping rows (row stride {} < {})", op, arg, t.str(), ld, t.dim(r - 1)));
  return std::max<std::int64_t>(ld, t.dim(r - 1));
}

std::int64_t checked_dim(std::string_view op, std::string_view what, std::int64_t v) {
  if (v > INT_MAX) throw ShapeError(fmt::format("{}: {} = {} exceeds the kernel's int range", op, what, v));
  return v;
}

bool wgmma_possible(const Target& t, DType dtype, bool aligned, std::int64_t m, std::int64_t n, std::int64_t k) {
  return t.sm == 90 && t.arch_specific && (dtype == DType::f16 || dtype == DType::bf16) && aligned && m > 0 && n > 0 &&
         k > 0;
}

GemvConfig pick_gemv(std::int64_t m, std::int64_t n, std::int64_t k, const Target& target) {
  constexpr int kWarps = 8;
  const std::int64_t warp_slots = 64 * std::int64_t(reference_sm_count(target));  // 2048 threads an SM
  const std::int64_t lane_chunks = k / 8 / 32;  // at 16 bits; f32 has twice as many chunks, which only helps
  const int rows = m <= 1 ? 1 : m <= 2 ? 2 : 4;
  // Four rows of x with the whole epilogue spill at 64 registers with 8 chunks in flight (NVVM: 4-32 bytes).
  GemvConfig c{rows, kWarps, 1, rows == 4 ? 4 : 8};
  while (c.ks < kWarps && n * c.ks * 2 < warp_slots && lane_chunks >= 2 * 2 * c.ks) c.ks *= 2;
  c.cols = kWarps / c.ks;
  return c;
}

bool gemv_fits(std::int64_t m, std::int64_t k, DType dtype, bool aligned, bool tf32, Path path) {
  return path == Path::any && !tf32 && m >= 1 && m <= kGemvMaxRows && aligned && k % (16 / dtype_size(dtype)) == 0;
}

void add_gemv(Params& p, const GemvConfig& c) {
  p.add("gemv", c.rows);
  p.add("cols", c.cols);
  p.add("ks", c.ks);
  p.add("chunks", c.chunks);
}

void add_tile(Params& p, const TileConfig& c) {
  for (const auto& [param, member] : kTileParams) p.add(param, c.*member);
}
TileConfig tile_of(const Params& p) {
  const DType dtype = p.dtype("dtype");
  TileConfig c{};
  for (const auto& [param, member] : kTileParams) c.*member = int(param == "splits" ? splits_of(p) : p.get(param));
  c.element_bytes = int(dtype_size(dtype));
  c.tensor_cores = dtype != DType::f32 || p.get("tf32") != 0;
  c.wgmma = p.get("wgmma") != 0;
  return c;
}

namespace {
// The inputs both paths' products take (gemm_args.h; the sm_90a path reads them only for its K groups' last k
// tiles, its operands otherwise through the TMA descriptors).
mojo_gemm::InputArgs<void> input_args(const GemmArgs& g) {
  return {.a = ptr(g.a), .b = ptr(g.b), .lda = g.lda, .ldb = g.ldb, .batch_a = g.batch_a, .batch_b = g.batch_b};
}
// The output side every gemm.cu kernel takes (gemm_args.h).
mojo_gemm::OutputArgs<void> output_args(const GemmArgs& g) {
  return {
      .c = ptr(g.c),
      .bias = ptr(g.bias),
      .residual = ptr(g.residual),
      .alpha = g.alpha,
      .beta = g.beta,
      .m = int(g.m),  // checked_dim: they fit
      .n = int(g.n),
      .k = int(g.k),
      .ldc = g.ldc,
      .ldr = g.ldr,
      .batch_c = g.batch_c,
      .batches = int(g.batches),
      .offsets = ptr(g.offsets),
      .total_rows = g.total_rows,
      .partials = ptr<const float>(g.partials),
  };
}
}  // namespace

void push_kernel_args(KernelArgs& args, const GemmArgs& given, const Params& p) {
  if (is_split_reduce(p)) return args.push_args(output_args(given));
  GemmArgs g = given;
  if (const std::int64_t splits = splits_of(p); splits > 1) {  // the product: f32 sums into the workspace, no epilogue
    g.c = g.partials;
    g.bias = g.residual = 0;
    g.alpha = 1;
    g.beta = 0;
    g.ldc = g.n;
    g.ldr = 0;
    g.batch_c = splits * g.m * g.n;
  }
  // Both paths' products take the sm_80 path's Args; the sm_90a one then its TMA descriptors.
  args.push_args(mojo_gemm::Args<void, void>{.in = input_args(g), .out = output_args(g)});
  if (p.get_or("wgmma", 0)) {  // linear's decode form has no wgmma param: the sm_80 path's arguments
    // Each operand as stored: K-major in boxes of bk (one 128-byte row) x the tile's rows, MN-major in
    // boxes of 64 m or n (128 bytes) x bk.
    const DType dtype = p.dtype("dtype");
    const unsigned bm = unsigned(p.get("bm")), bn = unsigned(p.get("bn")), bk = unsigned(p.get("bk"));
    // Groups read their rows out of one x [total_rows, K].
    const std::int64_t a_rows = g.offsets ? g.total_rows : g.m, a_batches = g.offsets ? 1 : g.batches;
    const TensorMap a = g.mn_major_a ? tile_tensor_map(g.a, dtype, g.m, g.k, a_batches, g.lda, g.batch_a, 64, bk)
                                     : tile_tensor_map(g.a, dtype, g.k, a_rows, a_batches, g.lda, g.batch_a, bk, bm);
    const std::int64_t b_batches = g.group_k ? 1 : g.batches;  // K groups read their rows out of one x too
    const TensorMap b = g.mn_major_b ? tile_tensor_map(g.b, dtype, g.n, g.k, b_batches, g.ldb, g.batch_b, 64, bk)
                                     : tile_tensor_map(g.b, dtype, g.k, g.n, b_batches, g.ldb, g.batch_b, bk, bn);
    // The last row tile of a K-major A in a box of its own rows (gemm_sm90.cuh says why); a itself where the
    // tiles divide M, or where the kernel does not use it (MN-major A, groups).
    const unsigned tail_rows = unsigned(g.m % bm);
    const TensorMap a_tail = tail_rows == 0 || g.mn_major_a || g.offsets
                                 ? a
                                 : tile_tensor_map(g.a, dtype, g.k, a_rows, a_batches, g.lda, g.batch_a, bk, tail_rows);
    args.push(a);
    args.push(b);
    args.push(a_tail);
  }
}

std::string shape_bucket(std::int64_t m, std::int64_t n, std::int64_t k) {
  auto up = [](std::int64_t v) { return std::bit_ceil(std::uint64_t(std::max<std::int64_t>(v, 1))); };
  return fmt::format("m<={} n<={} k<={}", up(m), up(n), up(k));
}

std::int64_t zero_or_one(const OpDef& op, ScalarList scalars, std::string_view name) {
  const double v = op.scalar(scalars, name);
  if (v != 0 && v != 1) throw InvalidArgumentError(fmt::format("{}: {} is {}; expected 0 or 1", op.name(), name, v));
  return std::int64_t(v);
}

Path path_of(const OpDef& op, ScalarList scalars, bool wgmma_ok, const Target& target) {
  const int v = checks::kernel_path(op, scalars);
  if (v == 90 && !wgmma_ok)
    throw InvalidArgumentError(
        fmt::format("{}: path = 90 (TMA + wgmma) cannot take these tensors on {}: it needs an "
                    "sm_90a target, f16 or bf16 inputs with 16-byte aligned rows, batches apart "
                    "and a non-empty problem",
                    op.name(), target.sm_name()));
  return Path(v);
}

bool tf32_of(const OpDef& op, ScalarList scalars, DType dtype) {
  const bool tf32 = zero_or_one(op, scalars, "tf32") == 1;
  if (tf32 && dtype != DType::f32)
    throw InvalidArgumentError(
        fmt::format("{}: tf32 = 1 applies to f32 inputs; these are {}", op.name(), dtype_name(dtype)));
  return tf32;
}

LaunchGeometry tile_geometry(const Params& p, std::int64_t m, std::int64_t n, std::int64_t batch) {
  if (is_gemv(p)) {
    const std::int64_t cols = p.get("cols");
    LaunchGeometry g;
    g.grid = {unsigned((n + cols - 1) / cols), 1, unsigned(batch)};
    g.block = {unsigned(cols * p.get("ks") * 32), 1, 1};
    return g;
  }
  const TileConfig c = tile_of(p);
  LaunchGeometry g;
  if (is_split_reduce(p)) {
    const std::int64_t threads = batch * m * ((n + 1) / 2);
    g.grid = {unsigned((threads + mojo_gemm::kReduceThreads - 1) / mojo_gemm::kReduceThreads), 1, 1};
    g.block = {unsigned(mojo_gemm::kReduceThreads), 1, 1};
    return g;
  }
  const std::int64_t blocks = c.tiles(m, n);
  // The sm_90a kernel is persistent: its blocks loop over every batch's units. The sm_80 one takes each split
  // of each batch as a grid.z.
  g.grid =
      c.wgmma ? Dim3{unsigned(blocks * batch * c.splits), 1, 1} : Dim3{unsigned(blocks), 1, unsigned(batch * c.splits)};
  g.persistent = c.wgmma;
  g.block = {c.threads(), 1, 1};
  g.dynamic_smem = c.smem_bytes();
  return g;
}

LaunchGeometry group_tile_geometry(const Params& p, std::int64_t rows, std::int64_t n, std::int64_t groups) {
  LaunchGeometry g = tile_geometry(p, rows, n, 1);
  const TileConfig c = tile_of(p);
  const std::int64_t blocks = std::int64_t(mojo_gemm::group_row_tiles(rows, groups, c.bm)) * ((n + c.bn - 1) / c.bn);
  if (blocks > INT_MAX)
    throw ShapeError(fmt::format("{} rows in {} groups by {} columns make {} tiles of {}x{}; supported: {}", rows,
                                 groups, n, blocks, c.bm, c.bn, INT_MAX));
  g.grid = {unsigned(blocks), 1, 1};
  return g;
}

bool chunk_aligned(DType dtype, DevicePtr p, std::initializer_list<std::int64_t> strides) {
  if (checks::alignment_of(p) < 16) return false;
  const std::int64_t per_chunk = 16 / std::int64_t(dtype_size(dtype));
  return std::all_of(strides.begin(), strides.end(), [&](std::int64_t s) { return s % per_chunk == 0; });
}

std::string TileOp::entry_macro(const Params& p) const {
  if (is_gemv(p)) return OpDef::entry_macro(p) + "_gemv";
  if (is_split_reduce(p)) return OpDef::entry_macro(p) + "_reduce";
  return OpDef::entry_macro(p) + (p.get("wgmma") != 0 ? "_sm90" : "");
}

std::vector<Params> TileOp::plan(const Params& p) const {
  return splits_of(p) == 1 ? std::vector<Params>{p} : two_steps(p);  // the split products, then their reduction
}

std::vector<Params> TileOp::candidates(const Params& chosen, TensorList tensors, ScalarList scalars,
                                       const Target& target) const {
  std::vector<Params> out{chosen};
  const auto add = [&](const Params& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  // The op's own choice for these tensors with one scalar pinned.
  const auto derived_with = [&](std::string_view name, double value) {
    std::vector<ScalarArg> pinned;
    for (const ScalarArg& s : scalars)
      if (s.name != name) pinned.push_back(s);
    pinned.push_back({name, value});
    return derive_params(tensors, pinned, target);
  };
  if (is_gemv(chosen)) {  // the heuristic's split first, then every other, each at 4 and 8 chunks in flight
    for (int ks : {1, 2, 4, 8})
      for (int chunks : {8, 4}) {
        add(rewritten(chosen, [&](std::string_view name, std::int64_t v) -> std::int64_t {
          return name == "cols" ? 8 / ks : name == "ks" ? ks : name == "chunks" ? chunks : v;
        }));
      }
    // Then the tiles each path would take for these tensors (the op's own choice with `path` pinned), so that
    // where the decode form is the slower one, tuning finds the tile.
    for (double path : {80, 90}) {
      try {
        add(derived_with("path", path));
      } catch (const InvalidArgumentError&) {  // the sm_90a path on another GPU
      }
    }
    return out;
  }
  const TileConfig current = tile_of(chosen);
  if (!current.tensor_cores) return {};
  TileConfig split2{16, 64, 64, 1, 2, 4}, split4{16, 32, 64, 1, 2, 4};
  split2.ks = 2;
  split4.ks = 4;
  const TileConfig tiles[] = {kWgmmaWide,
                              kWgmmaNarrow,
                              {128, 128, 32, 2, 4, 4},
                              {128, 64, 32, 2, 2, 4},
                              {64, 128, 32, 2, 2, 4},
                              {64, 64, 32, 2, 2, 4},
                              {16, 64, 64, 1, 2, 4},
                              {16, 32, 64, 1, 2, 4},
                              split2,
                              split4};
  for (const TileConfig& c : tiles) {
    if (c.wgmma && !current.wgmma) continue;
    add(with_tile(chosen, fit(c, current.element_bytes, target)));
  }
  // K split over blocks: the op's own choice (tile and all) with the split pinned.
  const auto declared = scalar_args();
  if (std::any_of(declared.begin(), declared.end(), [](const ScalarArgInfo& s) { return s.name == "splits"; }))
    for (double splits : {2, 4, 8}) add(derived_with("splits", splits));
  return out;
}

unsigned TileOp::operand_alignment(const Params& p) {
  return p.get("vec") == 8 ? 16 : unsigned(dtype_size(p.dtype("dtype")));
}

}  // namespace mojo
