// Matrix multiplication, the sm_80 path (any sm_80+ GPU): f16/bf16 inputs on
// tensor cores (mma.sync m16n8k16 with fp32 accumulation, ldmatrix fragment
// loads from swizzled shared memory, a STAGES-deep cp.async pipeline); f32
// inputs in exact fp32 on the CUDA cores (64 x 64 tiles, 4 x 4 per thread),
// or as tf32 on tensor cores (m16n8k8) when asked.
//
//   gemm, gemm_batched:  C = alpha * op(A) * op(B) + beta * C    (row-major)
//   linear:              out = act(x * W^T + bias) + residual     (W: [N, K])
//   group_gemm:          out[rows of group g] = x[rows of group g] * W[g]^T, the
//                        groups' rows given by offsets (MoE experts), one launch
//   group_gemm_weight_grad:  grad_weight[g] = grad_out[rows of g]^T * x[rows of g]:
//                        the groups' rows are each product's K (GROUP_K)
//
// Params, by name (P::name in the entry macros at the end):
//   dtype, out   input storage (f16, bf16 or f32) and output storage (dtype or float; gemm only)
//   bm bn bk     the block's tile of C and its step along K
//   wm wn        warps along M and N; each owns a (bm/wm) x (bn/wn) tile of C
//   stages       tiles of A and B in flight (shared memory holds them all)
//   swizzle      block rows per raster group: tiles are visited swizzle rows at a
//                time sweeping N, so neighbouring blocks share B in L2
//   ks           split K inside the block: ks groups of wm x wn warps, group g
//                taking k tiles g, g + ks, ... through its own stages-deep ring;
//                the groups' sums meet in shared memory (decode: more warps
//                stream the weights without a workspace)
//   splits       split K over this many blocks (sm_90a: work units), each storing
//                its f32 sums to the workspace; the plan's second kernel (the
//                *_reduce entry) adds them in split order and applies the
//                epilogue (split_length below). 1: no split (gemm, linear)
//   ta           A is stored [K, M] (op(A) = A^T); else [M, K]        (gemm)
//   tb           B is stored [N, K] (op(B) = B^T); else [K, N]        (gemm; group_gemm: 0 with weight_kn)
//   vec          8: rows are loaded as 16-byte cp.async chunks (strides and
//                pointers 16-byte aligned); 1: element by element, any stride
//   beta         1: C is read (beta != 0); 0: C is only written      (gemm)
//   bias, residual  0/1: the epilogue adds them                       (linear)
//   act          the epilogue's mojo::Act (mojo_activation.h)         (linear)
//                plus mojo::kGated: gate/up column pairs -> act(gate) * up,
//                C has n / 2 columns                                  (group_gemm)
//   offsets      4: group_gemm's offsets are int32, 8: int64          (group_gemm)
//   GROUP_K      (not a param: the entry macro's) the groups' rows are K, not M   (group_gemm_weight_grad)
//   wgmma        1: the sm_90a path (gemm_sm90.cuh: TMA, wgmma, warp-specialised;
//                bk = 64, wm = bm / 64 consumer warpgroups, wn = 1, vec unused),
//                entered through the *_sm90 macro
//   gemv cols ks chunks  linear at decode sizes on the CUDA cores (gemv.cuh, which
//                says what each is), entered through the *_gemv macro; no tile params
//   tf32         f32 inputs on tensor cores as tf32 (mma m16n8k8, inputs
//                rounded to 10 mantissa bits); 0: f32 stays exact
// Kernel args (the sm_80 path; gemm_sm90.cuh lists its own): MOJO_GEMM_ARGS (gemm_args.h),
//   with ld* the row strides in elements and batch_* the batch strides. For
//   group_gemm, group g's rows of a and c are [offsets[g], offsets[g + 1])
//   (clamped to total_rows), b advances by batch_b per group, and grid.x's row
//   tiles are all groups' row tiles in group order (group_row_tiles of
//   total_rows: one block a tile, none per empty group). With GROUP_K, grid.z
//   runs over the groups, group g's rows are those of a ([K, M]) and b
//   ([K, N]) that its product sums over, k is unused, and c advances by
//   batch_c per group.
// Geometry: WM * WN * KS * 32 threads; grid.x = ceil(m / BM) * ceil(n / BN) (group_gemm:
//   group_row_tiles * ceil(n / BN)), visited in groups of SWIZZLE block rows so
//   that neighbouring blocks share tiles of B in L2; grid.z = batch (group_gemm:
//   1); KS * STAGES * (BM + BN) * BK * sizeof(TA) bytes of dynamic shared memory.
//
// Edges: loads outside the matrices are zero-filled (cp.async's src-size), so
// every M, N and K is exact; stores are bounds-checked.
#include "mojo_mma.cuh"
#include "gemm_args.h"

namespace mojo_gemm {

using mojo::load_fragment;
using mojo::Tile;


// Rows [row0, row0 + OUTER) x columns [col0, col0 + INNER) of a row-major
// rows x cols matrix (leading dim ld) into a Tile; zeros outside the matrix.
template <class T, int OUTER, int INNER, int THREADS, int VEC>
__device__ __forceinline__ void load_tile(unsigned char* tile, const T* g, long long ld, int rows, int cols, int row0,
                                          int col0, int tid) {
  using L = Tile<OUTER, INNER, sizeof(T)>;
  constexpr int E = L::PER_CHUNK;
  constexpr int TOTAL = OUTER * L::CHUNKS, PER_THREAD = (TOTAL + THREADS - 1) / THREADS;
  if constexpr (VEC == 8) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      const int chunk = tid + i * THREADS;
      if (TOTAL % THREADS != 0 && chunk >= TOTAL) break;
      const int r = chunk / L::CHUNKS, c = (chunk % L::CHUNKS) * E;
      const int gr = row0 + r, gc = col0 + c, left = cols - gc;
      const int valid = gr < rows && left > 0 ? (left < E ? left : E) : 0;
      const T* src = valid > 0 ? g + (long long)gr * ld + gc : g;
      mojo::cp_async_16(mojo::smem_address(tile) + unsigned(L::offset(r, c)), src, valid * (int)sizeof(T));
    }
  } else {
    // The slow path stays a loop: unrolled, its scalar loads would need more registers than there are.
#pragma unroll 1
    for (int i = 0; i < PER_THREAD; ++i) {
      const int chunk = tid + i * THREADS;
      if (chunk >= TOTAL) break;
      const int r = chunk / L::CHUNKS, c = (chunk % L::CHUNKS) * E;
      const int gr = row0 + r, gc = col0 + c;
      mojo::Pack<T, E> p;
#pragma unroll
      for (int j = 0; j < E; ++j)
        p.v[j] = gr < rows && gc + j < cols ? g[(long long)gr * ld + gc + j] : mojo::from_float<T>(0.f);
      mojo::store<T, E>(reinterpret_cast<T*>(tile + L::offset(r, c)), p);
    }
  }
}

// The first row and column of tile `pid` of C: tiles are visited in groups
// of SWIZZLE block rows that sweep N together, so that neighbouring blocks
// share tiles of B in L2.
template <int BM, int BN, int SWIZZLE>
__device__ __forceinline__ void tile_origin(int pid, int tiles_m, int tiles_n, int& m0, int& n0) {
  const int per_group = SWIZZLE * tiles_n, first_m = (pid / per_group) * SWIZZLE;
  const int group_rows = tiles_m - first_m < SWIZZLE ? tiles_m - first_m : SWIZZLE;
  m0 = (first_m + (pid % per_group) % group_rows) * BM;
  n0 = ((pid % per_group) / group_rows) * BN;
}

// Group g's first row, from int32 or int64 offsets.
template <int OFFSETS> __device__ __forceinline__ long long group_offset(const void* offsets, long long g) {
  if constexpr (OFFSETS == 4) return static_cast<const int*>(offsets)[g];
  else return static_cast<const long long*>(offsets)[g];
}

// Group g's rows [first, first + rows), clamped to [0, total_rows).
template <int OFFSETS>
__device__ __forceinline__ void group_rows(const void* offsets, long long g, long long total_rows, long long& first,
                                           int& rows) {
  long long end = group_offset<OFFSETS>(offsets, g + 1);
  first = group_offset<OFFSETS>(offsets, g);
  first = first < 0 ? 0 : (first > total_rows ? total_rows : first);
  end = end < first ? first : (end > total_rows ? total_rows : end);
  rows = (int)(end - first);
}

// Which group's row tile is `tile` of all the groups' row tiles of BM rows, in group order (their count is at most
// group_row_tiles): false past the last. Every lane of a warp calls it, and each warp finds it alone (no shared
// memory, no barrier): a lane counts the tiles of a run of consecutive groups, a warp-wide sum places `tile` in
// one lane's run, and that lane walks its run again. With 128 groups a lane reads 4 groups' offsets.
template <int BM, int OFFSETS>
__device__ __forceinline__ bool find_group_tile(const void* offsets, int groups, long long total_rows, int tile,
                                                int& group, int& local) {
  const int run = (groups + 31) / 32, lane = (int)(mojo::thread_x() % 32);
  const int begin = lane * run < groups ? lane * run : groups, end = begin + run < groups ? begin + run : groups;
  auto tiles_of = [&](int g) {
    long long first;
    int rows;
    group_rows<OFFSETS>(offsets, g, total_rows, first, rows);
    return (rows + BM - 1) / BM;
  };
  unsigned long long mine = 0, all;
  for (int g = begin; g < end; ++g) mine += (unsigned long long)tiles_of(g);
  const unsigned long long through = mojo::warp_inclusive_sum(mine, all);
  unsigned long long found = 0;  // the owner's (group + 1) << 32 | local; zero on every other lane
  if (through - mine <= (unsigned long long)tile && (unsigned long long)tile < through) {
    int g = begin, before = (int)(through - mine);
    for (; before + tiles_of(g) <= tile; ++g) before += tiles_of(g);
    found = (unsigned long long)(g + 1) << 32 | (unsigned)(tile - before);
  }
  mojo::warp_inclusive_sum(found, found);
  group = (int)(found >> 32) - 1;
  local = (int)(unsigned)found;
  return found != 0;
}

// One problem's operands, already offset to this block's batch or group.
template <class TA, class TC> struct Problem {
  TC* c;
  const TA* a;
  const TA* b;
  const TC* bias;
  const TC* residual;
  float alpha, beta;
  int m, n, k;
  long long lda, ldb, ldc, ldr;
};

// act(alpha * acc + beta * c + bias) + residual for c[row, col] (inside C).
template <class TA, class TC, bool BETA, bool BIAS, int ACT, bool RESIDUAL>
__device__ __forceinline__ float output_value(const Problem<TA, TC>& p, int row, int col, float acc) {
  float v = p.alpha * acc;
  if constexpr (BETA) v += p.beta * mojo::to_float(p.c[(long long)row * p.ldc + col]);
  if constexpr (BIAS) v += mojo::to_float(p.bias[col]);
  v = mojo::activate<ACT>(v);
  if constexpr (RESIDUAL) v += mojo::to_float(p.residual[(long long)row * p.ldr + col]);
  return v;
}

// c[row, col] and c[row, col + 1] (inside C) from their accumulators, rounded
// once: one paired store when both are inside C and the pair is aligned, else each alone.
template <class TA, class TC, bool BETA, bool BIAS, int ACT, bool RESIDUAL>
__device__ __forceinline__ void store_pair_plain(const Problem<TA, TC>& p, int row, int col, float acc0, float acc1) {
  TC* out = p.c + (long long)row * p.ldc + col;
  const float v0 = output_value<TA, TC, BETA, BIAS, ACT, RESIDUAL>(p, row, col, acc0);
  if (col + 1 < p.n && reinterpret_cast<unsigned long long>(out) % (2 * sizeof(TC)) == 0) {
    const float pair[2] = {v0, output_value<TA, TC, BETA, BIAS, ACT, RESIDUAL>(p, row, col + 1, acc1)};
    mojo::store<TC, 2>(out, mojo::pack_floats<TC, 2>(pair));
    return;
  }
  *out = mojo::from_float<TC>(v0);
  if (col + 1 < p.n)
    out[1] = mojo::from_float<TC>(output_value<TA, TC, BETA, BIAS, ACT, RESIDUAL>(p, row, col + 1, acc1));
}

// What the tiles call for each pair of adjacent columns (col even) of a row:
// the plain epilogue, or with ACT >= mojo::kGated the pair as (gate, up):
// c[row, col / 2] = act(gate) * up.
template <class TA, class TC, bool BETA, bool BIAS, int ACT, bool RESIDUAL>
__device__ __forceinline__ void store_pair(const Problem<TA, TC>& p, int row, int col, float acc0, float acc1) {
  if (row >= p.m || col >= p.n) return;
  if constexpr (ACT >= mojo::kGated) {
    const float gated = mojo::activate<ACT - mojo::kGated>(p.alpha * acc0) * (p.alpha * acc1);
    p.c[(long long)row * p.ldc + col / 2] = mojo::from_float<TC>(gated);
  } else {
    store_pair_plain<TA, TC, BETA, BIAS, ACT, RESIDUAL>(p, row, col, acc0, acc1);
  }
}

// The BM x BN tile of C at (row0, n0) on tensor cores.
template <class TA, class TC, int BM, int BN, int BK, int WM, int WN, int STAGES, int KS, bool TRANS_A, bool TRANS_B,
          int VEC, bool BETA, bool BIAS, int ACT, bool RESIDUAL>
__device__ __forceinline__ void mma_tile(const Problem<TA, TC>& p, int row0, int n0) {
  constexpr int THREADS = WM * WN * 32;  // one K group
  constexpr int WTM = BM / WM, WTN = BN / WN;  // one warp's tile of C
  constexpr int MI = WTM / 16, NI = WTN / 8;   // its m16n8 mma tiles
  constexpr int K_STEP = 32 / (int)sizeof(TA);  // one mma's k: 16 (f16/bf16) or 8 (tf32)
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "warp tiles are multiples of 16x16, BK of 16");
  static_assert(STAGES >= 2, "a pipeline needs two stages");
  // A stage: the A tile ([BM][BK], or [BK][BM] when transposed), then B's.
  using TileA = Tile<TRANS_A ? BK : BM, TRANS_A ? BM : BK, sizeof(TA)>;
  using TileB = Tile<TRANS_B ? BN : BK, TRANS_B ? BK : BN, sizeof(TA)>;
  constexpr int STAGE_BYTES = TileA::BYTES + TileB::BYTES;
  static_assert(STAGE_BYTES == sm80_stage_bytes(BM, BN, BK, sizeof(TA)), "the layout sm80_smem sizes");
  static_assert(KS == 1 || (KS - 1) * BM * BN * 4 <= KS * STAGES * STAGE_BYTES, "the K groups' sums fit the rings");
  MOJO_DYNAMIC_SMEM(smem);
  const int group = (int)mojo::thread_x() / THREADS, tid = (int)mojo::thread_x() % THREADS;
  const int lane = tid % 32, warp = tid / 32, wm = warp / WN, wn = warp % WN;
  unsigned char* const ring = smem + group * STAGES * STAGE_BYTES;
  // Each group waits only for its own warps: groups may run different numbers of k tiles.
  auto sync_group = [&] {
    if constexpr (KS == 1) mojo::sync_block();
    else mojo::sync_warps(1 + group, THREADS);
  };

  auto load_stage = [&](int stage, int kt) {
    unsigned char* s = ring + stage * STAGE_BYTES;
    const int k0 = kt * BK;
    if constexpr (TRANS_A) load_tile<TA, BK, BM, THREADS, VEC>(s, p.a, p.lda, p.k, p.m, k0, row0, tid);
    else load_tile<TA, BM, BK, THREADS, VEC>(s, p.a, p.lda, p.m, p.k, row0, k0, tid);
    if constexpr (TRANS_B) load_tile<TA, BN, BK, THREADS, VEC>(s + TileA::BYTES, p.b, p.ldb, p.n, p.k, n0, k0, tid);
    else load_tile<TA, BK, BN, THREADS, VEC>(s + TileA::BYTES, p.b, p.ldb, p.k, p.n, k0, n0, tid);
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  // This group's k tiles: group, group + KS, ...; its i-th is in stage i % STAGES.
  const int k_tiles = ((p.k + BK - 1) / BK - group + KS - 1) / KS;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, group + s * KS);
    mojo::cp_async_commit();
  }
  for (int it = 0; it < k_tiles; ++it) {
    mojo::cp_async_wait<STAGES - 2>();  // tile it has landed
    sync_group();                       // ... for every warp, and stage it - 1 is free again
    const int next = it + STAGES - 1;
    if (next < k_tiles) load_stage(next % STAGES, group + next * KS);
    mojo::cp_async_commit();

    const unsigned char* sa = ring + (it % STAGES) * STAGE_BYTES;
    const unsigned char* sb = sa + TileA::BYTES;
#pragma unroll
    for (int kk = 0; kk < BK; kk += K_STEP) {
      unsigned fa[MI][4], fb[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i)
        load_fragment<TA, !TRANS_A, TRANS_A ? BK : BM, TRANS_A ? BM : BK>(sa, wm * WTM + i * 16, kk, lane, fa[i]);
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        unsigned r[4];
        load_fragment<TA, TRANS_B, TRANS_B ? BN : BK, TRANS_B ? BK : BN>(sb, wn * WTN + j * 8, kk, lane, r);
        fb[j][0] = r[0];
        fb[j][1] = r[2];
        fb[j + 1][0] = r[1];
        fb[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mojo::mma<TA>(acc[i][j], fa[i], fb[j]);
    }
  }
  mojo::cp_async_wait<0>();

  if constexpr (KS > 1) {
    // Groups 1.. leave their sums in shared memory (the rings are free once
    // every group is done), group 0 adds them and writes the tile.
    float* sums = reinterpret_cast<float*>(smem);
    float* const flat = &acc[0][0][0];
    constexpr int PER_THREAD = MI * NI * 4;
    mojo::sync_block();
    if (group > 0)
#pragma unroll
      for (int e = 0; e < PER_THREAD; ++e) sums[((group - 1) * PER_THREAD + e) * THREADS + tid] = flat[e];
    mojo::sync_block();
    if (group > 0) return;
    for (int g = 0; g < KS - 1; ++g)
#pragma unroll
      for (int e = 0; e < PER_THREAD; ++e) flat[e] += sums[(g * PER_THREAD + e) * THREADS + tid];
  }

  // Accumulator e of tile (i, j): row lane / 4 (+ 8 for e >= 2), column 2 * (lane % 4) + e % 2.
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair<TA, TC, BETA, BIAS, ACT, RESIDUAL>(p, row0 + wm * WTM + i * 16 + lane / 4 + h * 8,
                                                      n0 + wn * WTN + j * 8 + (lane % 4) * 2, acc[i][j][2 * h],
                                                      acc[i][j][2 * h + 1]);
}

// The BM x BN tile of C at (row0, n0) in exact fp32 (f32 inputs: no tensor
// cores, no tf32 rounding): each of the 256 threads owns a 4 x 4 block of
// outputs and reads BK-deep slices of A and B staged in shared memory.
template <class TC, int BM, int BN, int BK, bool TRANS_A, bool TRANS_B, bool BETA, bool BIAS, int ACT, bool RESIDUAL>
__device__ __forceinline__ void simt_tile(const Problem<float, TC>& p, int row0, int n0) {
  static_assert(BM == 64 && BN == 64, "the fp32 path is 16 x 16 threads of 4 x 4 outputs");
  constexpr int THREADS = 256;
  __shared__ float sa[BK][BM + 4], sb[BK][BN + 4];  // +4: rows start in different banks
  const int tid = (int)mojo::thread_x(), tx = tid % 16, ty = tid / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < p.k; k0 += BK) {
#pragma unroll
    for (int i = tid; i < BM * BK; i += THREADS) {
      const int mm = i % BM, kk = i / BM, row = row0 + mm, col = k0 + kk;
      const bool in = row < p.m && col < p.k;
      sa[kk][mm] = in ? p.a[TRANS_A ? (long long)col * p.lda + row : (long long)row * p.lda + col] : 0.f;
    }
#pragma unroll
    for (int i = tid; i < BN * BK; i += THREADS) {
      const int nn = i % BN, kk = i / BN, col = n0 + nn, krow = k0 + kk;
      const bool in = col < p.n && krow < p.k;
      sb[kk][nn] = in ? p.b[TRANS_B ? (long long)col * p.ldb + krow : (long long)krow * p.ldb + col] : 0.f;
    }
    mojo::sync_block();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float x[4], y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] = sa[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) y[j] = sb[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += x[i] * y[j];
    }
    mojo::sync_block();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; j += 2)
      store_pair<float, TC, BETA, BIAS, ACT, RESIDUAL>(p, row0 + ty * 4 + i, n0 + tx * 4 + j, acc[i][j], acc[i][j + 1]);
}

// A K split (SPLITS > 1): each of SPLITS blocks (sm_80 path) or work units
// (sm_90a) multiplies one slice of K, whole k tiles long, and stores its f32
// sums, with no epilogue, to its own [m, n] matrix of the workspace
// ([batches, SPLITS, m, n]); the reduce step below adds them in split order
// (the same sums whatever the blocks' timing) and applies the epilogue. The
// heuristic splits where the tiles alone leave SMs idle (gemm_tile.cpp).
template <int BK, int SPLITS>
__device__ __forceinline__ int split_length(int k) {
  return ((k + BK - 1) / BK + SPLITS - 1) / SPLITS * BK;
}
// The product step's output: C itself (WHOLE: K unsplit), or the splits' f32 sums. Written
// ProductOutput<SPLITS == 1>::type<TC>, with no comma for the entry macros to split at.
template <bool WHOLE> struct ProductOutput {
  template <class TC> using type = float;
};
template <> struct ProductOutput<true> {
  template <class TC> using type = TC;
};

// The reduce step: c[row, col] and c[row, col + 1] of every batch (col even) from the SPLITS sums in split order,
// through the same epilogue as an unsplit product. One thread a pair of columns.
template <class TC, int SPLITS, bool BETA, bool BIAS, int ACT, bool RESIDUAL>
__device__ __forceinline__ void reduce_splits(const float* __restrict__ partials, TC* c, const TC* __restrict__ bias,
                                              const TC* residual, float alpha, float beta, int m, int n,
                                              long long ldc, long long ldr, long long batch_c, int batches) {
  const long long pairs = (n + 1) / 2;
  const long long i = (long long)mojo::block_x() * mojo::block_dim_x() + mojo::thread_x();
  if (i >= pairs * m * batches) return;
  const int col = (int)(i % pairs) * 2, row = (int)(i / pairs % m);
  const long long batch = i / pairs / m, split_stride = (long long)m * n;
  const float* sums = partials + batch * SPLITS * split_stride + (long long)row * n + col;
  float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
  for (int s = 0; s < SPLITS; ++s) {
    acc0 += sums[s * split_stride];
    if (col + 1 < n) acc1 += sums[s * split_stride + 1];
  }
  const Problem<TC, TC> p{c + batch * batch_c, nullptr, nullptr, bias, residual, alpha, beta, m, n, 0, 0, 0, ldc, ldr};
  store_pair<TC, TC, BETA, BIAS, ACT, RESIDUAL>(p, row, col, acc0, acc1);
}

template <class T> constexpr bool is_f32 = false;
template <> constexpr bool is_f32<float> = true;

// Blocks an SM the kernel asks ptxas to fit (launch bounds). The exact f32
// tile (16 accumulators and 8 operands a thread, with its addresses) takes
// about 80 registers under NVVM, so three blocks of 256 fit an SM's 64K
// registers; saying so keeps a compiler whose schedule wants a few more
// (LLVM's: 90-96) from losing a block an SM. The tensor-core tiles size their
// registers themselves: one block.
template <class TA, bool TF32> constexpr int kMinBlocks = is_f32<TA> && !TF32 ? 3 : 1;

// TC, BETA, BIAS, ACT, RESIDUAL: the output and its epilogue (MOJO_GEMM_PRODUCT_OUTPUT's five).
template <class TA, class TC, bool BETA, bool BIAS, int ACT, bool RESIDUAL, int BM, int BN, int BK, int WM, int WN,
          int STAGES, int KS, int SWIZZLE, bool TRANS_A, bool TRANS_B, int VEC, int OFFSETS, bool TF32, int SPLITS,
          bool GROUP_K>
__device__ __forceinline__ void run(TC* c, const TA* __restrict__ a, const TA* __restrict__ b,
                                    const TC* __restrict__ bias, const TC* residual, float alpha, float beta, int m,
                                    int n, int k, long long lda, long long ldb, long long ldc, long long ldr,
                                    long long batch_a, long long batch_b, long long batch_c, int batches,
                                    const void* offsets, long long total_rows) {
  static_assert(KS == 1 || !(is_f32<TA> && !TF32), "the exact f32 path does not split K");
  static_assert(SPLITS == 1 || OFFSETS == 0, "groups do not split K");
  static_assert(!GROUP_K || (OFFSETS != 0 && TRANS_A && !TRANS_B), "groups of K rows: a [K, M] and b [K, N]");
  // group_gemm's grid is exact: its row tiles are all the groups' (group_row_tiles), in group order.
  constexpr bool ROW_GROUPS = OFFSETS != 0 && !GROUP_K;
  const int tiles_m = ROW_GROUPS ? group_row_tiles(total_rows, batches, BM) : (m + BM - 1) / BM;
  const int tiles_n = (n + BN - 1) / BN;
  int m0, n0;
  tile_origin<BM, BN, SWIZZLE>((int)mojo::block_x(), tiles_m, tiles_n, m0, n0);
  // grid.z: the batches, each SPLITS times over (a split of K each).
  long long batch = mojo::block_z() / SPLITS;
  if constexpr (SPLITS > 1) {
    const int split = (int)(mojo::block_z() % SPLITS), k0 = split * split_length<BK, SPLITS>(k);
    c += split * (long long)m * ldc;  // this split's sums
    if (k0 >= k) {
      k = 0;  // an empty split: its sums are zeros
    } else {
      a += TRANS_A ? k0 * lda : k0;
      b += TRANS_B ? k0 : k0 * ldb;
      k = k - k0 < split_length<BK, SPLITS>(k) ? k - k0 : split_length<BK, SPLITS>(k);
    }
  }
  if constexpr (GROUP_K) {
    // This group's rows are the K its product sums over (none: its C is zeros).
    long long first;
    group_rows<OFFSETS>(offsets, batch, total_rows, first, k);
    a += first * lda;
    b += first * ldb;
    c += batch * batch_c;
  } else if constexpr (ROW_GROUPS) {
    // This block's group and its row tile there; a block past the groups' last tile has no work.
    int group, local;
    if (!find_group_tile<BM, OFFSETS>(offsets, batches, total_rows, m0 / BM, group, local)) return;
    long long first;
    group_rows<OFFSETS>(offsets, group, total_rows, first, m);
    a += first * lda;
    c += first * ldc;
    batch = group;
    m0 = local * BM;
  } else {
    a += batch * batch_a;
    c += batch * batch_c;
  }
  if constexpr (!GROUP_K) b += batch * batch_b;
  const Problem<TA, TC> p{c, a, b, bias, residual, alpha, beta, m, n, k, lda, ldb, ldc, ldr};
  if constexpr (is_f32<TA> && !TF32)
    simt_tile<TC, BM, BN, BK, TRANS_A, TRANS_B, BETA, BIAS, ACT, RESIDUAL>(p, m0, n0);
  else
    mma_tile<TA, TC, BM, BN, BK, WM, WN, STAGES, KS, TRANS_A, TRANS_B, VEC, BETA, BIAS, ACT, RESIDUAL>(p, m0, n0);
}

}  // namespace mojo_gemm

// The sm_90a path; it uses Problem, store_pair, tile_origin and find_group_tile from above.
#include "gemm_sm90.cuh"
// linear at decode sizes (gemv.cuh); it uses Problem and output_value.
#include "gemv.cuh"

// Two entry points: _0 is the sm_80 kernel above, _1 the sm_90a one
// (gemm_sm90.cuh: the output side's arguments, then the TMA descriptors; BM / 64 consumer warpgroups).
// A K split's product step (SPLITS > 1) writes f32 sums and leaves the epilogue to the reduce step: its output
// type (MOJO_GEMM_OUT) is float there, and the epilogue's flags are off (MOJO_GEMM_PRODUCT_OUTPUT: the output
// type, BETA, BIAS, ACT and RESIDUAL as run and run_sm90 take them).
#define MOJO_GEMM_OUT(TC, SPLITS) mojo_gemm::ProductOutput<SPLITS == 1>::type<TC>
#define MOJO_GEMM_PRODUCT_OUTPUT(TC, SPLITS, BETA, BIAS, ACT, RESIDUAL)                                                \
  MOJO_GEMM_OUT(TC, SPLITS), (BETA) && SPLITS == 1, (BIAS) && SPLITS == 1, SPLITS == 1 ? (ACT) : 0,                    \
      (RESIDUAL) && SPLITS == 1
#define MOJO_GEMM_KERNEL_1(NAME, TA, TC, BM, BN, BK, WM, WN, STAGES, KS, SWIZZLE, SPLITS, TRANS_A, TRANS_B, VEC, BETA, \
                           BIAS, ACT, RESIDUAL, OFFSETS, TF32, GROUP_K)                                                \
  extern "C" __global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)                                                 \
      NAME(MOJO_ARG_PARAMS(MOJO_GEMM_ARGS, TA, MOJO_GEMM_OUT(TC, SPLITS)), const mojo::TensorMap,                      \
           const mojo::TensorMap, const mojo::TensorMap) {                                                             \
    static_assert(MOJO_ARG_COUNT(MOJO_GEMM_ARGS, TA, MOJO_GEMM_OUT(TC, SPLITS)) == 21, "the descriptors' indices");    \
    mojo::after_previous_kernels();                                                                                    \
    mojo_gemm::run_sm90<TA, MOJO_GEMM_PRODUCT_OUTPUT(TC, SPLITS, BETA, BIAS, ACT, RESIDUAL), BM, BN, BK, STAGES,       \
                        SWIZZLE, TRANS_A, !TRANS_B, OFFSETS, SPLITS, GROUP_K>(                                         \
        c, a, b, lda, ldb, bias, residual, alpha, beta, m, n, k, ldc, ldr, batch_c, batches, offsets, total_rows,      \
        MOJO_PARAM_ADDRESS(NAME, 21), MOJO_PARAM_ADDRESS(NAME, 22), MOJO_PARAM_ADDRESS(NAME, 23));                     \
  }
#define MOJO_GEMM_KERNEL_0(NAME, TA, TC, BM, BN, BK, WM, WN, STAGES, KS, SWIZZLE, SPLITS, TRANS_A, TRANS_B, VEC, BETA, \
                           BIAS, ACT, RESIDUAL, OFFSETS, TF32, GROUP_K)                                                \
  extern "C" __global__ void __launch_bounds__(WM * WN * KS * 32, mojo_gemm::kMinBlocks<TA, TF32>)                     \
      NAME(MOJO_ARG_PARAMS(MOJO_GEMM_ARGS, TA, MOJO_GEMM_OUT(TC, SPLITS))) {                                           \
    mojo::after_previous_kernels();                                                                                    \
    mojo_gemm::run<TA, MOJO_GEMM_PRODUCT_OUTPUT(TC, SPLITS, BETA, BIAS, ACT, RESIDUAL), BM, BN, BK, WM, WN, STAGES,    \
                   KS, SWIZZLE, TRANS_A, TRANS_B, VEC, OFFSETS, TF32, SPLITS, GROUP_K>(                                \
        c, a, b, bias, residual, alpha, beta, m, n, k, lda, ldb, ldc, ldr, batch_a, batch_b, batch_c, batches,         \
        offsets, total_rows);                                                                                          \
  }
// The reduce step of a K split (either path's): the output-side arguments, one thread a pair of columns.
#define MOJO_GEMM_REDUCE_KERNEL(NAME, TC, SPLITS, BETA, BIAS, ACT, RESIDUAL)                                           \
  extern "C" __global__ void __launch_bounds__(mojo_gemm::kReduceThreads)                                              \
      NAME(MOJO_ARG_PARAMS(MOJO_GEMM_OUTPUT_ARGS, TC)) {                                                               \
    mojo::after_previous_kernels();                                                                                    \
    mojo_gemm::reduce_splits<TC, SPLITS, BETA, BIAS, ACT, RESIDUAL>(partials, c, bias, residual, alpha, beta, m, n,    \
                                                                    ldc, ldr, batch_c, batches);                       \
  }
// linear's decode form (gemv.cuh): the sm_80 path's arguments, read as x = a, W = b.
#define MOJO_KERNEL_linear_gemv(NAME, P)                                                                         \
  extern "C" __global__ void __launch_bounds__(P::cols * P::ks * 32, mojo_gemm::kGemvBlocks<P::cols * P::ks * 32>) \
      NAME(MOJO_ARG_PARAMS(MOJO_GEMM_ARGS, P::dtype, P::dtype)) {                                              \
    mojo::after_previous_kernels();                                                                            \
    mojo_gemm::run_gemv<P::dtype, P::gemv, P::cols, P::ks, P::chunks, P::bias, P::act, P::residual>(            \
        c, a, b, bias, residual, m, n, k, lda, ldb, ldc, ldr);                                                 \
  }
// The entry macros, by the op's params; the host names the sm_90a form (param wgmma=1) *_sm90, linear's
// decode form (param gemv) *_gemv.
// MOJO_GEMM_ENTRY expands MOJO_GEMM_TILE into its nine arguments before the kernel macro counts them. A K split
// (param splits > 1) adds the *_reduce entry, its second step.
#define MOJO_GEMM_ENTRY(KERNEL, ...) KERNEL(__VA_ARGS__)
#define MOJO_GEMM_TILE(P) P::bm, P::bn, P::bk, P::wm, P::wn, P::stages, P::ks, P::swizzle, P::splits
#define MOJO_KERNEL_gemm(NAME, P)                                                                          \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_0, NAME, P::dtype, P::out, MOJO_GEMM_TILE(P), P::ta, P::tb, P::vec, P::beta, \
                  0, 0, 0, 0, P::tf32, 0)
#define MOJO_KERNEL_gemm_sm90(NAME, P)                                                                     \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_1, NAME, P::dtype, P::out, MOJO_GEMM_TILE(P), P::ta, P::tb, P::vec, P::beta, \
                  0, 0, 0, 0, P::tf32, 0)
#define MOJO_KERNEL_gemm_batched MOJO_KERNEL_gemm
#define MOJO_KERNEL_gemm_batched_sm90 MOJO_KERNEL_gemm_sm90
#define MOJO_KERNEL_linear(NAME, P)                                                                            \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_0, NAME, P::dtype, P::dtype, MOJO_GEMM_TILE(P), 0, 1, P::vec, 0, P::bias, \
                  P::act, P::residual, 0, P::tf32, 0)
#define MOJO_KERNEL_linear_sm90(NAME, P)                                                                       \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_1, NAME, P::dtype, P::dtype, MOJO_GEMM_TILE(P), 0, 1, P::vec, 0, P::bias, \
                  P::act, P::residual, 0, P::tf32, 0)
#define MOJO_KERNEL_group_gemm(NAME, P)                                                                           \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_0, NAME, P::dtype, P::dtype, MOJO_GEMM_TILE(P), 0, P::tb, P::vec, 0, 0, P::act, 0, \
                  P::offsets, P::tf32, 0)
#define MOJO_KERNEL_group_gemm_sm90(NAME, P)                                                                      \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_1, NAME, P::dtype, P::dtype, MOJO_GEMM_TILE(P), 0, P::tb, P::vec, 0, 0, P::act, 0, \
                  P::offsets, P::tf32, 0)
// The groups' weight gradients: a = grad_out stored [K, M] and b = x stored [K, N], each group's rows its K.
#define MOJO_KERNEL_group_gemm_weight_grad(NAME, P)                                                           \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_0, NAME, P::dtype, P::dtype, MOJO_GEMM_TILE(P), 1, 0, P::vec, 0, 0, 0, 0, \
                  P::offsets, P::tf32, 1)
#define MOJO_KERNEL_group_gemm_weight_grad_sm90(NAME, P)                                                      \
  MOJO_GEMM_ENTRY(MOJO_GEMM_KERNEL_1, NAME, P::dtype, P::dtype, MOJO_GEMM_TILE(P), 1, 0, P::vec, 0, 0, 0, 0, \
                  P::offsets, P::tf32, 1)
#define MOJO_KERNEL_gemm_reduce(NAME, P) MOJO_GEMM_REDUCE_KERNEL(NAME, P::out, P::splits, P::beta, 0, 0, 0)
#define MOJO_KERNEL_gemm_batched_reduce MOJO_KERNEL_gemm_reduce
#define MOJO_KERNEL_linear_reduce(NAME, P) \
  MOJO_GEMM_REDUCE_KERNEL(NAME, P::dtype, P::splits, 0, P::bias, P::act, P::residual)
