// What the row ops share (rms_norm, add_rms_norm, layer_norm, softmax, ...):
// tensors seen as [rows, cols] with evenly strided rows, and the choice of
// vector width, threads per row and rows per block for one row length.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

#include "mojo/op.hpp"

namespace mojo::rows {

// Largest row length a row op specializes on (the row loop is unrolled).
constexpr std::int64_t kMaxCols = 1 << 20;

// The last dim (cols) of `t`, checked to be 1..kMaxCols.
std::int64_t cols_of(std::string_view op, std::string_view arg, const TensorSpec& t);
// numel / cols, checked to fit the grid (< 2^31 blocks).
std::int64_t count(std::string_view op, const TensorSpec& t);
// Elements between consecutive rows of `t` seen as [rows, cols]: the last dim
// must have unit stride and the leading dims must collapse into one evenly
// strided dim; ShapeError otherwise.
std::int64_t stride(std::string_view op, std::string_view arg, const TensorSpec& t);

// The token stride of a [tokens, heads, head_dim] tensor whose heads are
// contiguous within a token (q, k and v may be views of a fused qkv tensor).
std::int64_t token_stride(std::string_view op, std::string_view arg, const TensorSpec& t);

// A per-column vector (weight, bias) of a [..., cols] tensor `x`: [cols], x's dtype, contiguous.
void check_vector(std::string_view op, std::string_view arg, const TensorSpec& t, const TensorSpec& x,
                  std::int64_t cols);
// The per-row statistics mean and rstd (layer_norm's), tensors mean_index and mean_index + 1: f32, one per
// row, contiguous; when `optional`, both may be absent (rank 0) instead, and then this returns false.
bool check_stats(std::string_view op, TensorList t, std::size_t mean_index, std::int64_t rows, bool optional);
// Every tensor but the "stats" ones non-null and aligned to the vector the kernel loads.
void expect_pointers(std::string_view op, std::span<const TensorArgInfo> infos, TensorList t, const Params& p);

struct Layout {
  std::int64_t vec = 1;       // elements per load/store
  std::int64_t threads = 32;  // threads per row
  std::int64_t rows_per_block = 1;
};

// The widest vector (up to 16 bytes) that divides `cols` and to which every
// tensor's address and row stride are aligned, and enough threads per row to
// keep about `vectors_per_thread` vectors in flight per thread: by default
// enough loads in flight per thread to cover HBM latency, few enough that
// short rows still use many threads.
constexpr std::int64_t kVectorsPerThread = 4;
// The norms' (rms_norm, add_rms_norm, layer_norm): two, so that their blocks fill an SM
// (mojo::kNormBlocksPerSm in the prelude).
constexpr std::int64_t kNormVectorsPerThread = 2;
Layout pick(std::int64_t cols, DType dtype, std::initializer_list<Tensor> tensors, std::int64_t max_threads = 1024,
            std::int64_t vectors_per_thread = kVectorsPerThread);
// The same for rows whose every start is aligned to `alignment` bytes.
Layout pick_aligned(std::int64_t cols, DType dtype, unsigned alignment, std::int64_t max_threads = 1024,
                    std::int64_t vectors_per_thread = kVectorsPerThread);
// The alignment in bytes (at most 256) of every row start of every tensor.
unsigned alignment(DType dtype, std::initializer_list<Tensor> tensors);

void add_params(Params& p, std::string_view cols_name, std::int64_t cols, const Layout& l);

// Few long rows (a batch of vocabulary rows) split over several blocks a row
// (mojo::RowChunk in the prelude), so that they still fill the GPU: about two
// blocks per SM of the target's reference GPU (no more where that leaves a
// last wave fuller: rows.cpp), at most kMaxChunks (a row's
// parts are merged in one place) and none shorter than kMinChunk columns;
// about 8 vectors a thread, 64 to 512 threads. More rows than that wave holds
// are split (up to kMaxChunksPastAWave) where the waves then take a tenth less
// time.
constexpr std::int64_t kMaxChunks = 32, kMinChunk = 1024, kMaxChunksPastAWave = 4;
struct Chunking {
  std::int64_t chunks = 1;  // blocks a row
  std::int64_t threads = 64;
};
// `max_chunks`: fewer a row, where a grid must fit on the SMs (cooperative below).
Chunking chunk(std::int64_t rows, std::int64_t cols, std::int64_t vec, const Target& target,
               std::int64_t max_chunks = kMaxChunks);

// Whether the blocks of rows split as `c` (chunk's) meet in one cooperative launch (LaunchGeometry::cooperative)
// rather than across launches: the op's `cooperative` scalar (-1, 0 or 1), whose -1 picks it where the grid
// fits on half the target's reference SMs and `worth_it`. A launchable kernel is promised one block per SM, so
// such a grid is resident together on any GPU of the family with half the SMs or more, whatever its registers.
// Asked for (1), a grid up to the reference GPU's SMs: where `c` has more blocks, it gets fewer chunks a row
// (InvalidArgumentError where even one block a row is too many).
bool cooperative(const OpDef& op, ScalarList scalars, std::int64_t rows, std::int64_t cols, std::int64_t vec,
                 const Target& target, Chunking& c, bool worth_it = true);

// One block per ROWS rows of THREADS threads each.
LaunchGeometry geometry(std::int64_t rows, const Params& p);

}  // namespace mojo::rows
