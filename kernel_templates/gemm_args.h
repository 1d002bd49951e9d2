// The runtime arguments of gemm.cu's kernels (gemm, gemm_batched, linear,
// group_gemm, and the products of moe_mlp and cross_entropy), written once
// (mojo_args.h): the kernels' parameters and the structs the host
// (push_kernel_args, src/ops/gemm_tile.cpp) fills. Every kernel takes the
// output side, MOJO_GEMM_OUTPUT_ARGS: the sm_80 entry (MOJO_GEMM_KERNEL_0)
// after its inputs (MOJO_GEMM_ARGS), the sm_90a one (MOJO_GEMM_KERNEL_1)
// before the TMA descriptors of A, B and A's last row tile, and a K split's
// reduce step alone.
#pragma once

#include "mojo_args.h"

// The sm_80 path's inputs, TA their storage.
#define MOJO_GEMM_INPUT_ARGS(TA, ARG)                                                                           \
  ARG(const TA* __restrict__, a)                                                                                \
  ARG(const TA* __restrict__, b)                                                                                \
  ARG(long long, lda) /* row strides, in elements, as ldc and ldr */                                            \
  ARG(long long, ldb)                                                                                           \
  ARG(long long, batch_a) /* batch strides (grid.z), in elements, as batch_c; group_gemm: b's per group */      \
  ARG(long long, batch_b)

// The output side, TC its storage. The sm_90a path reads A and B through its
// TMA descriptors; the reduce step of a K split (either path) reads the
// splits' f32 sums, [batches, splits, m, n], from `partials`.
#define MOJO_GEMM_OUTPUT_ARGS(TC, ARG)                                                                          \
  ARG(TC*, c)                                                                                                   \
  ARG(const TC* __restrict__, bias) /* [n], added by linear's epilogue; else null */                            \
  ARG(const TC*, residual) /* [m, n] (row stride ldr), added by linear's epilogue; else null */                 \
  ARG(float, alpha)                                                                                             \
  ARG(float, beta)                                                                                              \
  ARG(int, m) /* group_gemm: the most rows a group may have */                                                  \
  ARG(int, n)                                                                                                   \
  ARG(int, k)                                                                                                   \
  ARG(long long, ldc)                                                                                           \
  ARG(long long, ldr)                                                                                           \
  ARG(long long, batch_c)                                                                                       \
  ARG(int, batches) /* the batches (the sm_80 path: grid.z), or group_gemm's groups */                          \
  ARG(const void*, offsets) /* group_gemm: int32 or int64 [groups + 1]; else null */                            \
  ARG(long long, total_rows) /* group_gemm: the rows of x and c, which the offsets are clamped to */            \
  ARG(const float*, partials) /* the reduce step: the K splits' sums; else null */

// The sm_80 path's parameters: its inputs, then the output side.
#define MOJO_GEMM_ARGS(TA, TC, ARG) MOJO_GEMM_INPUT_ARGS(TA, ARG) MOJO_GEMM_OUTPUT_ARGS(TC, ARG)

namespace mojo_gemm {
// The sm_80 tensor-core kernel's dynamic shared memory (gemm.cu's mma_tile): each of its ks K groups' ring of
// `stages` stages, each an A tile and a B tile of bk along K, of elements of element_bytes (the K groups' sums
// reuse those bytes after the loop). One formula for the kernel's layout and the op's launch
// (TileConfig::smem_bytes).
MOJO_HOST_DEVICE constexpr unsigned sm80_stage_bytes(int bm, int bn, int bk, int element_bytes) {
  return unsigned((bm + bn) * bk * element_bytes);
}
MOJO_HOST_DEVICE constexpr unsigned sm80_smem(int bm, int bn, int bk, int stages, int ks, int element_bytes) {
  return unsigned(ks * stages) * sm80_stage_bytes(bm, bn, bk, element_bytes);
}

// The sm_90a kernel's dynamic shared memory (gemm_sm90.cuh): a ring of `stages` stages, each an A tile (bm x bk)
// then a B tile (bn x bk) of 16-bit elements, then a "full" and an "empty" mbarrier a stage, as byte offsets from
// the ring's 1024-aligned start; `bytes` is what a block asks for, 1024 bytes of slack to align the ring included.
// One formula for the kernel's layout and the op's launch (TileConfig::smem_bytes).
struct Sm90Smem {
  unsigned a_bytes, b_bytes, stage_bytes, full, empty, bytes;
};
MOJO_HOST_DEVICE constexpr Sm90Smem sm90_smem(int bm, int bn, int bk, int stages) {
  const unsigned a_bytes = unsigned(bm * bk) * 2, b_bytes = unsigned(bn * bk) * 2, stage_bytes = a_bytes + b_bytes;
  const unsigned full = unsigned(stages) * stage_bytes, empty = full + 8 * unsigned(stages);
  return {a_bytes, b_bytes, stage_bytes, full, empty, 1024 + empty + 8 * unsigned(stages)};
}

// group_gemm's row tiles on the sm_80 path: its grid, one block a (row tile, column tile), covers every group's
// rows in tiles of bm, whatever the split of `rows` into `groups`: each non-empty group (at most min(groups,
// rows)) adds at most bm - 1 rows of a partial last tile. The kernel finds its group from the offsets
// (gemm.cu's find_group_tile); blocks past the groups' last tile have none.
MOJO_HOST_DEVICE constexpr int group_row_tiles(long long rows, long long groups, int bm) {
  return int((rows + (groups < rows ? groups : rows) * (bm - 1)) / bm);
}

// The threads of a K split's reduce step (gemm.cu's reduce_splits): a block's, for the kernel and its grid.
constexpr int kReduceThreads = 256;
template <class TA>
struct InputArgs {
  MOJO_GEMM_INPUT_ARGS(TA, MOJO_ARG_FIELD)
};
template <class TC>
struct OutputArgs {
  MOJO_GEMM_OUTPUT_ARGS(TC, MOJO_ARG_FIELD)
};
// The sm_80 path's, in its parameters' order.
template <class TA, class TC>
struct Args {
  InputArgs<TA> in;
  OutputArgs<TC> out;
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class TA, class F>
void for_each_arg(const InputArgs<TA>& a, F f) {
  MOJO_GEMM_INPUT_ARGS(TA, MOJO_ARG_VISIT)
}
template <class TC, class F>
void for_each_arg(const OutputArgs<TC>& a, F f) {
  MOJO_GEMM_OUTPUT_ARGS(TC, MOJO_ARG_VISIT)
}
template <class TA, class TC, class F>
void for_each_arg(const Args<TA, TC>& a, F f) {
  for_each_arg(a.in, f);
  for_each_arg(a.out, f);
}
#endif
}  // namespace mojo_gemm
