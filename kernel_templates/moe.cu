// Mixture-of-experts routing: which experts each token goes to, the tokens
// sorted by expert for group_gemm, and the weighted sum back.
//
// moe_gate (one warp per token, ROWS tokens per block): scores =
//   softmax(logits) or sigmoid(logits); the experts are chosen by the score
//   plus the score-correction bias when there is one (else by the logit,
//   which orders them alike); with GROUPS > 1 (DeepSeek-V3) only the
//   TOP_GROUPS groups with the highest sums of their two best choices take
//   part. The TOP_K best (ties: the lower expert) in order, each weighted by
//   its score (no bias), renormalized to sum 1 when RENORMALIZE, times
//   `scaling`.
//   args: MOJO_MOE_GATE_ARGS (moe_args.h)
//   geometry: block = 32 * ROWS, grid = ceil(tokens / ROWS).
//
// moe_dispatch: the N = tokens * TOP_K (token, slot) pairs sorted by expert
//   (a stable counting sort: within an expert, in token order).
//   offsets[e] = the first sorted row of expert e, offsets[EXPERTS] = the
//   rows routed; sorted_ids[r] = the token of sorted row r (-1 past the
//   routed rows); positions[i] = the sorted row of pair i (-1 when its id is
//   outside [0, EXPERTS): a negative id skips the pair, as expert
//   parallelism masks the experts of other ranks).
//   Step 0, one block per expert: the block counts the pairs of this expert
//   and of the experts before it, then walks the ids in tiles (each loaded
//   coalesced into shared memory, a thread then taking a contiguous run of
//   it, so a block prefix sum gives each thread its first row). No atomics,
//   so the same order every run. Optional step 1 (GATHER): sorted_x[r] = x[sorted_ids[r]]
//   (embedding.cu's gather; zeros past the routed rows).
//   args, step 0: MOJO_MOE_DISPATCH_ARGS (moe_args.h)
//   geometry: block = THREADS, grid = EXPERTS.
//
// moe_combine: out[t] = sum over slots k of weights[t, k] * expert_out[positions[t, k]]
//   (slots in order, float accumulation; a negative position adds nothing).
//   args: MOJO_MOE_COMBINE_ARGS (moe_args.h)
//   geometry: rows op (as rms_norm.cu), block = THREADS * ROWS, grid = ceil(tokens / ROWS).
#include "embedding.cu"
#include "mojo_prelude.cuh"
#include "moe_args.h"

namespace mojo_moe {

// The better of two (choice, expert) candidates: higher choice, then lower expert.
__device__ __forceinline__ bool better(float a, int ea, float b, int eb) { return a > b || (a == b && ea < eb); }

template <class T, class I, int EXPERTS, int TOP_K, int SOFTMAX, int GROUPS, int TOP_GROUPS, int RENORMALIZE,
          int ROWS>
__device__ __forceinline__ void gate(float* __restrict__ weights, I* __restrict__ ids, const T* __restrict__ logits,
                                     const float* __restrict__ bias, float scaling, long long tokens) {
  constexpr int PER = (EXPERTS + 31) / 32;  // experts per lane: lane + 32 i
  constexpr int GROUP = EXPERTS / GROUPS;
  const int lane = int(mojo::thread_x() % 32);
  const long long token = (long long)mojo::block_x() * ROWS + mojo::thread_x() / 32;
  if (token >= tokens) return;  // the whole warp: its shuffles stay among its own lanes
  const float neg_inf = mojo::neg_inf();

  float score[PER], choice[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int e = lane + 32 * i;
    choice[i] = e < EXPERTS ? mojo::to_float(logits[token * EXPERTS + e]) : neg_inf;
  }
  if (SOFTMAX) {
    float m = neg_inf, sum = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i) m = mojo::max_f(m, choice[i]);
    m = mojo::group_reduce<32>(m, mojo::Max());
#pragma unroll
    for (int i = 0; i < PER; ++i) sum += (score[i] = mojo::exp_approx(choice[i] - m));
    const float inv = 1.f / mojo::group_sum<32>(sum);
#pragma unroll
    for (int i = 0; i < PER; ++i) score[i] *= inv;
  } else {
#pragma unroll
    for (int i = 0; i < PER; ++i) score[i] = 1.f / (1.f + mojo::exp_approx(-choice[i]));
  }
  if (bias != nullptr) {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = lane + 32 * i;
      choice[i] = e < EXPERTS ? score[i] + bias[e] : neg_inf;
    }
  }

  if (GROUPS > 1) {  // keep the experts of the TOP_GROUPS groups whose two best choices sum highest
    float group_score[GROUPS];
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
      float first = neg_inf, second = neg_inf;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int e = lane + 32 * i;
        if (e / GROUP != g) continue;
        if (choice[i] > first) second = first, first = choice[i];
        else if (choice[i] > second) second = choice[i];
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const float other_first = mojo::shfl_xor(first, offset), other_second = mojo::shfl_xor(second, offset);
        const float lo = first < other_first ? first : other_first;
        first = mojo::max_f(first, other_first);
        second = mojo::max_f(lo, mojo::max_f(second, other_second));
      }
      group_score[g] = GROUP > 1 ? first + second : first;
    }
    // The groups kept, a bit each (GROUPS <= 32): arrays indexed by a loop's variable would live in local
    // memory (64 bytes of stack).
    unsigned kept = 0;
#pragma unroll 1
    for (int n = 0; n < TOP_GROUPS; ++n) {
      int best = -1;
      float best_score = neg_inf;
#pragma unroll
      for (int g = 0; g < GROUPS; ++g)
        if (!(kept >> g & 1u) && (best < 0 || group_score[g] > best_score)) best = g, best_score = group_score[g];
      kept |= 1u << best;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = lane + 32 * i;
      if (e < EXPERTS && !(kept >> (e / GROUP) & 1u)) choice[i] = neg_inf;
    }
  }

  // Lane k keeps the k-th choice (TOP_K <= 32), and the first TOP_K lanes write them.
  int my_id = -1;
  float my_score = 0.f, total = 0.f;
#pragma unroll 1
  for (int k = 0; k < TOP_K; ++k) {
    float best = neg_inf, best_score = 0.f;
    int best_e = EXPERTS;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = lane + 32 * i;
      if (e < EXPERTS && choice[i] > neg_inf && better(choice[i], e, best, best_e))
        best = choice[i], best_e = e, best_score = score[i];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = mojo::shfl_xor(best, offset), other_score = mojo::shfl_xor(best_score, offset);
      const int other_e = int(mojo::float_to_bits(mojo::shfl_xor(mojo::bits_to_float(unsigned(best_e)), offset)));
      if (better(other, other_e, best, best_e)) best = other, best_e = other_e, best_score = other_score;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (lane + 32 * i == best_e) choice[i] = neg_inf;
    const float chosen_score = best_e < EXPERTS ? best_score : 0.f;
    if (lane == k) my_id = best_e < EXPERTS ? best_e : -1, my_score = chosen_score;
    total += chosen_score;
  }
  if (lane < TOP_K) {
    const float norm = RENORMALIZE && total > 0.f ? scaling / total : scaling;
    ids[token * TOP_K + lane] = I(my_id);
    weights[token * TOP_K + lane] = my_score * norm;
  }
}

// The counting reads the ids with lane-consecutive loads; the placement goes
// through a tile of one byte a pair in shared memory (kRouted: to this
// expert, kNowhere: to none), because the stable order wants each thread on
// a contiguous run, and a run per thread read straight from global memory
// made every warp load touch 32 lines.
enum : unsigned char { kElsewhere = 0, kRouted = 1, kNowhere = 2 };

template <class I, int EXPERTS, int TOP_K, int THREADS>
__device__ __forceinline__ void dispatch(I* __restrict__ offsets, I* __restrict__ sorted_ids,
                                         I* __restrict__ positions, const I* __restrict__ ids, long long pairs) {
  constexpr int PER = 16, TILE = PER * THREADS;  // PER: one 16-byte shared load a thread
  __shared__ unsigned long long scan[2 * THREADS];
  __shared__ mojo::Pack<unsigned char, PER> tile[THREADS];  // thread t's run: tile[t]
  const int e = int(mojo::block_x());
  const int tid = int(mojo::thread_x());
  unsigned long long mine = 0, below = 0;
  for (long long i = tid; i < pairs; i += THREADS) {
    const long long id = (long long)ids[i];
    mine += id == e;
    below += id >= 0 && id < e;
  }
  unsigned long long routed_here, routed_below;
  mojo::block_exclusive_sum<THREADS>(mine, scan, routed_here);
  mojo::block_exclusive_sum<THREADS>(below, scan, routed_below);
  if (tid == 0) {
    offsets[e] = I(routed_below);
    if (e == EXPERTS - 1) offsets[EXPERTS] = I(routed_below + routed_here);
  }
  long long row = (long long)routed_below;  // the next row of this expert
  for (long long first = 0; first < pairs; first += TILE) {
    for (int j = tid; j < TILE; j += THREADS) {
      const long long i = first + j;
      unsigned char flag = kElsewhere;  // also past the last pair
      if (i < pairs) {
        const long long id = (long long)ids[i];
        flag = id == e ? kRouted : (id < 0 || id >= EXPERTS) ? kNowhere : kElsewhere;
      }
      tile[j / PER].v[j % PER] = flag;
    }
    mojo::sync_block();
    const mojo::Pack<unsigned char, PER> run = tile[tid];
    unsigned long long count = 0;
#pragma unroll
    for (int k = 0; k < PER; ++k) count += run.v[k] == kRouted;
    unsigned long long in_tile;
    long long r = row + (long long)mojo::block_exclusive_sum<THREADS>(count, scan, in_tile);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const long long i = first + tid * PER + k;
      if (run.v[k] == kRouted) {
        sorted_ids[r] = I(i / TOP_K);
        positions[i] = I(r++);
      } else if (run.v[k] == kNowhere && e == 0) {
        positions[i] = I(-1);
      }
    }
    row += (long long)in_tile;
    mojo::sync_block();  // every run is read before the next tile overwrites it
  }
  if (e == EXPERTS - 1)  // the rows past the routed ones: no token
    for (long long r = (long long)(routed_below + routed_here) + tid; r < pairs; r += THREADS) sorted_ids[r] = I(-1);
}

template <class T, class I, int HIDDEN, int VEC, int THREADS, int ROWS, int TOP_K>
__device__ __forceinline__ void combine(T* __restrict__ out, const T* __restrict__ expert_out,
                                        const I* __restrict__ positions, const float* __restrict__ weights,
                                        long long tokens) {
  constexpr int NV = HIDDEN / VEC;
  const unsigned tid = mojo::thread_x();
  const long long token = (long long)mojo::block_x() * ROWS + tid / THREADS;
  if (token >= tokens) return;
  for (int v = int(tid % THREADS); v < NV; v += THREADS) {
    float acc[VEC] = {};
#pragma unroll 1
    for (int k = 0; k < TOP_K; ++k) {
      const long long row = (long long)positions[token * TOP_K + k];
      if (row < 0) continue;
      const float w = weights[token * TOP_K + k];
      const mojo::Pack<T, VEC> x = mojo::load<T, VEC>(expert_out + row * HIDDEN + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += w * mojo::to_float(x.v[j]);
    }
    mojo::Pack<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = mojo::from_float<T>(acc[j]);
    mojo::store<T, VEC>(out + token * HIDDEN + v * VEC, o);
  }
}

}  // namespace mojo_moe

// moe_gate asks for a full SM (32 registers a thread) where a lane holds at most 4 experts' scores, else half
// of one (64): 8 experts a lane and the groups' scores spilled 8 to 16 bytes at 32 (DeepSeek-V3's 256 experts
// in 8 groups).
namespace mojo_moe {
template <int ROWS, int EXPERTS, int GROUPS>
inline constexpr int kGateBlocksPerSm = mojo::kFullOccupancyBlocks<32 * ROWS> / (EXPERTS > 128 || GROUPS > 1 ? 2 : 1);
}  // namespace mojo_moe

#define MOJO_KERNEL_moe_gate(NAME, P)                                                                              \
  extern "C" __global__ void __launch_bounds__(32 * P::rows,                                                      \
                                               mojo_moe::kGateBlocksPerSm<P::rows, P::experts, P::groups>)         \
      NAME(MOJO_ARG_PARAMS(MOJO_MOE_GATE_ARGS, P::dtype, P::index)) {                                             \
    mojo::after_previous_kernels();                                                                                \
    mojo_moe::gate<P::dtype, P::index, P::experts, P::top_k, P::softmax, P::groups, P::top_groups, P::renormalize, \
                   P::rows>(weights, ids, logits, bias, scaling, tokens);                                         \
  }

#define MOJO_KERNEL_moe_dispatch(NAME, P)                                                                          \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                        \
      NAME(MOJO_ARG_PARAMS(MOJO_MOE_DISPATCH_ARGS, P::index)) {                                                   \
    mojo::after_previous_kernels();                                                                                \
    mojo_moe::dispatch<P::index, P::experts, P::top_k, P::threads>(offsets, sorted_ids, positions, ids, pairs);    \
  }
#define MOJO_KERNEL_moe_dispatch_gather(NAME, P) \
  MOJO_EMBEDDING_KERNEL(NAME, P::dtype, P::index, P::hidden, P::vec, P::gather_threads, P::rows)

#define MOJO_KERNEL_moe_combine(NAME, P)                                                                           \
  extern "C" __global__ void __launch_bounds__(P::threads * P::rows, mojo::kFullOccupancyBlocks<P::threads * P::rows>)\
      NAME(MOJO_ARG_PARAMS(MOJO_MOE_COMBINE_ARGS, P::dtype, P::index)) {                                          \
    mojo::after_previous_kernels();                                                                                \
    mojo_moe::combine<P::dtype, P::index, P::hidden, P::vec, P::threads, P::rows, P::top_k>(                       \
        out, expert_out, positions, weights, tokens);                                                              \
  }
