// The runtime arguments of rms_norm and add_rms_norm (rms_norm.cu), written
// once (mojo_args.h): the kernel's parameters and the struct the op
// (src/ops/rms_norm.cpp) fills.
#pragma once

#include "mojo_args.h"

#define MOJO_RMS_NORM_ARGS(T, ARG)                                                   \
  ARG(T* __restrict__, out)                                                          \
  ARG(T* __restrict__, residual) /* add_rms_norm: += x, then normalised; else null */ \
  ARG(const T* __restrict__, x)                                                      \
  ARG(const T* __restrict__, weight) /* [HIDDEN] */                                  \
  ARG(float, eps)                                                                    \
  ARG(long long, rows)                                                               \
  ARG(long long, out_stride) /* elements between rows, as the next two */            \
  ARG(long long, residual_stride)                                                    \
  ARG(long long, x_stride)

namespace mojo_rms_norm {
template <class T>
struct Args {
  MOJO_RMS_NORM_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host code, which NVRTC does not take
template <class T, class F>
void for_each_arg(const Args<T>& a, F f) {
  MOJO_RMS_NORM_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_rms_norm
