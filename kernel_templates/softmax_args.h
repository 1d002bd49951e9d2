// The runtime arguments of softmax, log_softmax (Args) and softmax_backward
// (BackwardArgs) in softmax.cu, one list per kernel signature, written once
// (mojo_args.h): the kernels' parameters and the structs the ops
// (src/ops/softmax.cpp) fill.
#pragma once

#include "mojo_args.h"

// softmax and log_softmax.
#define MOJO_SOFTMAX_ARGS(T, ARG)                                     \
  ARG(T* __restrict__, out)                                           \
  ARG(const T* __restrict__, x)                                       \
  ARG(long long, rows)                                                \
  ARG(long long, out_stride) /* elements between rows, as the next */ \
  ARG(long long, x_stride)                                            \
  ARG(float* __restrict__, parts) /* workspace of the chunked form: [rows, chunks, 2] */

// softmax_backward: every tensor contiguous [rows, COLS].
#define MOJO_SOFTMAX_BACKWARD_ARGS(T, ARG)                   \
  ARG(T* __restrict__, grad_x)                               \
  ARG(const T* __restrict__, grad_out)                       \
  ARG(const T* __restrict__, out) /* the forward's output */ \
  ARG(long long, rows)                                       \
  ARG(float* __restrict__, parts) /* workspace of the chunked form: [rows, chunks] */

// The vectors of its row a thread keeps in registers at most (softmax.cu's RowTile): 16-byte packs of 4
// registers, `packs` an item (the forward's 1, the backward's 2), within 64 registers, or 24 in a block of more
// than 512 threads, where ptxas gives a thread 64 in all (holding 64 there spilled 80 to 720 bytes of stack,
// and the backward's 32 made LLVM spill 16, 2026-11-28). A longer row is read twice, and its first `cache` vectors (a param the op chooses) wait for the
// second pass in shared memory. A macro: the kernels (NVRTC compiles no host function) and the op
// (src/ops/softmax.cpp) both take it.
#define MOJO_SOFTMAX_REGISTER_VECTORS(block_threads, packs) (((block_threads) > 512 ? 24 : 64) / (4 * (packs)))

namespace mojo_softmax {
template <class T>
struct Args {
  MOJO_SOFTMAX_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const Args<T>& a, F f) {
  MOJO_SOFTMAX_ARGS(T, MOJO_ARG_VISIT)
}
#endif

template <class T>
struct BackwardArgs {
  MOJO_SOFTMAX_BACKWARD_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const BackwardArgs<T>& a, F f) {
  MOJO_SOFTMAX_BACKWARD_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_softmax
