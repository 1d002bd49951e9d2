// linear at decode sizes, included by gemm.cu: out = act(x * W^T + bias) + residual for at most ROWS (1, 2
// or 4) rows of x, on the CUDA cores with fp32 sums. At these sizes a linear is a read of the weights and
// nothing else (Qwen3-8B's o_proj: 32 MiB against 16 KiB of x and out), so the kernel is built around
// keeping many weight bytes in flight from many warps, not around tensor cores: a 16-row mma tile is 15/16
// padding at M = 1, and its few warps an SM meet at a barrier every k step (cuBLAS answers M = 1 with gemv
// kernels too).
//
// Each warp owns one output column n, that is one row of W, split over KS warps: the row's 16-byte chunks
// go to the lanes of the KS warps in turn (warp g of the column takes chunks 32 g + lane, 32 (g + KS) +
// lane, ...), so each warp reads 512 contiguous bytes a step, and each lane issues CHUNKS loads before
// its first multiply. x is read at the same chunks (every warp of the grid reads the same rows of x:
// L1 and L2 hits). The lanes' sums meet by shuffles, the KS warps' in shared memory, added in a fixed order
// (the result is the same on every run).
//
// Params: gemv (ROWS), cols (output columns a block: COLS warps along N), ks (KS warps along K), chunks
// (CHUNKS); dtype, bias, act, residual as the tiles (gemm.cu).
// Kernel args: MOJO_GEMM_ARGS (gemm_args.h) as linear's sm_80 tiles: a = x [m, k], b = W [n, k], rows
// 16-byte aligned and k a whole number of chunks (the host takes this path only then).
// Geometry: COLS * KS * 32 threads, grid.x = ceil(n / COLS); no dynamic shared memory.
#pragma once

namespace mojo_gemm {

// Blocks an SM the kernel asks ptxas to fit: half of an SM's 2048 threads, so at most 64 registers a thread.
// A lane's CHUNKS loads (32 registers at 8) and its sums take 55-64 under either compiler.
template <int THREADS> constexpr int kGemvBlocks = 1024 / THREADS;

template <class T, int ROWS, int COLS, int KS, int CHUNKS, bool BIAS, int ACT, bool RESIDUAL>
__device__ __forceinline__ void run_gemv(T* c, const T* __restrict__ x, const T* __restrict__ w,
                                         const T* __restrict__ bias, const T* residual, int m, int n, int k,
                                         long long ldx, long long ldw, long long ldc, long long ldr) {
  constexpr int E = 16 / int(sizeof(T));  // elements a chunk
  static_assert(ACT < mojo::kGated, "linear's epilogue: gated pairs are group_gemm's");
  static_assert(ROWS >= 1 && ROWS <= 4 && KS >= 1 && COLS >= 1, "a few rows of x; whole warps");
  __shared__ float partial[KS > 1 ? KS - 1 : 1][COLS][ROWS];  // the sums of the column's warps but the first
  const int tid = int(mojo::thread_x()), lane = tid % 32, warp = tid / 32;
  const int slot = warp % COLS, group = warp / COLS, col = int(mojo::block_x()) * COLS + slot;
  const int chunks = k / E;
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
  if (col < n) {
    const T* const row = w + (long long)col * ldw;
    for (int first = group * 32 + lane; first < chunks; first += CHUNKS * KS * 32) {
      // Each address is a row's start + this offset + a constant: opaque, so that LLVM's loop strength
      // reduction does not keep a 64-bit pointer per load (ROWS x CHUNKS of them) live across the loop.
      const long long at = mojo::opaque((long long)first * E);
      mojo::Pack<T, E> weights[CHUNKS];
#pragma unroll
      for (int u = 0; u < CHUNKS; ++u)  // every load before the first multiply: CHUNKS x 16 bytes in flight
        if (first + u * KS * 32 < chunks) weights[u] = mojo::load<T, E>(row + at + u * KS * 32 * E);
#pragma unroll
      for (int u = 0; u < CHUNKS; ++u) {
        if (first + u * KS * 32 >= chunks) break;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if (r >= m) break;
          const mojo::Pack<T, E> xs = mojo::load<T, E>(x + r * ldx + at + u * KS * 32 * E);
#pragma unroll
          for (int e = 0; e < E; ++e) acc[r] += mojo::to_float(weights[u].v[e]) * mojo::to_float(xs.v[e]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = mojo::group_sum<32>(acc[r]);
  if constexpr (KS > 1) {
    if (group > 0 && lane == 0)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) partial[group - 1][slot][r] = acc[r];
    mojo::sync_block();
    if (group > 0) return;
#pragma unroll
    for (int g = 0; g < KS - 1; ++g)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) acc[r] += partial[g][slot][r];
  }
  if (col >= n) return;
  const Problem<T, T> p{c, x, w, bias, residual, 1.f, 0.f, m, n, k, ldx, ldw, ldc, ldr};
#pragma unroll
  for (int r = 0; r < ROWS; ++r)  // lane r stores row r
    if (lane == r && r < m)
      c[r * ldc + col] = mojo::from_float<T>(output_value<T, T, false, BIAS, ACT, RESIDUAL>(p, r, col, acc[r]));
}

}  // namespace mojo_gemm
