// What gemm, gemm_batched, linear and group_gemm share: the tile
// configuration (their params), the heuristic that picks it, the kernel's
// arguments, and the autotuning candidates. Template: kernel_templates/gemm.cu.
//
// The params are the tile configuration, not the shape: M, N and K are kernel
// arguments, so every shape in one M bucket shares a kernel. The bucket picks
// the tile (decode-sized M gets a thin tile so that more blocks stream the
// weights); the pipeline depth fits the target's shared memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "gemm_args.h"
#include "mojo/op.hpp"

namespace mojo {

// f16/bf16 run on tensor cores; f32 in exact fp32 on the CUDA cores.
inline constexpr DType kTileInputTypes[] = {DType::f32, DType::f16, DType::bf16};

struct TileConfig {
  int bm, bn, bk, wm, wn, stages;
  int element_bytes = 2;     // of the inputs: 2, or 4 for tf32
  bool tensor_cores = true;  // false: the exact fp32 path, static shared memory only
  bool wgmma = false;        // the sm_90a path: bm / 64 consumer warpgroups + a producer, bk = 64
  int ks = 1;                // K split over this many groups of wm x wn warps (sm_80 path), each with its own ring
  int swizzle = 8;           // block rows per raster group (neighbouring blocks share B in L2)
  int splits = 1;            // K split over this many blocks (sm_90a: units), whose sums a second kernel adds
  unsigned smem_bytes() const {
    if (wgmma) return mojo_gemm::sm90_smem(bm, bn, bk, stages).bytes;
    return tensor_cores ? mojo_gemm::sm80_smem(bm, bn, bk, stages, ks, element_bytes) : 0;
  }
  unsigned threads() const { return wgmma ? unsigned(bm / 64 + 1) * 128 : unsigned(wm * wn * ks * 32); }
  // Tiles of C for an m x n product, `batch` times.
  std::int64_t tiles(std::int64_t m, std::int64_t n, std::int64_t batch = 1) const {
    return ((m + bm - 1) / bm) * ((n + bn - 1) / bn) * batch;
  }
};

// The "path" scalar: 0 lets the heuristic choose, 80 and 90 pin the sm_80 or sm_90a path.
enum class Path { any = 0, sm80 = 80, sm90 = 90 };

// Decode sizes (M <= kSm80PathMaxRows) take the sm_90a path only where its tile is at least
// kDecodeWgmmaMinCols wide; else the sm_80 path's 16-row tiles, K split. Measured on an H200 (2026-11-27),
// Qwen3-8B's linears at M 1 and 16 against cuBLAS: the sm_90a path's 32- and 48-wide tiles 0.37-0.60x (sm_80
// path 0.74-1.04x), its 192-wide tile (gate_up, N 24576) 0.94-0.96x (sm_80 path 0.79-0.81x). At M 32 and 64
// the sm_90a path was the faster at every shape. 128 lies between the widths measured, not at a measured
// edge. Most of the narrow tiles' time there was TMA zero-filling A's box past M (gemm_sm90.cuh), which the
// sm_90a path no longer does: both limits stand until the next GPU run measures it again.
constexpr std::int64_t kSm80PathMaxRows = 16;
constexpr int kDecodeWgmmaMinCols = 128;

// How gemm and linear take the sm_90a path (`any_width`, or `widths_of_64` when B is MN-major: TMA loads
// it in boxes of 64 columns): at every M but decode's narrow tiles (above), with 64-row tiles where M is
// small and any width that is a multiple of 16, chosen as DeepGEMM does: the fewest waves of tiles on the
// reference GPU's SMs, then the fullest last wave (perf_model's wave_fill), then the larger tile, then the
// squarer one; the pipeline as deep as shared memory allows (gemm_tile.cpp's kMaxWgmmaStages says why).
// The grouped products (`fixed`) keep the two 128-row tiles below and take the path only where M fills them.
enum class Sm90Tiles { fixed, any_width, widths_of_64 };
TileConfig pick_wgmma_tile(std::int64_t m, std::int64_t n, std::int64_t batch, Sm90Tiles widths, const Target& target);

// The M bucket picks the tile; when its grid would leave SMs idle, a
// narrower tile makes more blocks (decode and mid-size M on wide GPUs), and
// a decode tile splits K over up to 4 warp groups so that about four tiles'
// worth of loads per SM are in flight (each group keeping >= 2 k tiles).
// Where the sm_90a path may run (`wgmma_ok`), gemm and linear take it
// but for decode's narrow tiles (`sm90_tiles`, above); the grouped
// products take it for problems with enough 128-row tiles to fill half the
// SMs, and leave thin ones to the sm_80 path, whose small tiles spread the
// weights over more SMs.
TileConfig pick_tile(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, bool tf32, const Target& target,
                     bool wgmma_ok = false, std::int64_t batch = 1, Path path = Path::any,
                     Sm90Tiles sm90_tiles = Sm90Tiles::fixed);
// The "path" scalar of the tile ops that take one (gemm, gemm_batched, linear, group_gemm and its weights'
// gradient).
inline constexpr std::string_view kPathDoc =
    "0: the heuristic picks the kernel path; 80: the sm_80 path; 90: the sm_90a path (TMA + wgmma)";
// Splitting K over blocks (gemm, gemm_batched and linear: their "splits" scalar). Each split's block (a work unit
// on the sm_90a path) stores its tile's f32 sums to the workspace, [batch, splits, M, N]; a second kernel adds them
// in split order, the same sums whatever the blocks' timing, and applies the epilogue (gemm.cu: split_length).
// The heuristic splits only where the tiles alone leave more than a tenth of the reference GPU's SMs without
// one. It then takes the power of two (at least kMinSplitKTiles k steps a split) that moves the fewest bytes by
// the model: the busiest SM's units (ceil(units / SMs), each 1 / splits of a tile's operands) at one SM's share
// of the bandwidth, plus the sums each split writes and the reduce reads back. A requested count (1 to
// kMaxSplits) is taken as it is, the tile chosen for tiles x splits units, but never beyond K's k steps.
constexpr int kMaxSplits = 16;
inline constexpr std::string_view kSplitsDoc =
    "0: the heuristic's choice; N: K split over N blocks, their f32 sums added in order by a second kernel";
constexpr std::int64_t kMinSplitKTiles = 8;
// The "splits" scalar: 0 (the heuristic's choice) or 1 to kMaxSplits; InvalidArgumentError otherwise.
std::int64_t requested_splits(const OpDef& op, ScalarList scalars);
// `c` with its splits: `requested`, or the heuristic's where it is 0 (above).
TileConfig split_k(TileConfig c, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch,
                   const Target& target, std::int64_t requested);
// The workspace a split's sums take: splits x batch x m x n floats (0 unsplit).
std::size_t split_workspace_bytes(const Params& p, std::int64_t m, std::int64_t n, std::int64_t batch);

// linear at decode sizes, M <= kGemvMaxRows, where the weights' rows are whole 16-byte chunks and no path is
// pinned: a warp a column of W on the CUDA cores, KS warps splitting its row (gemv.cuh says why). `rows` of
// x the kernel takes (1, 2 or 4), `cols` the block's columns, `ks` warps a column, `chunks` the 16-byte
// loads each lane keeps in flight. KS doubles while the grid's warps would fill less than half of every
// SM's warp slots and each lane keeps at least two chunks; cols * ks = 8 warps a block; 8 chunks, 4 at 4 rows.
// Not yet timed on a GPU: chosen over the 16-row mma tile for its warps and bytes in flight (gemv.cuh);
// `path` 80 pins the tile for comparison; autotuning times the form's other splits and depths (not the tile).
constexpr std::int64_t kGemvMaxRows = 4;
struct GemvConfig {
  int rows, cols, ks, chunks;
};
GemvConfig pick_gemv(std::int64_t m, std::int64_t n, std::int64_t k, const Target& target);
// Whether linear takes the decode form for these operands.
bool gemv_fits(std::int64_t m, std::int64_t k, DType dtype, bool aligned, bool tf32, Path path);
// The decode form's params (gemv, cols, ks, chunks), and whether `p` has them.
void add_gemv(Params& p, const GemvConfig& c);
inline bool is_gemv(const Params& p) { return p.get_or("gemv", 0) != 0; }
// How many blocks split K (1: none). The tiles of group_gemm, moe_mlp and the fused loss take no "splits" param.
inline std::int64_t splits_of(const Params& p) { return p.get_or("splits", 1); }
// Whether `p` is a K split's reduce step (the plans of cross_entropy and moe_mlp number their own steps, unsplit).
inline bool is_split_reduce(const Params& p) { return splits_of(p) > 1 && p.get_or("step", 0) == 1; }

// The tile params: bm, bn, bk, wm, wn, stages, ks, swizzle.
void add_tile(Params& p, const TileConfig& c);
TileConfig tile_of(const Params& p);
// The grid of either form: tiles of C (each split's), or linear's decode form (cols columns a block); the grid of
// a K split's reduce step (param step 1): a thread a pair of columns of C.
LaunchGeometry tile_geometry(const Params& p, std::int64_t m, std::int64_t n, std::int64_t batch);
// The grid of a product over `groups` groups of `rows` rows in all (group_gemm, moe_mlp): a unit a (row tile,
// column tile) of any split of the rows (mojo_gemm::group_row_tiles), a block each on the sm_80 path, the
// persistent grid's units on the sm_90a path.
LaunchGeometry group_tile_geometry(const Params& p, std::int64_t rows, std::int64_t n, std::int64_t groups);

// The sm_90a path's preconditions: a Hopper-specific build, 16-bit inputs,
// rows TMA can address (16-byte aligned starts and row strides: `aligned`),
// and a non-empty problem. Any layout: wgmma reads MN-major tiles transposed.
bool wgmma_possible(const Target& t, DType dtype, bool aligned, std::int64_t m, std::int64_t n, std::int64_t k);
// 16-byte chunk loads need every row start 16-byte aligned.
bool chunk_aligned(DType dtype, DevicePtr p, std::initializer_list<std::int64_t> strides);
// The "vec" param: 8 for 16-byte chunk loads on tensor cores, else 1.
inline std::int64_t vec_param(const TileConfig& c, bool aligned) { return c.tensor_cores && aligned ? 8 : 1; }

void expect_tensor_cores(std::string_view op, DType dtype, bool tf32, const Target& target);
// A matrix (the last two dims of `t`) with unit inner stride: its row stride.
std::int64_t row_stride(std::string_view op, std::string_view arg, const TensorSpec& t);
// `v`, checked to fit the kernel's int.
std::int64_t checked_dim(std::string_view op, std::string_view what, std::int64_t v);

// The scalars the tile ops share: a 0-or-1 flag (trans_a, trans_b), "tf32"
// (only for f32 inputs) and "path" (90 only where the sm_90a path can take
// these tensors: `wgmma_ok`).
std::int64_t zero_or_one(const OpDef& op, ScalarList scalars, std::string_view name);
bool tf32_of(const OpDef& op, ScalarList scalars, DType dtype);
Path path_of(const OpDef& op, ScalarList scalars, bool wgmma_ok, const Target& target);

// The kernel's arguments; one place for the ABI all four ops share.
struct GemmArgs {
  DevicePtr c = 0, a = 0, b = 0, bias = 0, residual = 0;
  float alpha = 1, beta = 0;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, ldr = 0, batch_a = 0, batch_b = 0, batch_c = 0;
  DevicePtr offsets = 0;
  std::int64_t total_rows = 0;
  std::int64_t batches = 1;
  DevicePtr partials = 0;                       // the workspace: a K split's sums (split_workspace_bytes)
  bool mn_major_a = false, mn_major_b = false;  // a stored [K, M], b stored [K, N] (gemm's layouts)
  bool group_k = false;  // the groups' rows are K (group_gemm_weight_grad): a and b are each one matrix of k rows
};
// Pushes the kernel's arguments (kernel_templates/gemm_args.h): mojo_gemm::Args (the inputs, then the
// output side) for either path's product, and for the sm_90a one then the TMA descriptors of A, of B and of
// A's last row tile (from the device part); OutputArgs alone for a K split's reduce step.
// A split's product step writes to g.partials.
void push_kernel_args(KernelArgs& args, const GemmArgs& g, const Params& p);

// "m<=64 n<=4096 k<=4096": the powers of two a tuning result stands for.
std::string shape_bucket(std::int64_t m, std::int64_t n, std::int64_t k);

// The base of the four tile ops: the tile's shared memory, the sm_90a entry
// point, the tuning candidates, and the alignment their operand loads need.
class TileOp : public OpDef, public Tunable {
 public:
  using OpDef::OpDef;
  unsigned max_dynamic_smem(const Params& p) const override {
    return is_gemv(p) || is_split_reduce(p) ? 0 : tile_of(p).smem_bytes();
  }
  // The sm_90a kernel has its own signature (TMA descriptors), linear's decode form its own geometry: each
  // its own entry macro.
  std::string entry_macro(const Params& p) const override;
  const Tunable* tuning() const noexcept override { return this; }
  // The heuristic's tile first, then every other tensor-core tile that fits
  // the target's shared memory (none for the exact f32 path); on the sm_90a
  // path, its two tiles and the sm_80 path's; then, for the ops that split K,
  // the op's own choice with 2, 4 and 8 splits. For linear's decode form: its
  // other splits and depths, then the tile each path takes for these tensors.
  std::vector<Params> candidates(const Params& chosen, TensorList tensors, ScalarList scalars,
                                 const Target& target) const override;
  // A K split (param splits > 1) is a plan of two steps: the product, then the reduce (the *_reduce entry).
  std::vector<Params> plan(const Params& p) const override;

 protected:
  // Bytes the A and B operands must be aligned to: 16 for chunk loads, else one element.
  static unsigned operand_alignment(const Params& p);
};

}  // namespace mojo
