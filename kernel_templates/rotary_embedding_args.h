// The runtime arguments of rotary_embedding (rotary_embedding.cu), written
// once (mojo_args.h): the kernel's parameters and the struct the op
// (src/ops/rotary_embedding.cpp) fills.
#pragma once

#include "mojo_args.h"

#define MOJO_ROTARY_EMBEDDING_ARGS(T, C, I, ARG)                               \
  ARG(T* __restrict__, q) /* [tokens, HEADS, HEAD_DIM], rotated in place */    \
  ARG(T* __restrict__, k) /* [tokens, KV_HEADS, HEAD_DIM], rotated in place */ \
  ARG(const I* __restrict__, positions) /* [tokens] */                         \
  ARG(const C* __restrict__, cos_sin) /* [max_pos, ROT_DIM]: cos, then sin */  \
  ARG(long long, tokens) /* one block each */                                  \
  ARG(long long, q_stride) /* elements between tokens of q */                  \
  ARG(long long, k_stride) /* elements between tokens of k */                  \
  ARG(long long, max_pos) /* a position outside [0, max_pos) is skipped */

namespace mojo_rotary {
template <class T, class C, class I>
struct Args {
  MOJO_ROTARY_EMBEDDING_ARGS(T, C, I, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class C, class I, class F>
void for_each_arg(const Args<T, C, I>& a, F f) {
  MOJO_ROTARY_EMBEDDING_ARGS(T, C, I, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_rotary
