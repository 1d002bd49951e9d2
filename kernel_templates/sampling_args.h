// The runtime arguments of sampling.cu's kernels (apply_temperature,
// apply_penalties_temperature, sample, reject_sample), written once
// (mojo_args.h): the kernels' parameters and the structs the ops
// (src/ops/sampling.cpp) fill. Per-request tensors are [batch]; every row is
// one request.
#pragma once

#include "mojo_args.h"

// apply_penalties_temperature, step 0 (apply_temperature).
#define MOJO_SAMPLING_TEMPERATURE_ARGS(T, ARG)             \
  ARG(T* __restrict__, logits) /* in place */              \
  ARG(long long, stride)       /* elements between rows */ \
  ARG(const float* __restrict__, temperature)

// apply_penalties_temperature, step 1.
#define MOJO_SAMPLING_PENALTY_ARGS(T, I, ARG)                                            \
  ARG(T* __restrict__, logits)       /* in place */                                      \
  ARG(long long, stride)             /* elements between rows */                         \
  ARG(const I* __restrict__, ids)    /* [batch, max_len]: distinct token ids, -1 pads */ \
  ARG(const I* __restrict__, counts) /* [batch, max_len]: times each id was generated */ \
  ARG(long long, max_len)                                                                \
  ARG(const float* __restrict__, repetition)                                             \
  ARG(const float* __restrict__, presence)                                               \
  ARG(const float* __restrict__, frequency)                                              \
  ARG(const float* __restrict__, temperature)

#define MOJO_SAMPLING_SAMPLE_ARGS(T, I, ARG)                \
  ARG(long long* __restrict__, tokens)                      \
  ARG(float* __restrict__, logprobs) /* null: not wanted */ \
  ARG(const T* __restrict__, logits)                        \
  ARG(long long, stride) /* elements between rows */        \
  ARG(const I* __restrict__, top_k)                         \
  ARG(const float* __restrict__, top_p)                     \
  ARG(const float* __restrict__, min_p)                     \
  ARG(const long long* __restrict__, seed)                  \
  ARG(long long* __restrict__, offset) /* advanced by one */

#define MOJO_SAMPLING_REJECT_ARGS(T, I, ARG)                              \
  ARG(long long* __restrict__, out)        /* [batch, SPEC + 1] */        \
  ARG(long long* __restrict__, accepted)   /* [batch] */                  \
  ARG(const I* __restrict__, draft_tokens) /* [batch, SPEC] */            \
  ARG(const T* __restrict__, draft_probs)  /* [batch, SPEC, VOCAB] */     \
  ARG(const T* __restrict__, target_probs) /* [batch, SPEC + 1, VOCAB] */ \
  ARG(const long long* __restrict__, seed)                                \
  ARG(long long* __restrict__, offset) /* advanced by one */

namespace mojo_sampling {
template <class T>
struct TemperatureArgs {
  MOJO_SAMPLING_TEMPERATURE_ARGS(T, MOJO_ARG_FIELD)
};

template <class T, class I>
struct PenaltyArgs {
  MOJO_SAMPLING_PENALTY_ARGS(T, I, MOJO_ARG_FIELD)
};

template <class T, class I>
struct SampleArgs {
  MOJO_SAMPLING_SAMPLE_ARGS(T, I, MOJO_ARG_FIELD)
};

template <class T, class I>
struct RejectArgs {
  MOJO_SAMPLING_REJECT_ARGS(T, I, MOJO_ARG_FIELD)
};

#ifndef __CUDACC_RTC__  // host code (KernelArgs::push_args): NVRTC rejects functions without __device__
template <class T, class F>
void for_each_arg(const TemperatureArgs<T>& a, F f) {
  MOJO_SAMPLING_TEMPERATURE_ARGS(T, MOJO_ARG_VISIT)
}
template <class T, class I, class F>
void for_each_arg(const PenaltyArgs<T, I>& a, F f) {
  MOJO_SAMPLING_PENALTY_ARGS(T, I, MOJO_ARG_VISIT)
}
template <class T, class I, class F>
void for_each_arg(const SampleArgs<T, I>& a, F f) {
  MOJO_SAMPLING_SAMPLE_ARGS(T, I, MOJO_ARG_VISIT)
}
template <class T, class I, class F>
void for_each_arg(const RejectArgs<T, I>& a, F f) {
  MOJO_SAMPLING_REJECT_ARGS(T, I, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_sampling
