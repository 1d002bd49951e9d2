// The runtime arguments of softmax, log_softmax (Args) and softmax_backward
// (BackwardArgs) in softmax.cu, one list per kernel signature, written once
// (mojo_args.h): the kernels' parameters and the structs the ops
// (src/ops/softmax.cpp) fill.
#pragma once

#include "mojo_args.h"
#include "mojo_row_tile.h"  // MOJO_ROW_REGISTER_VECTORS, which src/ops/softmax.cpp takes too

// The most vectors a thread of the cooperative form keeps of its row's chunk (in registers, for each tensor it
// reads): longer chunks take the chunked form's two launches.
#define MOJO_SOFTMAX_COOPERATIVE_VECTORS 8

// softmax and log_softmax.
#define MOJO_SOFTMAX_ARGS(T, ARG)                                     \
  ARG(T* __restrict__, out)                                           \
  ARG(const T* __restrict__, x)                                       \
  ARG(long long, rows)                                                \
  ARG(long long, out_stride) /* elements between rows, as the next */ \
  ARG(long long, x_stride)                                            \
  ARG(float* __restrict__, parts) /* workspace of the chunked form: [rows, chunks, 2] */ \
  ARG(unsigned* __restrict__, sync) /* the cooperative form's sync words: [rows, 2] */

// softmax_backward: every tensor contiguous [rows, COLS].
#define MOJO_SOFTMAX_BACKWARD_ARGS(T, ARG)                   \
  ARG(T* __restrict__, grad_x)                               \
  ARG(const T* __restrict__, grad_out)                       \
  ARG(const T* __restrict__, out) /* the forward's output */ \
  ARG(long long, rows)                                       \
  ARG(float* __restrict__, parts) /* workspace of the chunked form: [rows, chunks] */ \
  ARG(unsigned* __restrict__, sync) /* the cooperative form's sync words: [rows, 2] */

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
