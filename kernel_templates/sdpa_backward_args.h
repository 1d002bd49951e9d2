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
// The rounds of a step go through a ring of kStages stages (sdpa_backward.cu).
constexpr int kStages = 2;

// Dynamic shared memory of a step, head_dim padded to dp columns: `fixed_tiles` 16-bit tiles of `fixed_rows` loaded
// once (the key step's K and V of bn keys, or K alone where it computes grad_v only; the query step's Q and grad_out
// of its query rows), kStages stages of two tiles of `ring_rows` a stage that its rounds go through (Q and grad_out
// of bq queries, or K and V of bk keys), and two f32 values (lse, D) for each of `stat_rows` query rows (the key
// step's: bq for each stage).
MOJO_HOST_DEVICE constexpr unsigned smem_bytes(int fixed_tiles, int fixed_rows, int ring_rows, int dp, int stat_rows) {
  return unsigned(fixed_tiles * fixed_rows * dp * 2 + kStages * 2 * ring_rows * dp * 2 + 2 * stat_rows * 4);
}

// What a key step computes (its `part`): both gradients, or at head_dim 256, where their two accumulators would
// not fit a thread's registers together, one of them, a step each.
enum KeyPart { kBothParts = 0, kGradVPart = 1, kGradKPart = 2 };
// The tiles of keys a key step loads once: K, and V where it needs dP (grad_k).
MOJO_HOST_DEVICE constexpr int key_tiles_loaded(int part) { return part == kGradVPart ? 1 : 2; }

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
