// The runtime arguments of gemm.cu's kernels (gemm, gemm_batched, linear,
// group_gemm, and the products of moe_mlp and cross_entropy), written once
// (mojo_args.h): the kernels' parameters and the structs the host
// (push_kernel_args, src/ops/gemm_tile.cpp) fills. The sm_80 entry
// (MOJO_GEMM_KERNEL_0) takes MOJO_GEMM_ARGS; the sm_90a one
// (MOJO_GEMM_KERNEL_1) takes MOJO_GEMM_SM90_ARGS, then the TMA descriptors of
// A, B and A's last row tile.
#pragma once

#include "mojo_args.h"

// The sm_80 path: TA the inputs' storage, TC the output's.
#define MOJO_GEMM_ARGS(TA, TC, ARG)                                                                             \
  ARG(TC*, c)                                                                                                   \
  ARG(const TA* __restrict__, a)                                                                                \
  ARG(const TA* __restrict__, b)                                                                                \
  ARG(const TC* __restrict__, bias) /* [n], added by linear's epilogue; else null */                            \
  ARG(const TC*, residual) /* [m, n] (row stride ldr), added by linear's epilogue; else null */                 \
  ARG(float, alpha)                                                                                             \
  ARG(float, beta)                                                                                              \
  ARG(int, m) /* group_gemm: the most rows a group may have */                                                  \
  ARG(int, n)                                                                                                   \
  ARG(int, k)                                                                                                   \
  ARG(long long, lda) /* row strides, in elements, as the next three */                                         \
  ARG(long long, ldb)                                                                                           \
  ARG(long long, ldc)                                                                                           \
  ARG(long long, ldr)                                                                                           \
  ARG(long long, batch_a) /* batch strides (grid.z), in elements, as the next two; group_gemm: b's per group */ \
  ARG(long long, batch_b)                                                                                       \
  ARG(long long, batch_c)                                                                                       \
  ARG(const void*, offsets) /* group_gemm: int32 or int64 [groups + 1]; else null */                            \
  ARG(long long, total_rows) /* group_gemm: the rows of a and c, which the offsets are clamped to */

// The sm_90a path (gemm_sm90.cuh): A and B come through the TMA descriptors
// that follow these parameters, so only the output side is here. The reduce
// step of a K split (either path) takes these alone: it reads the splits'
// f32 sums, [batches, splits, m, n], from `partials`.
#define MOJO_GEMM_SM90_ARGS(TC, ARG)                                                 \
  ARG(TC*, c)                                                                        \
  ARG(const TC* __restrict__, bias) /* as MOJO_GEMM_ARGS */                          \
  ARG(const TC*, residual) /* as MOJO_GEMM_ARGS */                                   \
  ARG(float, alpha)                                                                  \
  ARG(float, beta)                                                                   \
  ARG(int, m) /* group_gemm: the most rows a group may have */                       \
  ARG(int, n)                                                                        \
  ARG(int, k)                                                                        \
  ARG(long long, ldc) /* in elements, as MOJO_GEMM_ARGS, as the next two */          \
  ARG(long long, ldr)                                                                \
  ARG(long long, batch_c)                                                            \
  ARG(int, batches) /* the batches, or group_gemm's groups */                        \
  ARG(const void*, offsets) /* group_gemm: int32 or int64 [groups + 1]; else null */ \
  ARG(long long, total_rows) /* group_gemm: the rows of x (a_map) and c */          \
  ARG(const float*, partials) /* the reduce step: the K splits' sums; else null */

namespace mojo_gemm {
// The threads of a K split's reduce step (gemm.cu's reduce_splits): a block's, for the kernel and its grid.
constexpr int kReduceThreads = 256;
template <class TA, class TC>
struct Args {
  MOJO_GEMM_ARGS(TA, TC, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class TA, class TC, class F>
void for_each_arg(const Args<TA, TC>& a, F f) {
  MOJO_GEMM_ARGS(TA, TC, MOJO_ARG_VISIT)
}
#endif
template <class TC>
struct Sm90Args {
  MOJO_GEMM_SM90_ARGS(TC, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class TC, class F>
void for_each_arg(const Sm90Args<TC>& a, F f) {
  MOJO_GEMM_SM90_ARGS(TC, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_gemm
