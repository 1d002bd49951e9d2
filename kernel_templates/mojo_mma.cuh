// mojo_mma.cuh: tensor-core building blocks for sm_80 and later, on inline
// PTX so NVRTC and clang compile them alike (no SDK header): shared-memory
// cp.async copies, ldmatrix fragment loads and the m16n8k16
// mma.sync with fp32 accumulation, and the swizzled shared-memory tiles
// they read. Templates that multiply matrices include it.
#pragma once

#include "mojo_prelude.cuh"

namespace mojo {

#if defined(MOJO_CPU)
__device__ __forceinline__ void sync_warps(int id, int threads) { cpu::api().barrier(id, threads); }
__device__ __forceinline__ void arrive_warps(int id, int threads) { cpu::api().barrier_arrive(id, threads); }
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
  cpu::api().cp_async(dst, src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { cpu::api().cp_async_commit(); }
template <int N> __device__ __forceinline__ void cp_async_wait() { cpu::api().cp_async_wait(N); }
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned address) { cpu::api().ldmatrix_x4(r, address, 0); }
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned address) {
  cpu::api().ldmatrix_x4(r, address, 1);
}
__device__ __forceinline__ unsigned to_tf32(unsigned f32_bits) { return cpu::f32_to_tf32(f32_bits); }
template <class T> __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  cpu::api().mma(d, a, b, sizeof(T) == 4 ? 0 : (std::is_same_v<T, f16> ? 1 : 2));
}
#else

// A barrier for the `threads` threads (a multiple of 32) that use barrier
// `id` (1..15; 0 is __syncthreads'): lets groups of warps in one block
// synchronise independently.
__device__ __forceinline__ void sync_warps(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Counts the calling warp at barrier `id` of `threads` and goes on: the threads that sync at it wait for these
// arrivals too (a producer's signal to a consumer that waits at bar.sync).
__device__ __forceinline__ void arrive_warps(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// 16 bytes global -> shared without passing through registers; only the
// first `src_bytes` are read, the rest of the 16 are zero-filled (tile edges).
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices from shared memory; lane i gives the address of row
// i % 8 of matrix i / 8. Each lane gets, per matrix, the pair at row lane / 4,
// columns 2 * (lane % 4) + {0, 1} (.trans: of the transposed matrix).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// An f32 rounded to tf32 (10 mantissa bits, to nearest), in a 32-bit register.
__device__ __forceinline__ unsigned to_tf32(unsigned f32_bits) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(bits_to_float(f32_bits)));
  return r;
}

// d += a * b for one tile: 16x8x16 for f16/bf16 (a row-major 16x16 in 4
// registers of two elements, b column-major 16x8 in 2), 16x8x8 for tf32
// (float: one element per register); d is 16x8 in fp32 (4 per lane: rows
// lane/4 and lane/4 + 8, columns 2 * (lane % 4) + {0, 1}).
template <class T> __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
template <> __device__ __forceinline__ void mma<float>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma<f16>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma<bf16>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#endif  // MOJO_CPU

// A tile of OUTER rows x INNER elements of ELEM bytes in shared memory,
// stored as 16-byte chunks whose index is XOR-swizzled by the row so that
// the 8 rows one ldmatrix reads (and the chunks cp.async writes) fall in
// distinct banks.
template <int OUTER, int INNER, int ELEM> struct Tile {
  static constexpr int PER_CHUNK = 16 / ELEM;        // elements per chunk
  static constexpr int CHUNKS = INNER / PER_CHUNK;   // per row; a power of two
  static constexpr int ROWS_PER_LINE = CHUNKS >= 8 ? 1 : 8 / CHUNKS;
  static constexpr int SWIZZLE = CHUNKS >= 8 ? 8 : CHUNKS;
  static constexpr int BYTES = OUTER * INNER * ELEM;
  // Byte offset of element (row, col).
  static __device__ __forceinline__ int offset(int row, int col) {
    const int chunk = (col / PER_CHUNK) ^ ((row / ROWS_PER_LINE) % SWIZZLE);
    return (row * INNER + chunk * PER_CHUNK + col % PER_CHUNK) * ELEM;
  }
};

// The four 8-row matrices of a 16 (x) x K_STEP (k) block at (x0, k0), x
// being M for A and N for B, K_STEP = 16 for 16-bit elements and 8 for tf32:
// r0 = (x 0-7, k lo), r1 = (x 8-15, k lo), r2 = (x 0-7, k hi), r3 = (x 8-15, k hi);
// each lane holds row lane / 4 and k pair (16-bit) or k word (tf32) lane % 4.
// K_INNER: the tile is [x][k]; else [k][x] (transposed on load).
template <class T, bool K_INNER, int OUTER, int INNER>
__device__ __forceinline__ void load_fragment(const unsigned char* tile, int x0, int k0, int lane, unsigned (&r)[4]) {
  using L = Tile<OUTER, INNER, sizeof(T)>;
  constexpr int HALF = L::PER_CHUNK;  // k of one 8 x 16-byte matrix: 8 halves or 4 words
  if constexpr (K_INNER) {
    const int matrix = lane / 8, row = lane % 8;
    const int x = x0 + row + (matrix % 2) * 8, k = k0 + (matrix / 2) * HALF;
    ldmatrix_x4(r, smem_address(tile) + unsigned(L::offset(x, k)));
  } else if constexpr (sizeof(T) == 2) {
    const int matrix = lane / 8, row = lane % 8;
    const int k = k0 + row + (matrix / 2) * 8, x = x0 + (matrix % 2) * 8;
    ldmatrix_x4_trans(r, smem_address(tile) + unsigned(L::offset(k, x)));
  } else {
    // 32-bit words: ldmatrix cannot transpose them, so each lane reads its four.
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      r[i] = *reinterpret_cast<const unsigned*>(tile + L::offset(k0 + t + (i / 2) * 4, x0 + g + (i % 2) * 8));
  }
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = to_tf32(r[i]);
  }
}

}  // namespace mojo
