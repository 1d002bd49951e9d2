// The runtime arguments of silu, gelu, swiglu and gelu_and_mul
// (activation.cu), written once (mojo_args.h): the kernel's parameters and
// the struct the op (src/ops/activation.cpp) fills.
#pragma once

#include "mojo_args.h"

#define MOJO_ACTIVATION_ARGS(T, ARG)                                            \
  ARG(T* __restrict__, out) /* contiguous */                                    \
  ARG(const T* __restrict__, x) /* contiguous; gated: [..., 2 * D], a then b */ \
  ARG(long long, n) /* output elements */

namespace mojo_activation {
template <class T>
struct Args {
  MOJO_ACTIVATION_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const Args<T>& a, F f) {
  MOJO_ACTIVATION_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_activation
