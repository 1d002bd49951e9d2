// The runtime arguments of layer_norm (Args) and layer_norm_backward
// (BackwardArgs) in layer_norm.cu, one list per kernel signature, written
// once (mojo_args.h): the kernels' parameters and the structs the ops
// (src/ops/layer_norm.cpp) fill.
#pragma once

#include "mojo_args.h"

// layer_norm.
#define MOJO_LAYER_NORM_ARGS(T, ARG)                                           \
  ARG(T* __restrict__, out)                                                    \
  ARG(float* __restrict__, mean) /* [rows], written when STATS */              \
  ARG(float* __restrict__, rstd) /* [rows], when STATS: 1 / sqrt(var + eps) */ \
  ARG(const T* __restrict__, x)                                                \
  ARG(const T* __restrict__, weight) /* [HIDDEN] */                            \
  ARG(const T* __restrict__, bias) /* [HIDDEN] */                              \
  ARG(float, eps)                                                              \
  ARG(long long, rows)                                                         \
  ARG(long long, out_stride) /* elements between rows, as the next */          \
  ARG(long long, x_stride)

// layer_norm_backward: grad_x, grad_out and x contiguous [rows, HIDDEN].
#define MOJO_LAYER_NORM_BACKWARD_ARGS(T, ARG)                        \
  ARG(T* __restrict__, grad_x)                                       \
  ARG(T* __restrict__, grad_weight) /* [HIDDEN] */                   \
  ARG(T* __restrict__, grad_bias) /* [HIDDEN] */                     \
  ARG(const T* __restrict__, grad_out)                               \
  ARG(const T* __restrict__, x)                                      \
  ARG(const T* __restrict__, weight) /* [HIDDEN] */                  \
  ARG(const float* __restrict__, mean) /* [rows], from layer_norm */ \
  ARG(const float* __restrict__, rstd) /* [rows], from layer_norm */ \
  ARG(long long, rows)                                               \
  ARG(float* __restrict__, partials) /* the plan's: [2][parts][HIDDEN] */ \
  ARG(long long, parts) /* blocks of the row step, one partial each */

namespace mojo_layer_norm {
template <class T>
struct Args {
  MOJO_LAYER_NORM_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const Args<T>& a, F f) {
  MOJO_LAYER_NORM_ARGS(T, MOJO_ARG_VISIT)
}
#endif

template <class T>
struct BackwardArgs {
  MOJO_LAYER_NORM_BACKWARD_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const BackwardArgs<T>& a, F f) {
  MOJO_LAYER_NORM_BACKWARD_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_layer_norm
