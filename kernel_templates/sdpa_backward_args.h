// The runtime arguments of sdpa_backward.cu's kernels (every step of the plan takes the same list), written once
// (mojo_args.h): the kernels' parameters and the struct the op (src/ops/sdpa_backward.cpp) fills.
#pragma once

#include "mojo_args.h"

#define MOJO_SDPA_BACKWARD_ARGS(T, ARG)                                                                    \
  ARG(T* __restrict__, grad_q)          /* [q_tokens, heads, D], contiguous */                            \
  ARG(T* __restrict__, grad_k)          /* [kv_tokens, kv_heads, D], contiguous */                        \
  ARG(T* __restrict__, grad_v)          /* like grad_k */                                                 \
  ARG(float* __restrict__, grad_sinks)  /* [heads], or null */                                            \
  ARG(const T* __restrict__, grad_out)  /* [q_tokens, heads, D], contiguous */                            \
  ARG(const T* __restrict__, q)         /* [q_tokens, heads, D], q_stride elements a token */             \
  ARG(const T* __restrict__, k)         /* [kv_tokens, kv_heads, D], k_stride elements a token */         \
  ARG(const T* __restrict__, v)         /* like k, v_stride */                                            \
  ARG(const T* __restrict__, out)       /* the forward's, [q_tokens, heads, D], contiguous */             \
  ARG(const float* __restrict__, lse)   /* the forward's, [heads, q_tokens] */                            \
  ARG(const float* __restrict__, grad_lse) /* [heads, q_tokens], or null */                               \
  ARG(const int*, cu_q)                 /* [batch + 1] cumulative query tokens, or null: one sequence */  \
  ARG(const int*, cu_k)                 /* [batch + 1] cumulative key tokens, or null: one sequence */    \
  ARG(const float* __restrict__, sinks) /* [heads], or null */                                            \
  ARG(float* __restrict__, dot)         /* workspace [heads, q_tokens]: rowsum(grad_out * out) - grad_lse */ \
  ARG(long long, q_stride)                                                                                 \
  ARG(long long, k_stride)                                                                                 \
  ARG(long long, v_stride)                                                                                 \
  ARG(int, batch)                                                                                          \
  ARG(int, q_tokens)                                                                                       \
  ARG(int, kv_tokens)                                                                                      \
  ARG(int, heads)                                                                                          \
  ARG(int, kv_heads)                                                                                       \
  ARG(float, scale)                                                                                        \
  ARG(float, softcap) /* 0: none */                                                                        \
  ARG(int, window)    /* left window size; < 0: none */

namespace mojo_sdpa_backward {
// Dynamic shared memory of the key step (bn keys, bq queries a round) and of the query step (bm query rows, bk
// keys a round): two 16-bit tiles of each, head_dim padded to dp columns, and two f32 values a query row.
MOJO_HOST_DEVICE constexpr unsigned smem_bytes(int rows_a, int rows_b, int dp) {
  return unsigned(2 * (rows_a + rows_b) * dp * 2 + 2 * (rows_a > rows_b ? rows_a : rows_b) * 4);
}

template <class T>
struct Args {
  MOJO_SDPA_BACKWARD_ARGS(T, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class F>
void for_each_arg(const Args<T>& a, F f) {
  MOJO_SDPA_BACKWARD_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_sdpa_backward
