// The runtime arguments of attention.cu's kernels (sdpa, paged_prefill_gqa,
// paged_decode_gqa, the split plan's merge, and the sm_90a prefill of
// attention_sm90.cuh, which takes the TMA descriptors of k and v after
// them), written once (mojo_args.h): one list for all, the kernels'
// parameters and the struct the op (src/ops/attention.cpp) fills.
#pragma once

#include "mojo_args.h"

#define MOJO_ATTENTION_ARGS(T, ARG)                                                                               \
  ARG(T* __restrict__, out) /* [q_tokens, heads, D], contiguous */                                                \
  ARG(const T* __restrict__, q)                                                                                   \
  ARG(const T* __restrict__, k) /* sdpa: [kv_tokens, kv_heads, D]; paged: the cache [pages, page, kv_heads, D] */ \
  ARG(const T* __restrict__, v)                                                                                   \
  ARG(const int*, cu_q) /* [batch + 1] cumulative query tokens, or null */                                        \
  ARG(const int*, kv_info) /* paged: context lengths [batch]; else cumulative key tokens [batch + 1] or null */   \
  ARG(const int*, block_table) /* paged: [batch, max_blocks]; else null */                                        \
  ARG(const float* __restrict__, sinks) /* [heads], or null */                                                    \
  ARG(float* __restrict__, lse) /* [heads, q_tokens], or null */                                                  \
  ARG(float* __restrict__, workspace) /* split plans: the splits' O and lse; else unused */                       \
  ARG(long long, q_stride) /* elements per token (k, v: the contiguous path only), as the next two */             \
  ARG(long long, k_stride)                                                                                        \
  ARG(long long, v_stride)                                                                                        \
  ARG(int, batch)                                                                                                 \
  ARG(int, q_tokens)                                                                                              \
  ARG(int, kv_tokens) /* paged: the number of pages */                                                            \
  ARG(int, heads)                                                                                                 \
  ARG(int, kv_heads)                                                                                              \
  ARG(int, max_blocks)                                                                                            \
  ARG(int, q_len) /* > 0: that many query tokens per sequence (decode), else 0 */                                 \
  ARG(int, chunk) /* keys per split */                                                                            \
  ARG(float, scale)                                                                                               \
  ARG(float, softcap) /* 0: none */                                                                               \
  ARG(int, window) /* left window size; < 0: none */                                                             \
  ARG(int, section_heads) /* KV heads whose row tiles go out together (place_block); 1: head by head */

namespace mojo_attention {
// The sm_80 template's dynamic shared memory (attention.cu's run), for bm query rows, head_dim in dp columns
// (a power of two), wn groups of warps and rings of `stages` key tiles of bn: in the key loop the Q tile (16-bit)
// then each group's ring of K and V tiles; after it, over the same bytes, the f32 O tile, each group's row
// maxima and sums, and the block's. `bytes`, the larger of the two, is what a block asks for
// (AttentionOp::max_dynamic_smem).
struct Sm80Smem {
  unsigned q_bytes, stage_bytes, loop, merge, bytes;
};
MOJO_HOST_DEVICE constexpr Sm80Smem sm80_smem(int bm, int dp, int wn, int stages, int bn) {
  const unsigned q_bytes = unsigned(bm * dp) * 2, stage_bytes = 2 * unsigned(bn * dp) * 2;
  const unsigned loop = q_bytes + unsigned(wn * stages) * stage_bytes;
  const unsigned merge = unsigned(bm * dp) * 4 + unsigned(2 * wn + 2) * unsigned(bm) * 4;
  return {q_bytes, stage_bytes, loop, merge, loop > merge ? loop : merge};
}

// The sm_90a prefill's dynamic shared memory (attention_sm90.cuh), for query tiles of bm rows (a consumer
// warpgroup each 64), head_dim in dp columns (whole 64-column sub-tiles), key tiles of bn and a ring of `stages`:
// byte offsets from its 1024-aligned base of the consumers' Q tiles (q_bytes each), the K/V ring (kv_bytes a tensor a stage), the "full" and "empty" mbarriers and, paged,
// a gathered tile's cache rows and, persistent, the two slots through which the producer learns its next row
// tiles (kSm90TileSlotsBytes, their barriers included); `bytes` is what a block asks for, 1024 bytes of slack to
// align the base included. One formula for the kernel's layout and the op's launch
// (AttentionOp::max_dynamic_smem).
struct Sm90Smem {
  unsigned q_bytes, kv_bytes, ring, full, empty, rows, tiles, bytes;
};
constexpr unsigned kSm90TileSlotsBytes = 2 * 64 + 4 * 8;
MOJO_HOST_DEVICE constexpr Sm90Smem sm90_smem(int bm, int dp, int bn, int stages, bool paged, bool persistent) {
  const unsigned q_bytes = 64u * unsigned(dp) * 2, kv_bytes = unsigned(bn * dp) * 2;
  const unsigned ring = unsigned(bm / 64) * q_bytes, full = ring + unsigned(stages) * 2 * kv_bytes;
  const unsigned empty = full + 8 * unsigned(stages), rows = empty + 8 * unsigned(stages);
  const unsigned tiles = rows + (paged ? 8 * unsigned(bn) : 0);
  return {q_bytes, kv_bytes, ring, full, empty, rows, tiles, 1024 + tiles + (persistent ? kSm90TileSlotsBytes : 0)};
}

// A prefill's row tiles of a KV head (grid.x, or with a persistent grid the count its blocks loop over): bm packed
// query rows (q_tokens x group) each, and a part tile more for each sequence of a varlen batch.
MOJO_HOST_DEVICE constexpr int prefill_row_tiles(long long q_tokens, int group, int bm, int batch, bool varlen) {
  return int((q_tokens * group + bm - 1) / bm) + (varlen ? batch : 0);
}

template <class T>
struct Args {
  MOJO_ATTENTION_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const Args<T>& a, F f) {
  MOJO_ATTENTION_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_attention
