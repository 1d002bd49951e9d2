// attention_batch.cuh: what attention's forward (attention.cu) and backward (sdpa_backward.cu) agree on: the
// sequences of a batch and the masks.
//
// Sequences: cu_q (int [batch + 1], cumulative query tokens) when given; else q_len > 0 tokens per sequence
// (decode); else one sequence of q_tokens. kv_info: paged: context lengths (int [batch], new tokens included);
// contiguous: cumulative key tokens (int [batch + 1]) or null (one sequence of kv_tokens).
//
// Masks, per query at absolute position pos = (kv_len - q_len) + token (the new tokens are the last of their
// sequence: chunked prefill, decode): causal: key <= pos; window (left size W): key >= pos - W; key < kv_len.
#pragma once

#include "mojo_prelude.cuh"

namespace mojo_attention {

__device__ __forceinline__ int min_i(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int max_i(int a, int b) { return a > b ? a : b; }

struct Batch {
  const int* cu_q;
  const int* kv_info;
  const int* block_table;
  int batch, q_tokens, kv_tokens, max_blocks, q_len;
  bool paged;
};

// Sequence s's queries [start, start + count). Garbage lengths (the runtime's debug checks report them) read
// nothing rather than out of bounds.
struct Queries {
  int start, count;
};
__device__ __forceinline__ Queries queries(const Batch& a, int s) {
  Queries q;
  if (a.cu_q != nullptr) {
    q.start = a.cu_q[s];
    q.count = a.cu_q[s + 1] - q.start;
  } else if (a.q_len > 0) {
    q.start = s * a.q_len;
    q.count = a.q_len;
  } else {
    q.start = 0;
    q.count = a.q_tokens;
  }
  if (q.start < 0 || q.count < 0) q.start = q.count = 0;
  return q;
}

// Sequence s's queries [q_start, q_start + q_count) and keys [kv_start, kv_start + kv_len).
struct Sequence {
  int q_start, q_count, kv_start, kv_len;
};
__device__ __forceinline__ Sequence sequence(const Batch& a, int s) {
  Sequence q;
  const Queries queries_of_s = queries(a, s);
  q.q_start = queries_of_s.start;
  q.q_count = queries_of_s.count;
  if (a.paged) {
    q.kv_start = 0;
    q.kv_len = a.kv_info[s];
  } else if (a.kv_info != nullptr) {
    q.kv_start = a.kv_info[s];
    q.kv_len = a.kv_info[s + 1] - q.kv_start;
  } else {
    q.kv_start = 0;
    q.kv_len = a.kv_tokens;
  }
  if (q.kv_start < 0 || q.kv_len < 0) q.kv_start = q.kv_len = 0;
  return q;
}

// Keys [lo, hi): a sequence's, or those a split or a tile may see.
struct KeyRange {
  int lo, hi;
};
// Whether a query at position `pos` sees `key`, a key of `keys`.
template <bool CAUSAL, bool WINDOW>
__device__ __forceinline__ bool visible(int key, int pos, const KeyRange& keys, int window) {
  return key >= keys.lo && key < keys.hi && (!CAUSAL || key <= pos) && (!WINDOW || key >= pos - window);
}
// Keys [lo, hi) narrowed to those that some query at positions first .. last sees.
template <bool CAUSAL, bool WINDOW>
__device__ __forceinline__ void keys_seen(int first, int last, int window, int& lo, int& hi) {
  if (CAUSAL) hi = min_i(hi, last + 1);
  if (WINDOW) lo = max_i(lo, first - window);
}
// Positions [lo, hi) narrowed to those of queries that see some key of [k0, k0 + n).
template <bool CAUSAL, bool WINDOW>
__device__ __forceinline__ void queries_seeing(int k0, int n, int window, int& lo, int& hi) {
  if (CAUSAL) lo = max_i(lo, k0);
  if (WINDOW) hi = min_i(hi, k0 + n + window);
}

}  // namespace mojo_attention
