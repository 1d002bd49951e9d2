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

// sample: every phase of the plan is a launch of one kernel (sampling.cu).
#define MOJO_SAMPLING_SAMPLE_ARGS(T, I, ARG)                                                                       \
  ARG(long long* __restrict__, tokens)                                                                             \
  ARG(float* __restrict__, logprobs)                /* null: not wanted */                                         \
  ARG(const T* __restrict__, logits)                                                                               \
  ARG(long long, stride)                            /* elements between rows */                                    \
  ARG(const I* __restrict__, top_k)                                                                                \
  ARG(const float* __restrict__, top_p)                                                                            \
  ARG(const float* __restrict__, min_p)                                                                            \
  ARG(const long long* __restrict__, seed)                                                                         \
  ARG(long long* __restrict__, offset)              /* advanced by one */                                          \
  ARG(unsigned long long* __restrict__, partials)   /* workspace: [batch, 2, chunks, kSlot] */                     \
  ARG(unsigned long long* __restrict__, candidates) /* workspace: [batch, threads] */                              \
  ARG(float* __restrict__, stats)                   /* workspace: [batch, chunks, 2] max, sum */                   \
  ARG(mojo_sampling::RowState* __restrict__, states) /* workspace: [batch] */                                      \
  ARG(unsigned* __restrict__, counters)             /* [batch, MOJO_SAMPLE_ROW_WORDS]: workspace, or */            \
                                                    /* sample_cooperative's sync words */                          \
  ARG(int, phase)                                   /* sample: the phase this launch runs (cooperative: 0) */

#define MOJO_SAMPLING_REJECT_ARGS(T, I, ARG)                              \
  ARG(long long* __restrict__, out)        /* [batch, SPEC + 1] */        \
  ARG(long long* __restrict__, accepted)   /* [batch] */                  \
  ARG(const I* __restrict__, draft_tokens) /* [batch, SPEC] */            \
  ARG(const T* __restrict__, draft_probs)  /* [batch, SPEC, VOCAB] */     \
  ARG(const T* __restrict__, target_probs) /* [batch, SPEC + 1, VOCAB] */ \
  ARG(const long long* __restrict__, seed)                                \
  ARG(long long* __restrict__, offset) /* advanced by one */

// The launches of sample's plan when the logits' order keys are KEY_BITS
// wide (f32 32, f16 24, bf16 16): one phase per 8-bit digit for top-k (the
// first with the stats) and again for top-p, the kept mass per chunk, the
// walk to the token. A macro: NVRTC takes no host function, and the host has
// no device one.
#define MOJO_SAMPLE_PHASES(KEY_BITS) (2 * ((KEY_BITS) / 8) + 2)
// A row's counters: each phase's merge (phase 0's numbers top-k's candidates instead), then
// sample_cooperative's barrier after each phase and the count of its blocks done with them.
#define MOJO_SAMPLE_ROW_WORDS(KEY_BITS) (2 * MOJO_SAMPLE_PHASES(KEY_BITS) + 1)

namespace mojo_sampling {
// A chunk's slot in sample's partials: a 256-bin histogram, then the chunk's kept mass above the bins.
constexpr int kSlot = 257;

// What the phases of `sample` pass on about a row, between launches.
struct RowState {
  unsigned long long want;   // the select under way: the weight still wanted below `prefix`
  unsigned long long point;  // the draw: where the point falls within `chunk`
  unsigned threshold;        // keys >= threshold are kept (0, then top-k's, then top-p's)
  unsigned prefix;           // the select under way: the digits chosen so far
  int chunk;                 // the draw: the chunk that holds the point; -1: none (no finite logit);
                             // kNotPlaced: not yet; kTokenWritten: the token is written (top-k's
                             // survivors were few)
  unsigned candidates;       // top-k's select: the keys at or above its prefix
};

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
