// Matrix multiplication, the sm_90a path (Hopper), included by gemm.cu for
// f16/bf16 inputs whose rows TMA can address, in any layout: each operand is
// K-major (A [M, K], B [N, K]) or MN-major (A [K, M] with TRANS_A, B [K, N]
// without TRANS_B), which wgmma reads transposed. gemm, gemm_batched, linear,
// group_gemm (the groups as batches of varying rows) and, with GROUP_K,
// group_gemm_weight_grad (a product a group, summing over its rows).
//
// Warp-specialised and persistent: each block loops over tiles of C, BM = 64
// or 128 rows by BN = any multiple of 16 up to 256 columns (of 64 when B is
// MN-major), the tile chosen to fill the SMs' last wave. With a K split
// (SPLITS > 1) the units are each tile's SPLITS slices of K, whose f32 sums go
// to the workspace for gemm.cu's reduce step.
// Warpgroup 0 is the producer: one thread issues TMA loads of the A (BM x 64)
// and B (BN x 64) tiles into a STAGES-deep ring of shared memory (a K-major
// tile in one box of 64 k x rows, an MN-major one in boxes of 64 m/n x 64 k,
// 8 KB apart), each stage
// guarded by a "full" mbarrier (the copies' bytes landed) and an "empty" one
// (every consumer thread is done reading it). Warpgroups 1..BM/64 are the
// consumers: each multiplies its 64 rows of the tile with wgmma straight from
// shared memory (128-byte swizzled, as TMA wrote it), keeps one k step of
// MMAs in flight while releasing the previous stage, and writes its 64 x BN
// outputs through the shared epilogue. The producer gives up registers
// (setmaxnreg) so that the consumers can hold 64 x BN fp32 accumulators.
//
// Kernel args: MOJO_GEMM_ARGS (gemm_args.h: the sm_80 path's; a, b, lda and
//   ldb are read only for the groups' last k tiles with GROUP_K), then
//   TensorMap a_map, TensorMap b_map, TensorMap a_tail_map: for group_gemm
//   (OFFSETS 4 or 8) the batches are the groups, the units are every group's
//   row tiles in group order (gemm.cu's group_row_tiles and find_group_tile),
//   a_map is x [total_rows, K] and b_map the weights; with GROUP_K a unit is a
//   tile of a group's C, its k the group's rows of a_map (grad_out [rows, M])
//   and b_map (x [rows, N]). The maps cover the operands as stored ([batches,
//   M, K] or [batches, K, M], ...) with boxes of 64 k x BM (BN) rows when
//   K-major and 64 x 64 when MN-major, 128-byte swizzled (the runtime encodes
//   them). a_tail_map is a_map with boxes of M % BM rows, for the last row
//   tile of a K-major A outside groups (a_map where unused).
//
// That last row tile loads only A's rows that exist. TMA fills a box's rows
// past the tensor's end with zeros, but slowly: on an H200 (2026-11-27) the
// linears at M 1, 16 and 32 took longer than at M 64 with the same 64 x 32
// (48) tiles, by 2.7-4.0 ns per zero-filled 128-byte row per k step (o_proj
// 24.4 / 19.5 / 13.3 us at M 16 / 32 / 64; down 69.0 / 54.1 / 32.4), and
// DeepGEMM reports the same (issue 35). The tile's other rows of shared
// memory keep what they held (the ring's previous tiles, or nothing): their
// products land in rows of the accumulators that are never stored, since each
// row of C depends on its own row of A alone.
// Geometry: 128 * (BM / 64 + 1) threads, grid.x = at most one block per SM,
//   sm90_smem(...).bytes of dynamic shared memory (gemm_args.h: the ring, its barriers, and slack to align the
//   ring to 1024 bytes).
#pragma once

#include "mojo_wgmma.cuh"

namespace mojo_gemm {

template <class T, class TC, bool BETA, bool BIAS, int ACT, bool RESIDUAL, int BM, int BN, int BK, int STAGES,
          int SWIZZLE, bool MN_A, bool MN_B, int OFFSETS, int SPLITS, bool GROUP_K>
__device__ __forceinline__ void run_sm90(TC* c, const T* a, const T* b, long long lda, long long ldb, const TC* bias,
                                         const TC* residual, float alpha, float beta, int m, int n, int k,
                                         long long ldc, long long ldr, long long batch_c, int batches,
                                         const void* offsets, long long total_rows, const mojo::TensorMap* a_map,
                                         const mojo::TensorMap* b_map, const mojo::TensorMap* a_tail_map) {
  constexpr int CONSUMERS = BM / 64;
  static_assert(BK * sizeof(T) == 128, "a k step is one 128-byte swizzled row");
  constexpr Sm90Smem L = sm90_smem(BM, BN, BK, STAGES);
  constexpr unsigned A_BYTES = L.a_bytes, B_BYTES = L.b_bytes, STAGE_BYTES = L.stage_bytes;
  constexpr unsigned CHUNK = 64 * BK * 2;  // 64 rows of a tile: one consumer's A, one MN-major box
  static_assert(BM % 64 == 0 && CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups of 64 rows");
  static_assert(BN % 16 == 0 && BN <= 256 && (!MN_B || BN % 64 == 0), "BN: 16 to 256, MN-major in boxes of 64");
  static_assert(sizeof(T) == 2, "wgmma here takes f16 or bf16");
  static_assert(OFFSETS == 0 || !MN_A || GROUP_K, "group_gemm's rows are K-major");
  static_assert(SPLITS == 1 || OFFSETS == 0, "groups do not split K");
  static_assert(!GROUP_K || (OFFSETS != 0 && MN_A && MN_B), "groups of K rows: a [K, M] and b [K, N]");
  constexpr bool ROW_GROUPS = OFFSETS != 0 && !GROUP_K;
  MOJO_DYNAMIC_SMEM(smem);
  // 128-byte swizzle repeats every 1024 bytes: the ring starts on such a boundary.
  const unsigned ring = (mojo::smem_address(smem) + 1023u) & ~1023u;
  const unsigned full = ring + L.full, empty = ring + L.empty;
  const int tid = (int)mojo::thread_x(), warpgroup = tid / 128;

  if (tid == 0) {
    mojo::tma_prefetch_descriptor(a_map);
    mojo::tma_prefetch_descriptor(b_map);
    mojo::tma_prefetch_descriptor(a_tail_map);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mojo::mbarrier_init(full + 8 * s, 1);
      mojo::mbarrier_init(empty + 8 * s, CONSUMERS * 128);
    }
    mojo::fence_barrier_init();
  }
  mojo::sync_block();

  // group_gemm's row tiles are all the groups' in group order (group_row_tiles, as on the sm_80 path).
  const int tiles_m = ROW_GROUPS ? group_row_tiles(total_rows, batches, BM) : (m + BM - 1) / BM;
  const int tiles_n = (n + BN - 1) / BN, per_batch = tiles_m * tiles_n;
  // Work units: the tiles of C, each SPLITS times over with K split (the split's k tiles [k_first, k_end)).
  const int k_tiles = (k + BK - 1) / BK, split_tiles = (k_tiles + SPLITS - 1) / SPLITS;
  const int tiles = per_batch * (ROW_GROUPS ? 1 : batches) * SPLITS;
  // Unit t: its tile's origin, its batch (or group), the group's first row and its rows, and its k tiles. A
  // group_gemm unit's group is found by a warp (find_group_tile); past the groups' last tile a unit has no rows.
  // With GROUP_K the group's rows [first, first + k_rows) are the unit's K.
  // Producer and consumers walk the same units, hence the same stages.
  struct Where {
    int m0, n0, batch, rows, split, k_first, k_end, k_rows;
    long long first;
  };
  auto where = [&](int unit) {
    const int t = unit / SPLITS, split = unit % SPLITS;
    const int k_first = split * split_tiles, k_end = k_first + split_tiles < k_tiles ? k_first + split_tiles : k_tiles;
    Where w{0, 0, t / per_batch, m, split, k_first, k_end, k, 0};
    tile_origin<BM, BN, SWIZZLE>(t % per_batch, tiles_m, tiles_n, w.m0, w.n0);
    if constexpr (ROW_GROUPS) {
      int local;
      if (find_group_tile<BM, OFFSETS>(offsets, batches, total_rows, w.m0 / BM, w.batch, local)) {
        group_rows<OFFSETS>(offsets, w.batch, total_rows, w.first, w.rows);
        w.m0 = local * BM;
      } else {
        w.rows = 0;  // no work
      }
    } else if constexpr (GROUP_K) {
      group_rows<OFFSETS>(offsets, w.batch, total_rows, w.first, w.k_rows);
      w.k_end = (w.k_rows + BK - 1) / BK;  // none: the group's C is zeros
    }
    return w;
  };
  const int grid = (int)mojo::grid_dim_x();
  // GROUP_K: a group's last k tile, whose TMA boxes would read the next group's rows (or rows in no group, whose
  // NaN would reach the sums even times zero), is copied by the whole producer warpgroup with cp.async: its rows
  // of A ([K, M]: BK rows of BM) and B ([K, N]: BK rows of BN) as TMA lays them out (MN-major boxes of 64 columns),
  // zeros past the group's rows. Each thread waits for its copies and makes them visible to wgmma (the async proxy
  // reads what the generic proxy wrote); when all have, thread 0 arrives at the stage's "full" barrier.
  auto copy_last_k_tile = [&](const Where& w, int kt, unsigned dst, unsigned bar) MOJO_INLINE_LAMBDA {
    constexpr int A_CHUNKS = BK * BM / 8, CHUNKS = A_CHUNKS + BK * BN / 8;  // 16-byte pieces
    const int rows = w.k_rows - kt * BK;
    const long long row0 = w.first + (long long)kt * BK;
#pragma unroll 1  // within the producer's 40 registers
    for (int i = tid; i < CHUNKS; i += 128) {
      const bool in_a = i < A_CHUNKS;
      const int piece = in_a ? i : i - A_CHUNKS, width = in_a ? BM : BN;
      const int r = piece / (width / 8), col = piece % (width / 8) * 8, global_col = (in_a ? w.m0 : w.n0) + col;
      const int left = (in_a ? m : n) - global_col, valid = r < rows && left > 0 ? (left < 8 ? left : 8) : 0;
      const T* const src = !valid ? a : in_a ? a + (row0 + r) * lda + global_col : b + (row0 + r) * ldb + global_col;
      mojo::cp_async_16(dst + (in_a ? 0u : A_BYTES) + mojo::swizzled<BK>(r, col), src, valid * 2);
    }
    mojo::cp_async_commit();
    mojo::cp_async_wait<0>();
    mojo::fence_proxy_async();
    mojo::sync_warps(1, 128);  // the producer warpgroup's named barrier (0 is the block's)
    if (tid == 0) mojo::mbarrier_arrive(bar);
  };
  if (warpgroup == 0) {
    mojo::setmaxnreg_dec<40>();
    // One thread issues the loads; with row groups its whole warp walks the units (find_group_tile takes a warp);
    // with K groups the whole warpgroup does, and waits for every stage in turn as thread 0 does (a thread that
    // skipped to a later tile would wait for a phase two or more ahead, which a parity wait cannot tell from one
    // that completed before), for the groups' last k tiles.
    if (!GROUP_K && (ROW_GROUPS ? tid >= 32 : tid != 0)) return;
    int stage = 0;
    unsigned phase = 0;
    for (int t = (int)mojo::block_x(); t < tiles; t += grid) {
      const Where w = where(t);
      if (w.m0 >= w.rows || (!GROUP_K && tid != 0)) continue;
      // Row groups: rows of x from the group's first (past its end they belong to the next group: computed, not
      // stored). K groups: k from the group's first row.
      const int a_row = (ROW_GROUPS ? (int)w.first : 0) + w.m0, a_batch = OFFSETS != 0 ? 0 : w.batch;
      const int k_row = GROUP_K ? (int)w.first : 0, b_batch = GROUP_K ? 0 : w.batch;
      // The last row tile of a K-major A: its rows alone (above).
      const bool a_tail = !MN_A && OFFSETS == 0 && w.m0 + BM > m;
      const mojo::TensorMap* const a_source = a_tail ? a_tail_map : a_map;
      const unsigned stage_bytes = a_tail ? unsigned(m - w.m0) * BK * 2 + B_BYTES : STAGE_BYTES;
      for (int kt = w.k_first; kt < w.k_end; ++kt) {
        mojo::mbarrier_wait(empty + 8 * stage, phase ^ 1);  // the consumers released this stage
        const unsigned dst = ring + stage * STAGE_BYTES, bar = full + 8 * stage;
        if (GROUP_K && (kt + 1) * BK > w.k_rows) {
          copy_last_k_tile(w, kt, dst, bar);
        } else if (tid == 0) {
          mojo::mbarrier_arrive_expect_tx(bar, stage_bytes);  // whole boxes, zero-filled past the edges
          if constexpr (MN_A)
#pragma unroll
            for (int j = 0; j < BM / 64; ++j)
              mojo::tma_load_3d(dst + j * CHUNK, a_map, bar, a_row + 64 * j, k_row + kt * BK, a_batch);
          else
            mojo::tma_load_3d(dst, a_source, bar, kt * BK, a_row, a_batch);
          if constexpr (MN_B)
#pragma unroll
            for (int j = 0; j < BN / 64; ++j)
              mojo::tma_load_3d(dst + A_BYTES + j * CHUNK, b_map, bar, w.n0 + 64 * j, k_row + kt * BK, b_batch);
          else
            mojo::tma_load_3d(dst + A_BYTES, b_map, bar, kt * BK, w.n0, b_batch);
        }
        if (++stage == STAGES) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  mojo::setmaxnreg_inc<232>();
  const int consumer = warpgroup - 1, lane = tid % 32, warp = (tid % 128) / 32;
  int stage = 0;
  unsigned phase = 0;
  float acc[BN / 2];
  for (int t = (int)mojo::block_x(); t < tiles; t += grid) {
    const Where w = where(t);
    if (w.m0 >= w.rows) continue;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
    int previous = -1;  // the stage whose MMAs may still be running
    for (int kt = w.k_first; kt < w.k_end; ++kt) {
      mojo::mbarrier_wait(full + 8 * stage, phase);
      const unsigned a_tile = ring + stage * STAGE_BYTES + consumer * CHUNK;
      const unsigned b_tile = ring + stage * STAGE_BYTES + A_BYTES;
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) mojo::wgmma_fence_operand(acc[i]);
      mojo::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // k16 steps: 32 bytes along a K-major row, 16 rows of 128 bytes in an MN-major tile.
        const unsigned long long a_desc = MN_A ? mojo::wgmma_descriptor(a_tile + kk * 2048, CHUNK)
                                               : mojo::wgmma_descriptor(a_tile + kk * 32);
        const unsigned long long b_desc = MN_B ? mojo::wgmma_descriptor(b_tile + kk * 2048, CHUNK)
                                               : mojo::wgmma_descriptor(b_tile + kk * 32);
        mojo::wgmma<T, BN, MN_A, MN_B>(acc, a_desc, b_desc, 1);
      }
      mojo::wgmma_commit();
      mojo::wgmma_wait<1>();  // the previous k step's MMAs are done: release its stage
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) mojo::wgmma_fence_operand(acc[i]);
      if (previous >= 0) mojo::mbarrier_arrive(empty + 8 * previous);
      previous = stage;
      if (++stage == STAGES) stage = 0, phase ^= 1;
    }
    mojo::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) mojo::wgmma_fence_operand(acc[i]);
    if (previous >= 0) mojo::mbarrier_arrive(empty + 8 * previous);

    // A split's sums go to its own [m, n] of the batch's (gemm.cu's split_length says how they meet).
    TC* const out =
        c + (ROW_GROUPS ? w.first * ldc : (long long)w.batch * batch_c + w.split * (long long)m * ldc);
    const Problem<T, TC> p{out, nullptr, nullptr, bias, residual, alpha, beta, w.rows, n, k, 0, 0, ldc, ldr};
    const int row = w.m0 + consumer * 64 + warp * 16 + lane / 4, col = w.n0 + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair<T, TC, BETA, BIAS, ACT, RESIDUAL>(p, row + h * 8, col + j * 8, acc[4 * j + 2 * h],
                                                     acc[4 * j + 2 * h + 1]);
  }
}

}  // namespace mojo_gemm
