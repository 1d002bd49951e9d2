// The runtime arguments of moe.cu's kernels (moe_gate, moe_dispatch,
// moe_combine), written once (mojo_args.h): the kernels' parameters and the
// structs the ops (src/ops/moe.cpp, src/ops/moe_mlp.cpp) fill. moe_dispatch's
// gather step is embedding.cu's kernel and takes its arguments
// (embedding_args.h).
#pragma once

#include "mojo_args.h"

#define MOJO_MOE_GATE_ARGS(T, I, ARG)                                 \
  ARG(float* __restrict__, weights)    /* [tokens, TOP_K] */          \
  ARG(I* __restrict__, ids)            /* [tokens, TOP_K] */          \
  ARG(const T* __restrict__, logits)   /* [tokens, EXPERTS] */        \
  ARG(const float* __restrict__, bias) /* [EXPERTS], or null: none */ \
  ARG(float, scaling)                  /* on every weight */          \
  ARG(long long, tokens)

// moe_dispatch, step 0 (the counting sort).
#define MOJO_MOE_DISPATCH_ARGS(I, ARG)                 \
  ARG(I* __restrict__, offsets)    /* [EXPERTS + 1] */ \
  ARG(I* __restrict__, sorted_ids) /* [pairs] */       \
  ARG(I* __restrict__, positions)  /* [pairs] */       \
  ARG(const I* __restrict__, ids)  /* [pairs] */       \
  ARG(long long, pairs)            /* tokens * TOP_K */

#define MOJO_MOE_COMBINE_ARGS(T, I, ARG)                                        \
  ARG(T* __restrict__, out)               /* [tokens, HIDDEN] */                \
  ARG(const T* __restrict__, expert_out)  /* [rows, HIDDEN], in sorted order */ \
  ARG(const I* __restrict__, positions)   /* [tokens, TOP_K] */                 \
  ARG(const float* __restrict__, weights) /* [tokens, TOP_K] */                 \
  ARG(long long, tokens)

namespace mojo_moe {
template <class T, class I>
struct GateArgs {
  MOJO_MOE_GATE_ARGS(T, I, MOJO_ARG_FIELD)
};

template <class I>
struct DispatchArgs {
  MOJO_MOE_DISPATCH_ARGS(I, MOJO_ARG_FIELD)
};

template <class T, class I>
struct CombineArgs {
  MOJO_MOE_COMBINE_ARGS(T, I, MOJO_ARG_FIELD)
};

#ifndef __CUDACC_RTC__  // host code (KernelArgs::push_args): NVRTC rejects functions without __device__
template <class T, class I, class F>
void for_each_arg(const GateArgs<T, I>& a, F f) {
  MOJO_MOE_GATE_ARGS(T, I, MOJO_ARG_VISIT)
}
template <class I, class F>
void for_each_arg(const DispatchArgs<I>& a, F f) {
  MOJO_MOE_DISPATCH_ARGS(I, MOJO_ARG_VISIT)
}
template <class T, class I, class F>
void for_each_arg(const CombineArgs<T, I>& a, F f) {
  MOJO_MOE_COMBINE_ARGS(T, I, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_moe
