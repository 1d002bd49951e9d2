// The runtime arguments of layer_norm_backward and rms_norm_backward
// (norm_backward.cu), written once (mojo_args.h): the kernels' parameters
// and the struct the ops (src/ops/norm_backward.cpp) fill. grad_x, grad_out,
// x and grad_residual are contiguous [rows, HIDDEN].
#pragma once

#include "mojo_args.h"

// grad_x and grad_residual without __restrict__: grad_x may be grad_residual (accumulated in place).
#define MOJO_NORM_BACKWARD_ARGS(T, ARG)                                                              \
  ARG(T*, grad_x)                                                                                    \
  ARG(T* __restrict__, grad_weight) /* [HIDDEN] */                                                   \
  ARG(T* __restrict__, grad_bias) /* [HIDDEN]; layer_norm's, else null */                            \
  ARG(const T* __restrict__, grad_out)                                                               \
  ARG(const T* __restrict__, x)                                                                      \
  ARG(const T* __restrict__, weight) /* [HIDDEN] */                                                  \
  ARG(const float* __restrict__, mean) /* [rows] from layer_norm; rms_norm: null */                  \
  ARG(const float* __restrict__, rstd) /* [rows] from layer_norm; rms_norm: null (recomputed) */     \
  ARG(const T*, grad_residual) /* rms_norm with RESIDUAL: added to grad_x; else null */              \
  ARG(float, eps) /* rms_norm: the forward's; layer_norm: unused */                                  \
  ARG(long long, rows)                                                                               \
  ARG(float* __restrict__, workspace) /* the plan's: partials, or rms_norm's rstd (see the template) */ \
  ARG(long long, parts) /* PARTIALS 1: blocks of the row step, one partial each */

namespace mojo_norm_backward {
template <class T>
struct Args {
  MOJO_NORM_BACKWARD_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const Args<T>& a, F f) {
  MOJO_NORM_BACKWARD_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_norm_backward
