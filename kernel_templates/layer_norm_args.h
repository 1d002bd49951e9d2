// The runtime arguments of layer_norm (layer_norm.cu), written once
// (mojo_args.h): the kernel's parameters and the struct the op
// (src/ops/layer_norm.cpp) fills.
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

}  // namespace mojo_layer_norm
