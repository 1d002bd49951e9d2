// The runtime arguments of embedding (embedding.cu), and of moe's gather
// step, which instantiates the same kernel (moe.cu), written once
// (mojo_args.h): the kernel's parameters and the struct the ops
// (src/ops/embedding.cpp, and the gather steps of src/ops/moe.cpp and
// src/ops/moe_mlp.cpp) fill.
#pragma once

#include "mojo_args.h"

#define MOJO_EMBEDDING_ARGS(T, I, ARG)                                      \
  ARG(T* __restrict__, out) /* [tokens, HIDDEN], contiguous */              \
  ARG(const I* __restrict__, ids) /* [tokens] */                            \
  ARG(const T* __restrict__, weight) /* [vocab, HIDDEN], contiguous */      \
  ARG(long long, tokens) /* ids, one row of out each */                     \
  ARG(long long, vocab) /* an id outside [0, vocab) gives a row of zeros */

namespace mojo_embedding {
template <class T, class I>
struct Args {
  MOJO_EMBEDDING_ARGS(T, I, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class I, class F>
void for_each_arg(const Args<T, I>& a, F f) {
  MOJO_EMBEDDING_ARGS(T, I, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_embedding
