// Sampling: what a server runs on the logits every decode step.
//
// apply_penalties_temperature (in place), a plan of two kernels:
//   step 0 (BLOCKS blocks a request, so that a batch of one still spreads
//   over the GPU): logits[r, :] /= temperature[r]   (0: left as they are;
//   greedy requests use top_k = 1);
//   step 1 (one block per request): for each listed token id of the request with count c:
//     repetition:  l = l > 0 ? l / repetition[r] : l * repetition[r]
//     presence and frequency:  l -= (frequency[r] * c + (c > 0 ? presence[r] : 0)) / temperature[r]
//   A token listed with count 0 (seen in the prompt only) gets the repetition
//   penalty alone. The ids of a request are distinct; -1 pads.
//
// sample (one block per request): a token drawn from softmax(logits[r]) kept
//   to its top_k (0: all; ties with the k-th logit are kept), then to the
//   smallest set of highest tokens holding top_p of that mass, then to tokens
//   with probability >= min_p times the highest's. No sort and no softmax in
//   memory: the thresholds are found by radix select on the logits' order
//   keys (8 bits a pass, 2 to 4 passes), with counts or fixed-point
//   probability masses per bin, and the draw is the inverse CDF over the kept
//   tokens in vocabulary order at the request's Philox uniform. top_k = 1 is
//   greedy: the first of the highest logits, no random number. A row with no
//   finite logit gives token -1. Optional logprobs: log_softmax(logits) at
//   the token (before any filter).
//
// reject_sample (one block per request): speculative decoding's chain check.
//   Draft token j is accepted while u_j * draft_probs[j, t] < target_probs[j, t];
//   at the first rejection the recovered token is drawn from
//   max(0, target - draft) (renormalized; target's own row if that is all
//   zero), and when all SPEC are accepted the bonus token is drawn from
//   target_probs[SPEC]. out: the accepted tokens, then the recovered or bonus
//   one, then -1; accepted[r]: how many drafts were kept.
//
// Random numbers (mojo_random.cuh): per request seed and offset; sample
// draws stream 0, reject_sample streams 0..SPEC; each advances offset[r] by one.
// Masses are integers (probability * 2^40), so sums are exact and the same
// on every run and in every order.
//
// Params: T (logits or probabilities), I (token ids, top_k: int or long
// long), VOCAB, VEC (elements per load), THREADS, BLOCKS for the
// temperature step and SPEC for reject_sample. Geometry: block = THREADS,
// grid = rows (the temperature step: rows * BLOCKS). Kernel args (sampling_args.h):
//   apply_penalties_temperature, step 0: MOJO_SAMPLING_TEMPERATURE_ARGS; step 1: MOJO_SAMPLING_PENALTY_ARGS
//   sample: MOJO_SAMPLING_SAMPLE_ARGS; reject_sample: MOJO_SAMPLING_REJECT_ARGS
#include "mojo_prelude.cuh"
#include "mojo_random.cuh"
#include "sampling_args.h"

namespace mojo_sampling {

using u64 = unsigned long long;
constexpr float kMassOne = 1099511627776.f;  // 2^40: probability 1 as a fixed-point mass

// A probability in [0, 1] as a fixed-point mass (a vocabulary of 2^18 sums below 2^58).
__device__ __forceinline__ u64 mass(float p) { return p > 0.f ? u64(p * kMassOne) : 0ull; }

// floor(total * r / 2^24) without overflow: where a uniform r / 2^24 falls in `total`.
__device__ __forceinline__ u64 scale(u64 total, unsigned r24) {
  return (total >> 24) * r24 + (((total & 0xffffffull) * r24) >> 24);
}

// The order key of a logit, KEY_BITS wide: a larger logit has a larger key.
// NaN is 0, below everything. The low bits a 16-bit dtype leaves constant
// are dropped: bf16 keys are 16 bits, f16 keys 24, f32 keys 32.
template <class T> constexpr int kKeyBits = sizeof(T) == 4 ? 32 : (mojo::kIsBf16<T> ? 16 : 24);
template <class T> __device__ __forceinline__ unsigned order_key(float x) {
  const unsigned b = mojo::float_to_bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0;
  return ((b & 0x80000000u) ? ~b : b | 0x80000000u) >> (32 - kKeyBits<T>);
}

// f(i, value) for every element of a row, VEC at a time, spread over the block.
template <class T, int VOCAB, int VEC, int THREADS, class F>
__device__ __forceinline__ void for_each(const T* row, F f) {
  constexpr int NV = VOCAB / VEC;
#pragma unroll 4
  for (int v = int(mojo::thread_x()); v < NV; v += THREADS) {
    const mojo::Pack<T, VEC> p = mojo::load<T, VEC>(row + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) f(v * VEC + j, mojo::to_float(p.v[j]));
  }
}

struct Shared {
  float reduce[32];
  u64 bins[256];
  u64 lane_sums[32];  // select_threshold: per lane of warp 0; draw: per warp's segment
  unsigned prefix;
  u64 want;
  long long chosen;
};

// The largest key t such that the weight of the tokens with key >= t (and
// >= floor) is at least `want` (weight(l): 1 to count tokens, a mass to
// weigh them); `fraction` > 0 sets want to that fraction of the total
// weight instead. Radix select from the top byte: a histogram of the weight
// per byte value of the keys that match the bytes chosen so far, then the
// byte where the weight from the top reaches what is still wanted. Every
// thread gets the result.
template <class T, int VOCAB, int VEC, int THREADS, class W>
__device__ unsigned select_threshold(const T* row, unsigned floor, u64 want, float fraction, W weight, Shared& s) {
  constexpr int KEY_BITS = kKeyBits<T>;
  const unsigned tid = mojo::thread_x();
  unsigned prefix = 0;
#pragma unroll 1
  for (int pass = 0; pass < KEY_BITS / 8; ++pass) {
    const int shift = KEY_BITS - 8 * (pass + 1);
    for (unsigned b = tid; b < 256; b += THREADS) s.bins[b] = 0;
    if (tid == 0) {  // bin 0, when the weight never reaches want
      s.prefix = prefix << 8;
      s.want = want;
    }
    mojo::sync_block();
    for_each<T, VOCAB, VEC, THREADS>(row, [&](int, float l) {
      const unsigned key = order_key<T>(l);
      if (key < floor || (pass > 0 && (key >> (shift + 8)) != prefix)) return;
      const u64 w = weight(l);
      if (w != 0) mojo::shared_add(&s.bins[(key >> shift) & 255u], w);
    });
    mojo::sync_block();
    u64 sum = 0;  // warp 0: lane i sums bins 255 - 8i down to 248 - 8i
    if (tid < 32)
      for (int b = 255 - 8 * int(tid); b > 247 - 8 * int(tid); --b) sum += s.bins[b];
    if (tid < 32) s.lane_sums[tid] = sum;
    mojo::sync_block();
    if (tid < 32) {  // the lane whose bins hold the point where the weight from the top reaches want finds the bin
      u64 above = 0, total = 0;
      for (int i = 0; i < 32; ++i) {
        if (i < int(tid)) above += s.lane_sums[i];
        total += s.lane_sums[i];
      }
      if (pass == 0 && fraction > 0.f) {
        const double exact = double(total) * double(fraction);
        want = u64(exact);
        if (double(want) < exact || want == 0) ++want;  // ceil, and at least the top token
      }
      if (above < want && want <= above + sum) {
        for (int b = 255 - 8 * int(tid);; --b) {
          if (above + s.bins[b] >= want) {
            s.prefix = (prefix << 8) | unsigned(b);
            s.want = want - above;
            break;
          }
          above += s.bins[b];
        }
      }
    }
    mojo::sync_block();
    prefix = s.prefix;
    want = s.want;
    mojo::sync_block();  // read by all before the next pass rewrites them
  }
  return prefix;
}

// Index i drawn with probability weight(i) / sum of weights, by the inverse
// CDF in index order at r / 2^24 (greedy: the first index of nonzero
// weight); -1 when every weight is 0. Two levels, so that the whole row is
// read with coalesced loads (lane l of a warp reads index base + l: one
// 128-byte line a warp load, where a chunk per thread made each warp load
// touch 32 lines): each warp sums one contiguous segment of the row, one
// thread finds the segment that holds the point, then the block sums that
// segment in a chunk per thread, a block prefix sum places the chunks, and
// the one thread whose chunk holds the point walks it. Integer weights: the
// same sums, hence the same index, whatever the partition.
template <int VOCAB, int THREADS, class W>
__device__ long long draw(W weight, unsigned r24, bool greedy, u64* scan, Shared& s) {
  constexpr int WARPS = THREADS / 32;
  constexpr int SEGMENT = (VOCAB + WARPS - 1) / WARPS;
  constexpr int CHUNK = (SEGMENT + THREADS - 1) / THREADS;
  static_assert(THREADS % 32 == 0 && WARPS <= 32, "draw needs whole warps, at most 32");
  const int tid = int(mojo::thread_x()), lane = tid % 32, warp = tid / 32;
  if (tid < WARPS) s.lane_sums[tid] = 0;  // each warp's segment sum
  if (tid == 0) s.chosen = -1;
  mojo::sync_block();
  const int segment_end = warp * SEGMENT + SEGMENT < VOCAB ? warp * SEGMENT + SEGMENT : VOCAB;
  u64 mine = 0;
  for (int i = warp * SEGMENT + lane; i < segment_end; i += 32) mine += weight(i);
  if (mine != 0) mojo::shared_add(&s.lane_sums[warp], mine);
  mojo::sync_block();
  if (tid == 0) {  // the segment that holds the point, and the point within it
    u64 total = 0;
    for (int w = 0; w < WARPS; ++w) total += s.lane_sums[w];
    const u64 point = greedy ? 0 : scale(total, r24);
    s.prefix = WARPS;  // none: every weight is 0
    u64 before = 0;
    for (int w = 0; total > 0 && w < WARPS; ++w) {
      if (point < before + s.lane_sums[w]) {
        s.prefix = unsigned(w);
        s.want = point - before;
        break;
      }
      before += s.lane_sums[w];
    }
  }
  mojo::sync_block();
  const int segment = int(s.prefix);
  const u64 point = s.want;
  if (segment < WARPS) {  // the same for every thread
    const int end = segment * SEGMENT + SEGMENT < VOCAB ? segment * SEGMENT + SEGMENT : VOCAB;
    const int begin = segment * SEGMENT + tid * CHUNK, stop = begin + CHUNK < end ? begin + CHUNK : end;
    u64 chunk = 0;
    for (int i = begin; i < stop; ++i) chunk += weight(i);
    u64 total;
    const u64 before = mojo::block_exclusive_sum<THREADS>(chunk, scan, total);
    if (before <= point && point < before + chunk) {
      u64 acc = before;
      for (int i = begin; i < stop; ++i) {
        acc += weight(i);
        if (acc > point) {
          s.chosen = i;
          break;
        }
      }
    }
    mojo::sync_block();
  }
  const long long chosen = s.chosen;
  mojo::sync_block();  // every thread has read s before the caller's next use of it
  return chosen;
}

template <class T, class I, int VOCAB, int VEC, int THREADS>
__device__ __forceinline__ void sample(long long* __restrict__ tokens, float* __restrict__ logprobs,
                                       const T* __restrict__ logits, long long stride, const I* __restrict__ top_k,
                                       const float* __restrict__ top_p, const float* __restrict__ min_p,
                                       const long long* __restrict__ seed, long long* __restrict__ offset) {
  static_assert(VOCAB % VEC == 0, "VEC must divide VOCAB");
  __shared__ Shared s;
  __shared__ u64 scan[2 * THREADS];
  const unsigned tid = mojo::thread_x();
  const long long r = mojo::block_x();
  const T* row = logits + r * stride;
  const long long k = (long long)top_k[r];
  const float p = top_p[r], floor_p = min_p[r];
  const long long request_seed = seed[r], request_offset = offset[r];

  // The max and the sum of exp(l - max), online (as softmax.cu's wide rows).
  float m = mojo::neg_inf(), sum = 0.f;
  for_each<T, VOCAB, VEC, THREADS>(row, [&](int, float l) {
    if (!(l > mojo::neg_inf())) return;  // -inf and NaN weigh nothing
    if (l > m) {
      sum = sum * mojo::exp_approx(m - l);
      m = l;
    }
    sum += mojo::exp_approx(l - m);
  });
  const float row_max = mojo::block_reduce<THREADS>(m, s.reduce, mojo::Max());
  sum = sum == 0.f ? 0.f : sum * mojo::exp_approx(m - row_max);
  sum = mojo::block_sum<THREADS>(sum, s.reduce);
  m = row_max;

  auto count = [](float) { return 1ull; };
  auto weigh = [m](float l) { return mass(mojo::exp_approx(l - m)); };
  unsigned threshold = 0;
  if (k > 0 && k < VOCAB) threshold = select_threshold<T, VOCAB, VEC, THREADS>(row, 0u, u64(k), 0.f, count, s);
  if (p < 1.f) threshold = select_threshold<T, VOCAB, VEC, THREADS>(row, threshold, 0ull, p, weigh, s);

  const float floor_e = floor_p > 0.f ? floor_p : 0.f;  // exp(l - max) >= min_p: p >= min_p * p_max
  auto kept = [&](int i) {
    const float l = mojo::to_float(row[i]);
    const float e = mojo::exp_approx(l - m);
    return order_key<T>(l) >= threshold && e >= floor_e ? mass(e) : 0ull;
  };
  const long long token = draw<VOCAB, THREADS>(kept, mojo::random24(request_seed, request_offset, 0), k == 1, scan, s);
  if (tid == 0) {
    tokens[r] = token;
    if (logprobs != nullptr)
      logprobs[r] = token < 0 ? mojo::bits_to_float(0x7fc00000u)
                              : mojo::to_float(row[token]) - m - mojo::log_approx(sum);
    offset[r] = request_offset + 1;
  }
}

// What a request's logits are multiplied by: 1 / temperature, or 1 (left as they are) for a temperature of 0.
__device__ __forceinline__ float inverse_temperature(float t) { return t > 0.f ? 1.f / t : 1.f; }

template <class T, int VOCAB, int VEC, int THREADS, int BLOCKS>
__device__ __forceinline__ void scale_by_temperature(T* __restrict__ logits, long long stride,
                                                     const float* __restrict__ temperature) {
  constexpr int NV = VOCAB / VEC, PER_BLOCK = (NV + BLOCKS - 1) / BLOCKS;
  const long long b = mojo::block_x(), r = b / BLOCKS;
  const float inv_t = inverse_temperature(temperature[r]);
  if (inv_t == 1.f) return;
  T* row = logits + r * stride;
  const int first = int(b % BLOCKS) * PER_BLOCK, end = first + PER_BLOCK < NV ? first + PER_BLOCK : NV;
#pragma unroll 4
  for (int v = first + int(mojo::thread_x()); v < end; v += THREADS) {
    mojo::Pack<T, VEC> x = mojo::load<T, VEC>(row + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) x.v[j] = mojo::from_float<T>(mojo::to_float(x.v[j]) * inv_t);
    mojo::store<T, VEC>(row + v * VEC, x);
  }
}

template <class T, class I, int VOCAB, int THREADS>
__device__ __forceinline__ void apply_penalties(T* __restrict__ logits, long long stride, const I* __restrict__ ids,
                                                const I* __restrict__ counts, long long max_len,
                                                const float* __restrict__ repetition,
                                                const float* __restrict__ presence,
                                                const float* __restrict__ frequency,
                                                const float* __restrict__ temperature) {
  const unsigned tid = mojo::thread_x();
  const long long r = mojo::block_x();
  T* row = logits + r * stride;  // already scaled by step 0
  const float inv_t = inverse_temperature(temperature[r]);
  const float rep = repetition[r], pres = presence[r], freq = frequency[r];
  for (long long j = tid; j < max_len; j += THREADS) {
    const long long id = (long long)ids[r * max_len + j];
    if (id < 0 || id >= VOCAB) continue;
    const float c = float(counts[r * max_len + j]);
    float l = mojo::to_float(row[id]);
    l = l > 0.f ? l / rep : l * rep;
    l -= (freq * c + (c > 0.f ? pres : 0.f)) * inv_t;
    row[id] = mojo::from_float<T>(l);
  }
}

template <class T, class I, int VOCAB, int THREADS, int SPEC>
__device__ __forceinline__ void reject_sample(long long* __restrict__ out, long long* __restrict__ accepted,
                                              const I* __restrict__ draft_tokens, const T* __restrict__ draft_probs,
                                              const T* __restrict__ target_probs, const long long* __restrict__ seed,
                                              long long* __restrict__ offset) {
  __shared__ Shared s;
  __shared__ u64 scan[2 * THREADS];
  __shared__ int rejected_at;
  const unsigned tid = mojo::thread_x();
  const long long r = mojo::block_x();
  const long long request_seed = seed[r], request_offset = offset[r];
  const I* drafts = draft_tokens + r * SPEC;
  if (tid == 0) {
    int j = 0;
    for (; j < SPEC; ++j) {
      const long long d = (long long)drafts[j];
      if (d < 0 || d >= VOCAB) break;
      const float pd = mojo::to_float(draft_probs[(r * SPEC + j) * VOCAB + d]);
      const float pt = mojo::to_float(target_probs[(r * (SPEC + 1) + j) * VOCAB + d]);
      const float u = float(mojo::random24(request_seed, request_offset, unsigned(j))) * 0x1p-24f;
      if (!(u * pd < pt)) break;
    }
    rejected_at = j;
  }
  mojo::sync_block();
  const int j = rejected_at;
  const T* target = target_probs + (r * (SPEC + 1) + j) * VOCAB;
  const T* draft = j < SPEC ? draft_probs + (r * SPEC + j) * VOCAB : nullptr;
  const unsigned r24 = mojo::random24(request_seed, request_offset, SPEC);
  auto residual = [&](int i) {
    const float pt = mojo::to_float(target[i]);
    return mass(draft != nullptr ? pt - mojo::to_float(draft[i]) : pt);
  };
  long long token = draw<VOCAB, THREADS>(residual, r24, false, scan, s);
  if (token < 0 && draft != nullptr)  // target == draft wherever it is positive: draw from the target
    token = draw<VOCAB, THREADS>([&](int i) { return mass(mojo::to_float(target[i])); }, r24, false, scan, s);
  if (tid == 0) {
    for (int i = 0; i <= SPEC; ++i) out[r * (SPEC + 1) + i] = i < j ? (long long)drafts[i] : (i == j ? token : -1);
    accepted[r] = j;
    offset[r] = request_offset + 1;
  }
}

}  // namespace mojo_sampling

#define MOJO_KERNEL_sample(NAME, P)                                                                                  \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                          \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_SAMPLE_ARGS, P::dtype, P::index)) {                                        \
    mojo_sampling::sample<P::dtype, P::index, P::vocab, P::vec, P::threads>(tokens, logprobs, logits, stride, top_k, \
                                                                            top_p, min_p, seed, offset);             \
  }

#define MOJO_KERNEL_apply_temperature(NAME, P)                                                                       \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                          \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_TEMPERATURE_ARGS, P::dtype)) {                                             \
    mojo_sampling::scale_by_temperature<P::dtype, P::vocab, P::vec, P::threads, P::blocks>(logits, stride,          \
                                                                                           temperature);            \
  }
#define MOJO_KERNEL_apply_penalties_temperature(NAME, P)                                                             \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                          \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_PENALTY_ARGS, P::dtype, P::index)) {                                       \
    mojo_sampling::apply_penalties<P::dtype, P::index, P::vocab, P::threads>(logits, stride, ids, counts, max_len,  \
                                                                             repetition, presence, frequency,       \
                                                                             temperature);                          \
  }

#define MOJO_KERNEL_reject_sample(NAME, P)                                                                           \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                          \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_REJECT_ARGS, P::dtype, P::index)) {                                        \
    mojo_sampling::reject_sample<P::dtype, P::index, P::vocab, P::threads, P::spec>(                                \
        out, accepted, draft_tokens, draft_probs, target_probs, seed, offset);                                      \
  }
