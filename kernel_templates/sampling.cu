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
// sample (CHUNKS blocks per request, a plan of kPhases launches, or for a
//   small batch all of them in one cooperative launch): a token
//   drawn from softmax(logits[r]) kept to its top_k (0: all; ties with the
//   k-th logit are kept), then to the smallest set of highest tokens holding
//   top_p of that mass, then to tokens with probability >= min_p times the
//   highest's. No sort and no softmax in memory: the thresholds are found by
//   radix select on the logits' order keys (8 bits a phase, 2 to 4 phases a
//   filter), with counts or fixed-point probability masses per bin, and the
//   draw is the inverse CDF over the kept tokens in vocabulary order at the
//   request's Philox uniform. top_k = 1 is greedy: the first of the highest
//   logits, no random number. A row with no finite logit gives token -1.
//   Optional logprobs: log_softmax(logits) at the token (before any filter).
//   The phases are described at sample() below.
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
// temperature step, CHUNKS for sample and SPEC for reject_sample. Geometry:
// block = THREADS, grid = rows (the temperature step: rows * BLOCKS; sample:
// rows * CHUNKS, each phase, and sample_cooperative's launch, whose blocks
// must all be resident). Kernel args (sampling_args.h):
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

// The logit whose order key is `key` (order_key's inverse; key 0 gives a NaN): what tied tokens share.
template <class T> __device__ __forceinline__ float key_logit(unsigned key) {
  constexpr int SHIFT = 32 - kKeyBits<T>;
  const unsigned b = key << SHIFT;  // a 16-bit dtype's dropped low bits are 0 in the logit
  return mojo::bits_to_float(b & 0x80000000u ? b & 0x7fffffffu : ~b & ~((1u << SHIFT) - 1u));
}

// draw's shared memory.
struct Shared {
  u64 lane_sums[32];  // per warp's segment
  unsigned prefix;
  u64 want;
  long long chosen;
};

// Index i drawn with probability weight(i) / sum of weights, by the inverse
// CDF in index order at r / 2^24 (greedy: the first index of nonzero
// weight); -1 when every weight is 0. Two levels, so that the whole row is
// read with coalesced loads (lane l of a warp reads index base + l: one
// 128-byte line a warp load, where a chunk per thread made each warp load
// touch 32 lines): each warp sums one contiguous segment of the row, one
// warp finds the segment that holds the point, then the block sums that
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
  if (tid == 0) s.chosen = -1;
  const int segment_end = warp * SEGMENT + SEGMENT < VOCAB ? warp * SEGMENT + SEGMENT : VOCAB;
  u64 mine = 0, segment_sum;
  for (int i = warp * SEGMENT + lane; i < segment_end; i += 32) mine += weight(i);
  mojo::warp_inclusive_sum(mine, segment_sum);
  if (lane == 0) s.lane_sums[warp] = segment_sum;
  mojo::sync_block();
  if (tid < 32) {  // warp 0, lane w: whether segment w holds the point, and where within it
    const u64 segment_weight = tid < WARPS ? s.lane_sums[tid] : 0ull;
    u64 total;
    const u64 through = mojo::warp_inclusive_sum(segment_weight, total);
    const u64 point = greedy ? 0 : scale(total, r24), before = through - segment_weight;
    if (total == 0 && tid == 0) s.prefix = WARPS;  // none: every weight is 0
    if (before <= point && point < through) {      // one lane, when total > 0 (point < total)
      s.prefix = unsigned(tid);
      s.want = point - before;
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

// ---- sample: a plan of kPhases<T> launches of one kernel ----------------------------
// Row r is split into CHUNKS chunks of vectors, block (r, c) reads chunk c,
// and the blocks of a row pass their parts on through the workspace. Phase:
//   0           stats: each chunk's max and sum of exp(l - max) (online), and
//               its histogram of top-k's first digit (counts need no max);
//   1 .. D-1    top-k: the radix select of the k-th highest key, digit d (8
//               bits) in phase d; phase 1 first picks digit 0 from phase 0's
//               histograms, in every block. Where THREADS or fewer keys lie at
//               or above the last digit's prefix (top-k's survivors and the
//               keys they may tie with: about k on most rows), its blocks also
//               keep those tokens in the workspace, and its merge finishes the
//               row there, one candidate a thread: top-p, min-p and the draw
//               (finish_from_candidates); the later phases return at once;
//   D           on a top-k row with more survivors (ties with the k-th key),
//               for k <= THREADS: the keys above the k-th (fewer than k) to the
//               workspace, and the merge does top-p and min-p over them and the
//               ties as one weight, and places the draw's point for phase
//               2D + 1 (finish_from_candidates); the phases between return;
//   D .. 2D-1   top-p: the select of the highest key where the mass from the
//               top reaches top_p of the mass top-k kept, digit d in phase D + d;
//               without min-p, each phase's merge also adds up what each chunk
//               keeps above the digit picked (in slot entry 256), and the last
//               one places the draw's point;
//   2D          each chunk's kept mass; the row's last block finds the chunk
//               that holds the draw's point (nothing to do where top-p placed it);
//   2D + 1      that chunk's block finds the token.
// A select phase histograms its chunk's weights (counts, or masses) by the
// digit into kCopies copies in shared memory: lane l adds to copy l % kCopies,
// and a thread adds a run of its keys in one bin as one update (BinRun), so
// that tied keys make no more atomics collide than spread ones. Each block
// writes its histogram, and the row's last block to arrive (mojo::arrive)
// merges them and picks the digit. Phase 0 has no such merge: launched on
// its own, it zeroes the later phases' counters (the workspace comes
// uncleared), so its own cannot be trusted. The histograms alternate between two buffers by phase parity,
// since phase 1 reads phase 0's while writing its own. A filter a row does
// not use makes its phases return at once. Every phase reads each chunk once
// at most. A top-k row (k <= THREADS) reads the row D times, or D + 1 and one
// chunk with ties at its k-th key (all equal, say): the time depends on the
// values by that much. Other rows (no top-k, or k > THREADS) read it at most
// 2D + 1 + 1/CHUNKS times, whatever the values.
// Where the grid fits on half the SMs (a batch of one or two at Qwen3's
// vocabulary), every phase runs in one cooperative launch (sample_cooperative):
// the same phases, a barrier of the row's blocks between them instead of the
// end of a launch, the phases a row does not need skipped, and the counters in
// sync words (zero at the start, and left so).
template <class T> constexpr int kRowWords = MOJO_SAMPLE_ROW_WORDS(kKeyBits<T>);
template <class T> constexpr int kDigits = kKeyBits<T> / 8;
template <class T> constexpr int kPhases = MOJO_SAMPLE_PHASES(kKeyBits<T>);
constexpr int kCopies = 16;

template <int THREADS>
struct SampleShared {
  u64 hist[256 * kCopies];  // [digit value][copy]
  u64 bins[256];
  u64 lane_sums[32];
  u64 scan[2 * THREADS];
  float reduce[32];
  u64 want;
  unsigned prefix;
  int last;
  long long chosen;
};

template <int THREADS> __device__ __forceinline__ void clear_histogram(SampleShared<THREADS>& s) {
  for (int i = int(mojo::thread_x()); i < 256 * kCopies; i += THREADS) s.hist[i] = 0;
  mojo::sync_block();
}

// Adds w to bin `bin` of the calling lane's copy: a mass, as a 64-bit add (mojo::shared_add), or a count, as
// one 32-bit add to the low word (a block counts fewer than 2^32 keys: a count never carries).
template <int THREADS> __device__ __forceinline__ void add_to_bin(SampleShared<THREADS>& s, unsigned bin, u64 w) {
  mojo::shared_add(&s.hist[bin * kCopies + mojo::thread_x() % kCopies], w);
}
template <int THREADS> __device__ __forceinline__ void add_to_bin(SampleShared<THREADS>& s, unsigned bin, unsigned n) {
  mojo::shared_add(reinterpret_cast<unsigned*>(&s.hist[bin * kCopies + mojo::thread_x() % kCopies]), n);
}

// A thread's consecutive keys in one bin, added to the histogram as one update when the bin changes and at the
// end (flush): counts (as 32-bit adds) or masses. On a row of ties (all equal, say) every key of a block falls
// in one bin, so each update of the block's threads queued behind the last at the same few addresses (CUB's
// histogram documents the same slowdown); with runs a thread makes one update a phase there. Spread keys change
// bin at almost every key: a compare more a key, the same updates.
struct BinRun {
  bool counts;
  unsigned bin = 256u;  // none yet
  u64 weight = 0;
  template <int THREADS> __device__ __forceinline__ void add(SampleShared<THREADS>& s, unsigned b, u64 w) {
    if (b != bin) {
      flush(s);
      bin = b;
      weight = 0;
    }
    weight += w;
  }
  template <int THREADS> __device__ __forceinline__ void flush(SampleShared<THREADS>& s) const {
    if (weight == 0) return;
    if (counts)
      add_to_bin(s, bin, unsigned(weight));
    else
      add_to_bin(s, bin, weight);
  }
};

// The block's histogram, its copies summed, to out[0 .. 256).
template <int THREADS> __device__ __forceinline__ void write_histogram(SampleShared<THREADS>& s, u64* out) {
  mojo::sync_block();
  for (int b = int(mojo::thread_x()); b < 256; b += THREADS) {
    u64 sum = 0;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) sum += s.hist[b * kCopies + i];
    out[b] = sum;
  }
}

// Whether this block is the last of its row's CHUNKS to arrive at `counter`; the last one may then read
// every block's writes made before its arrival (with load_gpu).
template <int CHUNKS, int THREADS>
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, SampleShared<THREADS>& s) {
  mojo::fence_gpu();  // each thread's writes, before the arrival
  mojo::sync_block();
  if (mojo::thread_x() == 0) s.last = mojo::arrive(counter) == unsigned(CHUNKS - 1);
  mojo::sync_block();
  const bool last = s.last != 0;
  if (last) mojo::fence_gpu();
  return last;
}

// s.bins: the sum over the row's chunks of their histograms in `slots` (loads first).
template <int CHUNKS, int THREADS>
__device__ __forceinline__ void merge_histograms(const u64* slots, SampleShared<THREADS>& s) {
  for (int b = int(mojo::thread_x()); b < 256; b += THREADS) {
    u64 v[CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) v[c] = mojo::load_gpu(slots + c * kSlot + b);
    u64 sum = 0;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) sum += v[c];
    s.bins[b] = sum;
  }
  mojo::sync_block();
}

// Picks the digit: the value b such that the weight in bins b..255 reaches `want` (bin 0 when the
// weight never does; want 0 with fraction > 0: fraction of the total, rounded up, at least 1). Sets
// s.prefix to (prefix << 8) | b and s.want to what is still wanted within bin b. Every thread calls it.
template <int THREADS>
__device__ __forceinline__ void pick_digit(unsigned prefix, u64 want, float fraction, SampleShared<THREADS>& s) {
  const unsigned tid = mojo::thread_x();
  u64 sum = 0;  // warp 0: lane i sums bins 255 - 8i down to 248 - 8i
  if (tid < 32)
    for (int b = 255 - 8 * int(tid); b > 247 - 8 * int(tid); --b) sum += s.bins[b];
  if (tid < 32) s.lane_sums[tid] = sum;
  if (tid == 0) {  // bin 0, when the weight never reaches want
    s.prefix = prefix << 8;
    s.want = want;
  }
  mojo::sync_block();
  if (tid < 32) {  // the lane whose bins hold the point where the weight from the top reaches want
    u64 above = 0, total = 0;
    for (int i = 0; i < 32; ++i) {
      if (i < int(tid)) above += s.lane_sums[i];
      total += s.lane_sums[i];
    }
    if (fraction > 0.f) {
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
}

// s.lane_sums[c] for each chunk c < CHUNKS: its kept mass in `above`'s slots (entry 256; none when null)
// plus its weights in bins first_bin .. 255 of `bins`' slots. Ends synced.
template <int CHUNKS, int THREADS>
__device__ __forceinline__ void kept_masses(const u64* above, const u64* bins, int first_bin, SampleShared<THREADS>& s) {
  const unsigned tid = mojo::thread_x();
  mojo::sync_block();  // every thread is done with lane_sums' last use
  if (tid < 32)
    s.lane_sums[tid] = above != nullptr && int(tid) < CHUNKS ? mojo::load_gpu(above + tid * kSlot + 256) : 0ull;
  mojo::sync_block();
  for (int i = int(tid); i < CHUNKS * 256; i += THREADS) {
    const int c = i / 256, b = i % 256;
    const u64 v = b >= first_bin ? mojo::load_gpu(bins + c * kSlot + b) : 0ull;
    if (v != 0) mojo::shared_add(&s.lane_sums[c], v);
  }
  mojo::sync_block();
}

// Warp 0 of the placing block, lane c for chunk c: the chunk that holds the draw's point and the point
// within it, from the chunks' kept masses in s.lane_sums (greedy: the point 0, the first kept token).
template <int CHUNKS, int THREADS>
__device__ __forceinline__ void place_point(const SampleShared<THREADS>& s, bool greedy, long long seed,
                                            long long offset, RowState* state) {
  static_assert(CHUNKS <= 32, "a lane a chunk");
  const int lane = int(mojo::thread_x());
  const u64 kept = lane < CHUNKS ? s.lane_sums[lane] : 0ull;
  u64 total;
  const u64 through = mojo::warp_inclusive_sum(kept, total);
  const u64 point = greedy ? 0ull : scale(total, mojo::random24(seed, offset, 0)), before = through - kept;
  if (total == 0 && lane == 0) {  // nothing kept: no token
    state->chunk = -1;
    state->point = point;
  }
  if (before <= point && point < through) {  // one lane, when total > 0 (point < total)
    state->chunk = lane;
    state->point = point - before;
  }
}

constexpr int kTokenWritten = -2;  // RowState::chunk once the row's token is written
constexpr int kNotPlaced = -3;     // RowState::chunk until the draw's point is placed (-1 and up: placed)

// Whether `key` counts in digit d's histogram of a select: at or above its floor and, past the first
// digit, in the region of the digits picked so far (`prefix`).
__device__ __forceinline__ bool in_select(unsigned key, unsigned floor, int d, int shift, unsigned prefix) {
  return key >= floor && (d == 0 || (key >> (shift + 8)) == prefix);
}

// A token's weight in the draw: its mass where its key passes the filters' threshold and its exp(l - max)
// min-p's floor, else 0.
__device__ __forceinline__ u64 kept_mass(unsigned key, float e, unsigned threshold, float floor_e) {
  return key >= threshold && e >= floor_e ? mass(e) : 0ull;
}

// The keys at or above the prefix pick_digit just chose, in a count select for the k highest: those above
// its region (k less what is still wanted there) and those in it.
template <int THREADS> __device__ __forceinline__ unsigned at_or_above_prefix(long long k, const SampleShared<THREADS>& s) {
  return unsigned(u64(k) - s.want + s.bins[s.prefix & 255u]);
}

// Top-p's select over the weights the block's threads hold (a key each, its weight 0 for none), digit by
// digit as its phases do over the row, among the keys at or above `threshold`: the kept keys' new threshold
// (`threshold` itself without top-p). Every thread calls it and gets the result.
template <class T, int THREADS>
__device__ __forceinline__ unsigned top_p_threshold(unsigned key, u64 weight, unsigned threshold, float p,
                                                    SampleShared<THREADS>& s) {
  constexpr int D = kDigits<T>, KEY_BITS = kKeyBits<T>;
  if (!(p < 1.f)) return threshold;
  unsigned prefix = 0;
  u64 want = 0;
#pragma unroll 1  // once a row: one copy of pick_digit, not D
  for (int d = 0; d < D; ++d) {
    const int shift = KEY_BITS - 8 * (d + 1);
    clear_histogram(s);
    if (weight != 0 && in_select(key, threshold, d, shift, prefix)) add_to_bin(s, (key >> shift) & 255u, weight);
    write_histogram(s, s.bins);
    mojo::sync_block();
    pick_digit<THREADS>(prefix, want, d == 0 ? p : 0.f, s);
    prefix = s.prefix;
    want = s.want;
  }
  return prefix;
}

// A candidate token of the row's list (top-k's survivors, or those above a tied k-th key), as a thread holds it.
template <class T> struct Candidate {
  unsigned key = 0;  // 0 (NaN's, weight 0) for a thread without one
  float e = 0.f;     // exp(l - max)
  u64 index = 0;
  __device__ __forceinline__ Candidate(const u64* list, unsigned count, float m) {
    if (mojo::thread_x() >= count) return;
    const u64 c = mojo::load_gpu(list + mojo::thread_x());
    const float l = mojo::bits_to_float(unsigned(c));
    key = order_key<T>(l);
    e = mojo::exp_approx(l - m);
    index = c >> 32;
  }
};

// Thread 0: the row's token, its log_softmax (before the filters; NaN for none) and the request's next offset.
template <class T, int CHUNKS>
__device__ __forceinline__ void write_token(long long token, long long r, const T* row, float m, const float* row_stats,
                                            long long* tokens, float* logprobs, long long* offset) {
  tokens[r] = token;
  if (logprobs != nullptr)
    logprobs[r] = token < 0 ? mojo::bits_to_float(0x7fc00000u)
                            : mojo::to_float(row[token]) - m - mojo::log_approx(mojo::OnlineSum::of_parts(row_stats, CHUNKS).sum);
  offset[r] = offset[r] + 1;
}

// What the phases after top-k's select do, done by one block for a row whose top-k survivors fit it:
// `count` <= THREADS candidates in `list` ((index << 32) | logit bits, in any order), one a thread. Top-p's
// select over their masses among those at or above `threshold` (top-k's), then min-p, then the draw in
// vocabulary order: the same integer sums as the phases', so the same token. Two cases:
// - tied == 0: the candidates are every key at or above `threshold` (top-k's last merge). The draw is made
//   here: thread 0 writes the token, and RowState::chunk = kTokenWritten.
// - tied > 0: ties with the k-th key. The candidates are the keys above `threshold` (count < THREADS), and
//   the `tied` tokens of key `threshold` count as one weight (thread `count` holds it; all kept or none),
//   tied_counts[c * kSlot] of them in chunk c (top-k's last histograms). The chunks' kept masses place the
//   draw's point (place_point), and the walk phase finds the token in vocabulary order.
// `offset` is every row's (write_token advances row r's). One call site in sample(): a second inlined copy
// of the select made ptxas spill (f32 at B 1).
template <class T, int THREADS, int CHUNK_ELEMENTS, int CHUNKS>
__device__ __forceinline__ void finish_from_candidates(const u64* list, unsigned count, unsigned threshold, u64 tied,
                                                       const u64* tied_counts, float m, float p, float floor_e,
                                                       bool greedy, long long seed, long long* offset, long long r,
                                                       const T* row, const float* row_stats, long long* tokens,
                                                       float* logprobs, RowState* state, SampleShared<THREADS>& s) {
  const unsigned tid = mojo::thread_x();
  const Candidate<T> mine(list, count, m);
  const float tied_e = mojo::exp_approx(key_logit<T>(threshold) - m);
  const bool holds_tied = tied != 0 && tid == count;
  const unsigned kept_from = top_p_threshold<T, THREADS>(holds_tied ? threshold : mine.key,
                                                         holds_tied ? tied * mass(tied_e) : mass(mine.e), threshold, p, s);
  const u64 kept = kept_mass(mine.key, mine.e, kept_from, floor_e);
  if (tied != 0) {  // each chunk's kept mass, its candidates' and its tied tokens', places the point
    const u64 tied_kept = kept_mass(threshold, tied_e, kept_from, floor_e);  // a tied token's
    if (tid < 32) s.lane_sums[tid] = 0;
    mojo::sync_block();
    if (kept != 0) mojo::shared_add(&s.lane_sums[int(mine.index) / CHUNK_ELEMENTS], kept);
    mojo::sync_block();
    if (int(tid) < CHUNKS) s.lane_sums[tid] += mojo::load_gpu(tied_counts + tid * kSlot) * tied_kept;
    mojo::sync_block();
    if (tid == 0) state->threshold = kept_from;
    if (tid < 32) place_point<CHUNKS>(s, greedy, seed, offset[r], state);
    return;
  }
  u64* masses = s.scan;
  u64* indices = s.scan + THREADS;
  masses[tid] = kept;
  indices[tid] = mine.index;
  if (tid == 0) s.chosen = -1;
  mojo::sync_block();
  u64 total = 0, before = 0;  // the kept mass of all candidates, and of those before this one in the vocabulary
  for (unsigned j = 0; j < count; ++j) {
    total += masses[j];
    if (indices[j] < mine.index) before += masses[j];
  }
  const u64 point = greedy ? 0ull : scale(total, mojo::random24(seed, offset[r], 0));
  if (kept != 0 && before <= point && point < before + kept) s.chosen = (long long)mine.index;
  mojo::sync_block();
  if (tid == 0) {
    write_token<T, CHUNKS>(s.chosen, r, row, m, row_stats, tokens, logprobs, offset);
    state->chunk = kTokenWritten;
  }
}

// COOPERATIVE: called by sample_cooperative, whose counters come zeroed.
template <class T, class I, int VOCAB, int VEC, int THREADS, int CHUNKS, bool COOPERATIVE = false>
__device__ __forceinline__ void sample(long long* __restrict__ tokens, float* __restrict__ logprobs,
                                       const T* __restrict__ logits, long long stride, const I* __restrict__ top_k,
                                       const float* __restrict__ top_p, const float* __restrict__ min_p,
                                       const long long* __restrict__ seed, long long* __restrict__ offset,
                                       u64* __restrict__ partials, u64* __restrict__ candidates, float* __restrict__ stats,
                                       RowState* __restrict__ states, unsigned* __restrict__ counters, int phase) {
  static_assert(VOCAB % VEC == 0, "VEC must divide VOCAB");
  static_assert(CHUNKS <= 32, "a row's chunks' kept masses sit in one warp's lane_sums");
  constexpr int D = kDigits<T>, PHASES = kPhases<T>, KEY_BITS = kKeyBits<T>;
  __shared__ SampleShared<THREADS> s;
  const unsigned tid = mojo::thread_x();
  const long long r = mojo::block_x() / CHUNKS;
  const int c = int(mojo::block_x() % CHUNKS);
  using Chunk = mojo::RowChunk<T, VOCAB, VEC, THREADS, CHUNKS>;
  const Chunk chunk(c);
  const T* row = logits + r * stride;
  float* row_stats = stats + r * CHUNKS * 2;
  u64* slots = partials + (r * 2 + (phase & 1)) * CHUNKS * kSlot;  // this phase's buffer, a slot a chunk
  unsigned* const row_counters = counters + r * kRowWords<T>;
  unsigned* counter = row_counters + phase;
  unsigned* candidate_tickets = row_counters;  // phase 0 has no arrivals: its counter numbers candidates
  u64* row_candidates = candidates + r * THREADS;
  const long long k = (long long)top_k[r];
  const bool by_top_k = k > 0 && k < VOCAB;

  if (phase == 0) {  // stats, top-k's first histogram, and the row's state and counters made ready
    if (by_top_k) clear_histogram(s);
    mojo::OnlineSum part;
    BinRun run{true};  // counts
    chunk.for_each(row, [&](int, float l) {
      part.add(l);
      if (by_top_k) run.add(s, order_key<T>(l) >> (KEY_BITS - 8), 1ull);
    });
    if (by_top_k) {
      run.flush(s);
      write_histogram(s, slots + c * kSlot);
    }
    part = part.block<THREADS>(s.reduce);
    if (tid == 0) {
      row_stats[2 * c] = part.max;
      row_stats[2 * c + 1] = part.sum;
    }
    if (c == 0) {
      if (tid == 0) {  // every field, so that no phase reads one no phase wrote (initcheck)
        states[r].want = 0;
        states[r].point = 0;
        states[r].threshold = 0u;
        states[r].prefix = 0u;
        states[r].chunk = kNotPlaced;
        states[r].candidates = 0u;
      }
      if (!COOPERATIVE)
        for (int i = int(tid); i < PHASES; i += THREADS) row_counters[i] = 0u;
    }
    return;
  }

  const unsigned threshold = states[r].threshold;
  const float m = mojo::OnlineSum::of_parts(row_stats, CHUNKS).max;
  const float p = top_p[r];
  const bool placed_by_top_p = p < 1.f && !(min_p[r] > 0.f);  // every kept token is in top-p's last histogram
  const float floor_e = min_p[r] > 0.f ? min_p[r] : 0.f;      // exp(l - max) >= min_p: p >= min_p * p_max
  const bool placed = states[r].chunk != kNotPlaced;  // or the token written
  // A row that finishes from a list of candidates (finish_from_candidates): the count, top-k's threshold,
  // and the tokens tied at it that are not in the list.
  bool from_candidates = false;
  unsigned listed = 0, kth_key = threshold;
  u64 tied = 0;
  auto list_candidate = [&](int i, float l) {  // in a slot of the row's list, numbered as they come
    const unsigned ticket = mojo::take_ticket(candidate_tickets);
    if (ticket < unsigned(THREADS)) row_candidates[ticket] = (u64(unsigned(i)) << 32) | mojo::float_to_bits(l);
  };
  const u64 above_kth = phase == D && by_top_k && !placed ? u64(k) - states[r].want : ~0ull;
  if (above_kth < u64(THREADS)) {  // ties with the k-th key left too many survivors: list the keys above it
    chunk.for_each(row, [&](int i, float l) {
      if (order_key<T>(l) > threshold) list_candidate(i, l);
    });
    if (!last_to_arrive<CHUNKS>(counter, s)) return;
    from_candidates = true;
    listed = unsigned(above_kth);
    tied = states[r].candidates - above_kth;
  } else if (phase < 2 * D) {  // a digit of top-k's or top-p's select
    const bool by_count = phase < D;
    const int d = by_count ? phase : phase - D, shift = KEY_BITS - 8 * (d + 1);
    if (by_count ? !by_top_k : (!(p < 1.f) || placed)) return;
    unsigned prefix = states[r].prefix, at_or_above = states[r].candidates;
    u64 want = states[r].want;
    if (by_count && d == 1) {  // digit 0, the same in every block
      merge_histograms<CHUNKS>(partials + r * 2 * CHUNKS * kSlot, s);
      pick_digit<THREADS>(0u, u64(k), 0.f, s);
      prefix = s.prefix;
      want = s.want;
      at_or_above = at_or_above_prefix(k, s);
    }
    // top-k's last digit, with few keys at or above its prefix: keep those (key >> 8 >= prefix) as candidates
    const bool keep_candidates = by_count && d == D - 1 && at_or_above <= unsigned(THREADS);
    const unsigned floor = by_count ? 0u : threshold;
    clear_histogram(s);
    BinRun run{by_count};
    chunk.for_each(row, [&](int i, float l) {
      const unsigned key = order_key<T>(l);
      if (keep_candidates && (key >> 8) >= prefix) list_candidate(i, l);
      if (!in_select(key, floor, d, shift, prefix)) return;
      const u64 w = by_count ? 1ull : mass(mojo::exp_approx(l - m));
      if (w != 0) run.add(s, (key >> shift) & 255u, w);
    });
    run.flush(s);
    write_histogram(s, slots + c * kSlot);
    if (!last_to_arrive<CHUNKS>(counter, s)) return;
    merge_histograms<CHUNKS>(slots, s);
    pick_digit<THREADS>(d == 0 ? 0u : prefix, d == 0 && by_count ? u64(k) : want, d == 0 && !by_count ? p : 0.f, s);
    if (tid == 0) {  // field by field: a whole RowState copied went through local memory
      states[r].prefix = s.prefix;
      states[r].want = s.want;
      if (by_count) states[r].candidates = at_or_above_prefix(k, s);
      if (d == D - 1) states[r].threshold = s.prefix;
    }
    if (keep_candidates) {  // the rest of the row, here (below)
      from_candidates = true;
      listed = at_or_above;
      kth_key = s.prefix;
    } else if (!by_count && placed_by_top_p) {  // each chunk keeps its mass above the prefix, and the bins above the pick
      const u64* before = d == 0 ? nullptr : partials + (r * 2 + ((phase - 1) & 1)) * CHUNKS * kSlot;
      const int pick = int(s.prefix & 255u);
      kept_masses<CHUNKS>(before, slots, d == D - 1 ? pick : pick + 1, s);  // the last digit keeps its pick too
      if (d < D - 1 && int(tid) < CHUNKS) slots[tid * kSlot + 256] = s.lane_sums[tid];
      if (d == D - 1 && tid < 32) place_point<CHUNKS>(s, k == 1, seed[r], offset[r], states + r);
    }
    if (!from_candidates) return;
  }
  if (from_candidates) {
    finish_from_candidates<T, THREADS, Chunk::CV * VEC, CHUNKS>(
        row_candidates, listed, kth_key, tied, partials + (r * 2 + ((D - 1) & 1)) * CHUNKS * kSlot + (kth_key & 255u),
        m, p, floor_e, k == 1, seed[r], offset, r, row, row_stats, tokens, logprobs, states + r, s);
    return;
  }

  // The draw: the inverse CDF in vocabulary order over the kept tokens' masses.
  auto kept = [&](float l) { return kept_mass(order_key<T>(l), mojo::exp_approx(l - m), threshold, floor_e); };
  if (phase == 2 * D) {  // each chunk's kept mass; the last block places the point
    if (placed) return;  // by top-p's last merge, among ties, or the token written
    u64 mine = 0;
    chunk.for_each(row, [&](int, float l) { mine += kept(l); });
    u64 total;
    mojo::block_exclusive_sum<THREADS>(mine, s.scan, total);
    if (tid == 0) slots[c * kSlot + 256] = total;
    if (!last_to_arrive<CHUNKS>(counter, s)) return;
    kept_masses<CHUNKS>(slots, slots, 256, s);
    if (tid < 32) place_point<CHUNKS>(s, k == 1, seed[r], offset[r], states + r);
    return;
  }

  // phase 2D + 1: the chunk that holds the point walks to it (chunk 0 reports a row with none).
  const int holder = states[r].chunk;
  const u64 point = states[r].point;
  if (holder == kTokenWritten || c != (holder < 0 ? 0 : holder)) return;
  long long token = -1;
  if (holder >= 0) {
    constexpr int PER_THREAD = (Chunk::CV + THREADS - 1) / THREADS;  // vectors, contiguous
    const int begin = chunk.first + int(tid) * PER_THREAD;
    const int stop = begin + PER_THREAD < chunk.end ? begin + PER_THREAD : chunk.end;
    u64 mine = 0;
    for (int v = begin; v < stop; ++v) {
      const mojo::Pack<T, VEC> x = mojo::load<T, VEC>(row + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) mine += kept(mojo::to_float(x.v[j]));
    }
    if (tid == 0) s.chosen = -1;
    u64 total;
    const u64 before = mojo::block_exclusive_sum<THREADS>(mine, s.scan, total);
    if (before <= point && point < before + mine) {
      u64 acc = before;
      for (int v = begin; v < stop && s.chosen < 0; ++v)
        for (int j = 0; j < VEC; ++j) {
          acc += kept(mojo::to_float(row[v * VEC + j]));
          if (acc > point) {
            s.chosen = v * VEC + j;
            break;
          }
        }
    }
    mojo::sync_block();
    token = s.chosen;
  }
  if (tid == 0) write_token<T, CHUNKS>(token, r, row, m, row_stats, tokens, logprobs, offset);
}

// Whether phase `phase` does nothing for row r, by what every block of the row reads alike after a barrier:
// sample_cooperative then skips it and its barrier. (The phase itself returns at once in these cases too.)
template <class T, int VOCAB>
__device__ __forceinline__ bool phase_is_idle(int phase, int chunk_state, long long k, float p) {
  constexpr int D = kDigits<T>;
  if (chunk_state == kTokenWritten) return true;
  const bool by_top_k = k > 0 && k < VOCAB, placed = chunk_state != kNotPlaced;
  if (phase < D) return !by_top_k;
  if (phase < 2 * D) return placed || (!(p < 1.f) && !(phase == D && by_top_k));
  if (phase == 2 * D) return placed;
  return false;  // the walk
}

// Every phase of sample in one cooperative launch (every block resident at once): the row's blocks meet at a
// barrier after each phase instead of at the end of a launch, which a small batch's time is mostly made of.
// The same phases, so the same token. The counters are sync words (OpDef::sync_words): zero when the launch
// starts, and the row's last block done with them leaves them zero.
template <class T, class I, int VOCAB, int VEC, int THREADS, int CHUNKS>
__device__ __forceinline__ void sample_cooperative(long long* __restrict__ tokens, float* __restrict__ logprobs,
                                                   const T* __restrict__ logits, long long stride,
                                                   const I* __restrict__ top_k, const float* __restrict__ top_p,
                                                   const float* __restrict__ min_p, const long long* __restrict__ seed,
                                                   long long* __restrict__ offset, u64* __restrict__ partials,
                                                   u64* __restrict__ candidates, float* __restrict__ stats,
                                                   RowState* __restrict__ states, unsigned* __restrict__ counters,
                                                   int /*phase: 0, unused*/) {
  constexpr int PHASES = kPhases<T>;
  const long long r = mojo::block_x() / CHUNKS;
  unsigned* const row_counters = counters + r * kRowWords<T>;
  unsigned* const barriers = row_counters + PHASES;
  const long long k = (long long)top_k[r];
  const float p = top_p[r];
#pragma unroll 1
  for (int phase = 0; phase < PHASES; ++phase) {
    if (phase > 0 && phase_is_idle<T, VOCAB>(phase, states[r].chunk, k, p)) continue;  // phase 0 writes states
    sample<T, I, VOCAB, VEC, THREADS, CHUNKS, true>(tokens, logprobs, logits, stride, top_k, top_p, min_p, seed,
                                                    offset, partials, candidates, stats, states, counters, phase);
    if (phase + 1 < PHASES) mojo::sync_blocks(barriers + phase, CHUNKS);
  }
  mojo::leave_sync_words(row_counters, kRowWords<T>, CHUNKS);
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

// sample's two entry points: one phase a launch (`sample`), or every phase in one cooperative launch, whose grid
// must be resident at once: at least 2 blocks an SM (ptxas held LLVM's f32 kernel to 128 registers from 182; with
// phase 0 in it, 4 bytes spill on sm_90a), so that the grid fits on a quarter of the SMs. A launch a phase asks
// for 64 registers at any block size, the 2 blocks of 512 an SM that rows::chunk plans its grid for: left to
// itself ptxas took 98 at a batch of 32 (one block an SM: 288 blocks in 2.18 waves, not 1.09), and elsewhere held
// itself to 64 by spilling up to 64 bytes, where asked up front it fits them with none (sm_90a, both compilers).
#define MOJO_SAMPLE_KERNEL(NAME, P, FUNCTION, ...)                                                           \
  extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                                 \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_SAMPLE_ARGS, P::dtype, P::index)) {                                \
    mojo::after_previous_kernels();                                                                         \
    mojo_sampling::FUNCTION<P::dtype, P::index, P::vocab, P::vec, P::threads, P::chunks>(                   \
        tokens, logprobs, logits, stride, top_k, top_p, min_p, seed, offset, partials, candidates, stats, states, \
        counters, phase);                                                                                    \
  }
#define MOJO_KERNEL_sample(NAME, P) MOJO_SAMPLE_KERNEL(NAME, P, sample, P::threads, 1024 / P::threads)
#define MOJO_KERNEL_sample_cooperative(NAME, P) MOJO_SAMPLE_KERNEL(NAME, P, sample_cooperative, P::threads, 2)

#define MOJO_KERNEL_apply_temperature(NAME, P)                                                                       \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                          \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_TEMPERATURE_ARGS, P::dtype)) {                                             \
    mojo::after_previous_kernels();                                                                                 \
    mojo_sampling::scale_by_temperature<P::dtype, P::vocab, P::vec, P::threads, P::blocks>(logits, stride,          \
                                                                                           temperature);            \
  }
#define MOJO_KERNEL_apply_penalties_temperature(NAME, P)                                                             \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                          \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_PENALTY_ARGS, P::dtype, P::index)) {                                       \
    mojo::after_previous_kernels();                                                                                 \
    mojo_sampling::apply_penalties<P::dtype, P::index, P::vocab, P::threads>(logits, stride, ids, counts, max_len,  \
                                                                             repetition, presence, frequency,       \
                                                                             temperature);                          \
  }

// reject_sample streams two rows of probabilities a block: every block an SM can hold (2 of 1024 threads on
// sm_90a, 32 registers), asked up front; left to itself ptxas gave NVRTC's kernel 44 (one block an SM) and held
// LLVM's to 32 with 16 bytes of spills.
#define MOJO_KERNEL_reject_sample(NAME, P)                                                                           \
  extern "C" __global__ void __launch_bounds__(P::threads, mojo::kFullOccupancyBlocks<P::threads>)                  \
      NAME(MOJO_ARG_PARAMS(MOJO_SAMPLING_REJECT_ARGS, P::dtype, P::index)) {                                        \
    mojo::after_previous_kernels();                                                                                 \
    mojo_sampling::reject_sample<P::dtype, P::index, P::vocab, P::threads, P::spec>(                                \
        out, accepted, draft_tokens, draft_probs, target_probs, seed, offset);                                      \
  }
