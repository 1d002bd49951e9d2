// Attention, the sm_80 path (any sm_80+ GPU): FlashAttention-2 style, one
// kernel for sdpa, paged_prefill_gqa and paged_decode_gqa.
//
// A block takes BM = 16 * WM rows of one sequence's queries for one KV head:
// with G = heads / kv_heads, row r is (query token r / G, head kv_head * G +
// r % G), so the heads sharing a KV head share its K and V loads (GQA packed
// into M). Its WN groups of WM warps stream the KV tiles (BN keys) through a
// STAGES-deep cp.async ring each, group g taking tiles g, g + WN, ...; S = Q K^T
// and O += P V run on mma.sync (fp32 accumulation), the softmax online in
// registers (log2 units). The groups' (max, sum, O) meet in shared memory.
//
// Masks (causal, window) and the sequences of a batch (cu_q, q_len,
// kv_info): attention_batch.cuh.
// Soft-cap: s = cap * tanh(s * scale / cap); sinks: a per-head logit that
// joins the softmax's denominator and adds no value. lse: the log of that
// denominator per (head, token), natural log, f32 [heads, q_tokens]
// (-inf for a query that sees no key and has no sink).
//
// Split-KV (SPLITS > 1, paged decode): grid.z splits each sequence's keys in
// chunks of `chunk`; step 0 writes each split's normalised O and lse (f32) to
// the workspace, step 1 (attention_merge) combines them, with the sink, into
// out and lse. Workspace: [SPLITS][q_tokens * heads][D] O, then
// [SPLITS][q_tokens * heads] lse.
//
// Params (P::name): dtype (f16, bf16), head_dim D (multiple of 8; tiles use
// DP = D rounded up to a power of two, the rest zero), group G, wm, wn, bn,
// stages, causal, window, softcap, sinks, lse (0/1: features present), varlen
// (1: sequences from cu_q or a batch; 0: one), paged (K/V from the paged
// cache of store_kv_cache, pages of `page` tokens), splits, step (split
// plans: 0 partial, 1 merge), wgmma (1: the sm_90a prefill of
// attention_sm90.cuh), gather (1: its producer gathers a paged cache's keys
// with cp.async where TMA boxes do not tile its key tiles).
//
// block_table: int [batch, max_blocks]; entries outside
// [0, kv_tokens) (kv_tokens: the number of pages when paged) read as zeros
// (the runtime's debug checks report them).
//
// Kernel args: MOJO_ATTENTION_ARGS (attention_args.h), for every kernel here,
// with strides in elements per token (k/v: contiguous path only; the paged
// cache is contiguous [pages, page, kv_heads, D]); out is [q_tokens, heads, D].
// Geometry (step 0): grid (row tiles, kv_heads, SPLITS), 32 * WM * WN threads,
// smem_bytes() of dynamic shared memory; the row tiles are numbered across
// sequences, so grid.x is an upper bound and spare blocks exit. A block's
// (x, y) is not its (tile, KV head) where section_heads > 1: place_block.
// Merge: grid ceil(q_tokens * heads / 4), 128 threads (a warp per row).
#include "mojo_mma.cuh"
#include "attention_args.h"
#include "attention_batch.cuh"

namespace mojo_attention {

// Shared memory of the main kernel: sm80_smem (attention_args.h), the Q
// tile and the K/V rings, then over the same bytes the f32 O tile and the
// row statistics.

// A block's work: the sequence and the row tile it takes (rows row0 .. row0 + BM of the sequence's queries
// x heads of one KV head), and the keys those rows may see within split `split`'s chunk: [lo, hi), loaded as
// kv_tiles tiles of BN from tile_begin. False: a spare block (grid.x is an upper bound).
struct Work : KeyRange {
  int seq;
  Sequence sq;
  int row0, offset, tile_begin, kv_tiles;
};
// Causal tiles grow with their rows, so they go out longest first, as FlashAttention 2 and 3 order them, so
// that the grid's last blocks are short ones and no SM is left with a long tile when the others are done.
// Several sequences go by rank (0: each sequence's last rows), and within a rank by sequence: the performance
// model (AttentionOp::block_work) has the SMs busy 97% of the time for 2 to 8 equal sequences, where one
// sequence after another left 9% idle. Other tiles go out sequence by sequence.
//
// The causal row tile of several sequences that block `block` of the grid's x takes, as find_work's
// (sequence, tile); false: a spare block.
template <int BM, int G>
__device__ __forceinline__ bool find_tile_by_rank(const Batch& a, int block, int& seq, int& tile) {
  auto tiles_of = [&](int s) { return (queries(a, s).count * G + BM - 1) / BM; };
  auto before = [&](int r) {  // the blocks before rank r: each sequence's tiles of ranks below r
    int n = 0;
    for (int s = 0; s < a.batch; ++s) n += min_i(tiles_of(s), r);
    return n;
  };
  int most = 0;
  for (int s = 0; s < a.batch; ++s) most = max_i(most, tiles_of(s));
  if (block >= before(most)) return false;
  int rank = 0;  // the last rank that starts at or before `block`: before(rank) <= block < before(rank + 1)
  for (int hi = most - 1; rank < hi;) {
    const int mid = (rank + hi + 1) / 2;
    if (before(mid) <= block) rank = mid;
    else hi = mid - 1;
  }
  int k = block - before(rank);  // of the sequences with a tile of this rank, the k-th
  for (int s = 0; s < a.batch; ++s) {
    const int tiles = tiles_of(s);
    if (tiles > rank && k-- == 0) {
      seq = s;
      tile = tiles - 1 - rank;
      return true;
    }
  }
  return false;
}

// The row tile (find_work's `tile`, an index in the order above) and the KV head that this block takes. Causal
// tiles go out longest first across heads too, as FlashAttention 3's LPT scheduler gives them out: the KV heads
// in sections of `section_heads` whose keys and values fit in L2 together, and within a section a rank for each
// of its heads before the next rank. Head by head (the grid's y), a wave mixed one head's shortest tiles with
// the next head's longest unless a head's tiles fill the SMs several times over: the model put a Gemma prefill
// (head_dim 256, 8 KV heads, 4096 tokens) at 81% busy SMs, and at 99% in this order. section_heads 1: head by
// head.
struct Place {
  int tile, kv_head;
};
// The `at`-th of `tiles` row tiles of every KV head in that order.
__device__ __forceinline__ Place place_at(int at, int tiles, int section_heads) {
  const int per_section = tiles * section_heads, in_section = at % per_section;
  return {in_section / section_heads, at / per_section * section_heads + in_section % section_heads};
}
__device__ __forceinline__ Place place_block(int section_heads) {
  const int tiles = (int)mojo::grid_dim_x();
  return place_at((int)mojo::block_x() + (int)mojo::block_y() * tiles, tiles, section_heads);
}

template <int BM, int BN, int G, bool CAUSAL, bool WINDOW, bool VARLEN>
__device__ __forceinline__ bool find_work(const Batch& a, int tile, int split, int chunk, int window, Work& w) {
  if constexpr (CAUSAL && VARLEN) {
    if (!find_tile_by_rank<BM, G>(a, tile, w.seq, tile)) return false;
    w.sq = sequence(a, w.seq);
  } else {
    for (w.seq = 0;; ++w.seq) {
      if (w.seq == a.batch) return false;
      w.sq = sequence(a, w.seq);
      const int tiles = (w.sq.q_count * G + BM - 1) / BM;
      if (tile < tiles) {
        if (CAUSAL) tile = tiles - 1 - tile;  // one sequence: its longest tiles first
        break;
      }
      tile -= tiles;
    }
  }
  w.row0 = tile * BM;
  w.offset = w.sq.kv_len - w.sq.q_count;
  const int first_token = w.row0 / G, last_token = min_i((w.row0 + BM - 1) / G, w.sq.q_count - 1);
  w.lo = split * chunk;
  w.hi = min_i(w.sq.kv_len, (split + 1) * chunk);
  keys_seen<CAUSAL, WINDOW>(w.offset + first_token, w.offset + last_token, window, w.lo, w.hi);
  w.tile_begin = w.lo > 0 ? w.lo / BN * BN : 0;
  w.kv_tiles = w.lo < w.hi ? (w.hi - w.tile_begin + BN - 1) / BN : 0;
  return true;
}

// Whether queries at positions first .. last all see every key of [k0, k0 + n): a tile that needs no mask.
template <bool CAUSAL, bool WINDOW>
__device__ __forceinline__ bool all_visible(int k0, int n, int first, int last, const Work& w, int window) {
  return k0 >= w.lo && k0 + n <= w.hi && (!CAUSAL || k0 + n - 1 <= first) && (!WINDOW || k0 >= last - window);
}

// A row's result from its running maximum `base` (log2 units, 0 when it saw no key) and sum `total`, with the
// head's sink (log2 units, -inf for none): the factor that normalises its O, and its lse (natural log).
struct Finish {
  float factor, lse;
};
__device__ __forceinline__ Finish finish(float base, float total, float sink) {
  const float top = mojo::max_f(base, sink);
  const float w_keys = mojo::exp2_approx(base - top), w_sink = mojo::exp2_approx(sink - top);
  const float denominator = total * w_keys + w_sink;
  if (!(denominator > 0.f)) return {0.f, mojo::neg_inf()};
  return {w_keys / denominator, (top + mojo::log2_approx(denominator)) * 0.6931471805599453f};
}

// Where key `key` of the block's sequence (from its first) sits in a paged cache: the element offset of its row
// for this KV head, and whether it is there to read (not for a key at or past w.hi, past the block table or in a
// block outside the cache).
struct CacheRow {
  long long at;
  bool valid;
};
template <class P>
__device__ __forceinline__ CacheRow cache_row(const Batch& a, const Work& w, int key, int kv_heads, int kv_head) {
  constexpr int PAGE = P::page > 0 ? P::page : 1;
  bool valid = key < w.hi && key / PAGE < a.max_blocks;
  const int page = valid ? a.block_table[(long long)w.seq * a.max_blocks + key / PAGE] : 0;
  valid = valid && page >= 0 && page < a.kv_tokens;
  return {(((long long)page * PAGE + key % PAGE) * kv_heads + kv_head) * P::head_dim, valid};
}

// Key `key` of the block's sequence, columns col .. col + 8 of this KV head, from k and v into shared memory at
// k_dst and v_dst by cp.async: zeros where it is not there to read (cache_row; packed keys: past w.hi or the
// tensor) and for columns past D.
template <class P, class T>
__device__ __forceinline__ void copy_key(unsigned k_dst, unsigned v_dst, const T* k, const T* v, const Batch& a,
                                         const Work& w, int key, int col, int kv_heads, int kv_head,
                                         long long k_stride, long long v_stride) {
  bool valid = col < P::head_dim;
  long long k_at = 0, v_at = 0;
  if (P::paged) {
    const CacheRow row = cache_row<P>(a, w, key, kv_heads, kv_head);
    valid = valid && row.valid;
    k_at = v_at = row.at + col;
  } else {
    valid = valid && key < w.hi && w.sq.kv_start + key < a.kv_tokens;
    k_at = (long long)(w.sq.kv_start + key) * k_stride + kv_head * P::head_dim + col;
    v_at = (long long)(w.sq.kv_start + key) * v_stride + kv_head * P::head_dim + col;
  }
  mojo::cp_async_16(k_dst, valid ? k + k_at : k, valid ? 16 : 0);
  mojo::cp_async_16(v_dst, valid ? v + v_at : v, valid ? 16 : 0);
}

template <class T, class P>
__device__ __forceinline__ void run(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,
                                    const T* __restrict__ v, const Batch& a, const float* __restrict__ sinks,
                                    float* __restrict__ lse, float* __restrict__ workspace, long long q_stride,
                                    long long k_stride, long long v_stride, int heads, int kv_heads, int chunk,
                                    float scale, float softcap, int window, int section_heads) {
  constexpr int D = P::head_dim, DP = D <= 64 ? 64 : D <= 128 ? 128 : 256, G = P::group, WM = P::wm, WN = P::wn, BN = P::bn;
  constexpr int STAGES = P::stages, BM = 16 * WM, GROUP_THREADS = 32 * WM, THREADS = GROUP_THREADS * WN;
  using QTile = mojo::Tile<BM, DP, 2>;
  using KvTile = mojo::Tile<BN, DP, 2>;
  constexpr int STAGE_BYTES = 2 * KvTile::BYTES;  // K then V
  static_assert(QTile::BYTES == sm80_smem(BM, DP, WN, STAGES, BN).q_bytes &&
                    STAGE_BYTES == sm80_smem(BM, DP, WN, STAGES, BN).stage_bytes,
                "the layout sm80_smem sizes");
  MOJO_DYNAMIC_SMEM(smem);

  const Place place = place_block(section_heads);
  const int kv_head = place.kv_head, split = (int)mojo::block_z();
  Work w;
  if (!find_work<BM, BN, G, P::causal != 0, P::window != 0, P::varlen != 0>(a, place.tile, split, chunk, window, w))
    return;
  const Sequence& sq = w.sq;
  const int row0 = w.row0, offset = w.offset, tile_begin = w.tile_begin;
  const int kv_tiles = w.kv_tiles;
  const int tid = (int)mojo::thread_x(), lane = tid % 32, warp = tid / 32;
  const int wm = warp % WM, grp = warp / WM, gtid = tid % GROUP_THREADS;

  // Q tile: rows beyond the sequence and columns beyond D are zeros.
  {
    constexpr int CHUNKS = DP / 8, TOTAL = BM * CHUNKS;
    for (int c = tid; c < TOTAL; c += THREADS) {
      const int r = c / CHUNKS, col = (c % CHUNKS) * 8, gr = row0 + r, token = gr / G;
      const bool valid = token < sq.q_count && sq.q_start + token < a.q_tokens && col < D;
      const T* src = valid ? q + (long long)(sq.q_start + token) * q_stride + (kv_head * G + gr % G) * D + col : q;
      mojo::cp_async_16(mojo::smem_address(smem) + unsigned(QTile::offset(r, col)), src, valid ? 16 : 0);
    }
    mojo::cp_async_commit();
    mojo::cp_async_wait<0>();
    mojo::sync_block();
  }

  unsigned char* const ring = smem + QTile::BYTES + grp * STAGES * STAGE_BYTES;
  auto sync_group = [&] {
    if constexpr (WN == 1) mojo::sync_block();
    else mojo::sync_warps(1 + grp, GROUP_THREADS);
  };
  // Keys [k0, k0 + BN) of this KV head into a stage: K then V, zeros past hi or for a bad page.
  auto load_stage = [&](int stage, int k0) {
    const unsigned s = mojo::smem_address(ring + stage * STAGE_BYTES);
    constexpr int CHUNKS = DP / 8, TOTAL = BN * CHUNKS;
    for (int c = gtid; c < TOTAL; c += GROUP_THREADS) {
      const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
      const unsigned at = s + unsigned(KvTile::offset(r, col));
      copy_key<P>(at, at + KvTile::BYTES, k, v, a, w, k0 + r, col, kv_heads, kv_head, k_stride, v_stride);
    }
  };

  constexpr int NS = BN / 8, NO = DP / 8;
  float acc[NO][4];
#pragma unroll
  for (int j = 0; j < NO; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  float m[2] = {mojo::neg_inf(), mojo::neg_inf()}, l[2] = {0.f, 0.f};
  const float kLog2e = 1.4426950408889634f;
  const float score_scale = P::softcap ? scale / softcap : scale * kLog2e;
  const float cap_log2 = softcap * kLog2e;
  // Each lane's two rows: r = lane / 4 and r + 8 of the warp's 16; their query positions.
  int token_of[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) token_of[h] = (row0 + wm * 16 + lane / 4 + h * 8) / G;

  // Group grp takes tiles grp, grp + WN, ...: my_tiles of them. Every group goes round the loop the same
  // number of times (a group with a tile fewer waits at its barrier once more and computes nothing), so
  // every warp passes the same barriers in the same order. That costs nothing and keeps compute-sanitizer's
  // racecheck exact: with unequal counts it paired the barrier after the loop wrongly across groups and
  // reported the groups' maxima written over group 0's ring as a race (H100, 2026-11-24 and -26).
  const int my_tiles = kv_tiles > grp ? (kv_tiles - grp + WN - 1) / WN : 0, rounds = (kv_tiles + WN - 1) / WN;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < my_tiles) load_stage(s, tile_begin + (grp + s * WN) * BN);
    mojo::cp_async_commit();
  }
  for (int it = 0; it < rounds; ++it) {
    mojo::cp_async_wait<STAGES - 2>();
    sync_group();
    const int next = it + STAGES - 1;
    if (next < my_tiles) load_stage(next % STAGES, tile_begin + (grp + next * WN) * BN);
    mojo::cp_async_commit();
    if (it >= my_tiles) continue;
    const unsigned char* kt = ring + (it % STAGES) * STAGE_BYTES;
    const unsigned char* vt = kt + KvTile::BYTES;
    const int k0 = tile_begin + (grp + it * WN) * BN;

    // S = Q K^T for the warp's 16 rows and the tile's BN keys.
    float s[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      unsigned fa[4];
      mojo::load_fragment<T, true, BM, DP>(smem, wm * 16, kk, lane, fa);
#pragma unroll
      for (int j = 0; j < NS; j += 2) {
        unsigned r[4];
        mojo::load_fragment<T, true, BN, DP>(kt, j * 8, kk, lane, r);
        const unsigned b0[2] = {r[0], r[2]}, b1[2] = {r[1], r[3]};
        mojo::mma<T>(s[j], fa, b0);
        mojo::mma<T>(s[j + 1], fa, b1);
      }
    }

    // Scale (and cap) into log2 units, mask, and take the running maxima.
    float tile_max[2] = {mojo::neg_inf(), mojo::neg_inf()};
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, key = k0 + j * 8 + 2 * (lane % 4) + e % 2, pos = offset + token_of[h];
        const float x = P::softcap ? cap_log2 * mojo::tanh_f(s[j][e] * score_scale) : s[j][e] * score_scale;
        s[j][e] = visible<P::causal != 0, P::window != 0>(key, pos, w, window) ? x : mojo::neg_inf();
        tile_max[h] = mojo::max_f(tile_max[h], s[j][e]);
      }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = mojo::max_f(tile_max[h], mojo::shfl_xor(tile_max[h], 1));
      tile_max[h] = mojo::max_f(tile_max[h], mojo::shfl_xor(tile_max[h], 2));
      const float m_new = mojo::max_f(m[h], tile_max[h]);
      const float base = m_new == mojo::neg_inf() ? 0.f : m_new;  // a row that has seen no key yet
      correction[h] = mojo::exp2_approx(m[h] - base);
      m[h] = m_new;
      l[h] *= correction[h];
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[j][e] = mojo::exp2_approx(s[j][e] - base);
          l[h] += s[j][e];
        }
    }
#pragma unroll
    for (int j = 0; j < NO; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] *= correction[e / 2];

    // O += P V: the accumulators of S are the A fragments of P, 16 keys at a time.
#pragma unroll
    for (int j = 0; j < NS; j += 2) {
      const unsigned fp[4] = {mojo::pack_pair<T>(s[j][0], s[j][1]), mojo::pack_pair<T>(s[j][2], s[j][3]),
                              mojo::pack_pair<T>(s[j + 1][0], s[j + 1][1]),
                              mojo::pack_pair<T>(s[j + 1][2], s[j + 1][3])};
#pragma unroll
      for (int d = 0; d < NO; d += 2) {
        if (d * 8 >= D) break;
        unsigned r[4];
        mojo::load_fragment<T, false, BN, DP>(vt, d * 8, j * 8, lane, r);
        const unsigned b0[2] = {r[0], r[2]}, b1[2] = {r[1], r[3]};
        mojo::mma<T>(acc[d], fp, b0);
        mojo::mma<T>(acc[d + 1], fp, b1);
      }
    }
  }
  mojo::cp_async_wait<0>();

  // The groups' rows meet in shared memory (the rings are free once all are
  // done): maxima and sums, then O added group by group in a fixed order.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += mojo::shfl_xor(l[h], 1);
    l[h] += mojo::shfl_xor(l[h], 2);
  }
  float* const o_tile = reinterpret_cast<float*>(smem);  // [BM][DP]
  float* const maxima = o_tile + BM * DP;                 // [WN][BM]
  float* const sums = maxima + WN * BM;                   // [WN][BM]
  float* const row_max = sums + WN * BM;                  // [BM]: the block's, in log2 units (0 if none)
  float* const row_sum = row_max + BM;                    // [BM]
  mojo::sync_block();
  if (lane % 4 == 0)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * 16 + lane / 4 + h * 8;
      maxima[grp * BM + r] = m[h];
      sums[grp * BM + r] = l[h];
    }
  mojo::sync_block();
  float mine[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wm * 16 + lane / 4 + h * 8;
    float top = mojo::neg_inf();
    for (int g = 0; g < WN; ++g) top = mojo::max_f(top, maxima[g * BM + r]);
    const float base = top == mojo::neg_inf() ? 0.f : top;
    mine[h] = mojo::exp2_approx(m[h] - base);
    if (grp == 0 && lane % 4 == 0) {
      float total = 0.f;
      for (int g = 0; g < WN; ++g) total += sums[g * BM + r] * mojo::exp2_approx(maxima[g * BM + r] - base);
      row_max[r] = base;
      row_sum[r] = total;
    }
  }
  for (int g = 0; g < WN; ++g) {
    if (grp == g)
#pragma unroll
      for (int j = 0; j < NO; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = wm * 16 + lane / 4 + (e / 2) * 8, c = j * 8 + 2 * (lane % 4) + e % 2;
          const float x = acc[j][e] * mine[e / 2];
          o_tile[r * DP + c] = g == 0 ? x : o_tile[r * DP + c] + x;
        }
    mojo::sync_block();
  }

  // Normalise and write: threads over (row, 8 columns).
  constexpr int CHUNKS = D / 8;
  const float kLn2 = 0.6931471805599453f;  // the split parts' lse
  for (int c = tid; c < BM * CHUNKS; c += THREADS) {
    const int r = c / CHUNKS, col = (c % CHUNKS) * 8, gr = row0 + r, token = gr / G;
    if (token >= sq.q_count || sq.q_start + token >= a.q_tokens) continue;
    const int head = kv_head * G + gr % G;
    const long long row = (long long)(sq.q_start + token) * heads + head;
    const float base = row_max[r], total = row_sum[r];
    const float* o = o_tile + r * DP + col;
    if constexpr (P::splits > 1) {
      // This split's part: normalised O and its lse, combined by the merge step.
      const float inv = total > 0.f ? 1.f / total : 0.f;
      float* wo = workspace + ((long long)split * a.q_tokens * heads + row) * D + col;
#pragma unroll
      for (int i = 0; i < 8; ++i) wo[i] = o[i] * inv;
      if (col == 0) {
        float* wl = workspace + (long long)P::splits * a.q_tokens * heads * D;
        wl[(long long)split * a.q_tokens * heads + row] =
            total > 0.f ? (base + mojo::log2_approx(total)) * kLn2 : mojo::neg_inf();
      }
    } else {
      const Finish f = finish(base, total, P::sinks ? sinks[head] * kLog2e : mojo::neg_inf());
      float scaled[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) scaled[i] = o[i] * f.factor;
      mojo::store<T, 8>(out + row * D + col, mojo::pack_floats<T, 8>(scaled));
      if (P::lse && col == 0) lse[(long long)head * a.q_tokens + sq.q_start + token] = f.lse;
    }
  }
}

// Step 1 of a split plan: out = the splits' O weighted by exp(lse), with the sink.
template <class T, class P>
__device__ __forceinline__ void merge(T* __restrict__ out, const float* __restrict__ sinks, float* __restrict__ lse,
                                      const float* __restrict__ workspace, int q_tokens, int heads) {
  constexpr int D = P::head_dim, SPLITS = P::splits;
  const long long rows = (long long)q_tokens * heads;
  const long long row = (long long)mojo::block_x() * 4 + mojo::thread_x() / 32;
  const int lane = (int)mojo::thread_x() % 32;
  if (row >= rows) return;
  const int head = int(row % heads);
  const float* parts = workspace + (long long)SPLITS * rows * D;  // the lse of each split
  // The splits as one softmax: each one's sum is exp(lse), its O weighted by that.
  const float kLog2e = 1.4426950408889634f;
  float top = mojo::neg_inf();
  for (int s = 0; s < SPLITS; ++s) top = mojo::max_f(top, parts[s * rows + row] * kLog2e);
  const float base = top == mojo::neg_inf() ? 0.f : top;
  float total = 0.f;
  for (int s = 0; s < SPLITS; ++s) total += mojo::exp2_approx(parts[s * rows + row] * kLog2e - base);
  const Finish f = finish(base, total, P::sinks ? sinks[head] * kLog2e : mojo::neg_inf());
  for (int d = lane; d < D; d += 32) {
    float sum = 0.f;
    for (int s = 0; s < SPLITS; ++s)
      sum += workspace[(s * rows + row) * D + d] * mojo::exp2_approx(parts[s * rows + row] * kLog2e - base);
    out[row * D + d] = mojo::from_float<T>(sum * f.factor);
  }
  if (P::lse && lane == 0) lse[(long long)head * q_tokens + row / heads] = f.lse;
}

}  // namespace mojo_attention

// The sm_90a prefill; it uses Batch, Work, find_work, visible and finish from above.
#include "attention_sm90.cuh"

// Every attention kernel takes MOJO_ATTENTION_ARGS (the sm_90a one two TMA descriptors more).
#define MOJO_ATTENTION_BATCH(P) \
  mojo_attention::Batch { cu_q, kv_info, block_table, batch, q_tokens, kv_tokens, max_blocks, q_len, P::paged != 0 }

#define MOJO_ATTENTION(NAME, P)                                                                                        \
  extern "C" __global__ void __launch_bounds__(32 * P::wm * P::wn)                                                     \
      NAME(MOJO_ARG_PARAMS(MOJO_ATTENTION_ARGS, P::dtype)) {                                                           \
    mojo::after_previous_kernels();                                                                                    \
    mojo_attention::run<P::dtype, P>(out, q, k, v, MOJO_ATTENTION_BATCH(P), sinks, lse, workspace, q_stride,           \
                                     k_stride, v_stride, heads, kv_heads, chunk, scale, softcap, window,               \
                                     section_heads);                                                                   \
  }
#define MOJO_ATTENTION_MERGE(NAME, P)                                                                                  \
  extern "C" __global__ void __launch_bounds__(128) NAME(MOJO_ARG_PARAMS(MOJO_ATTENTION_ARGS, P::dtype)) {             \
    mojo::after_previous_kernels();                                                                                    \
    mojo_attention::merge<P::dtype, P>(out, sinks, lse, workspace, q_tokens, heads);                                   \
  }
// K and V through TMA: the descriptors are params 25 and 26.
#define MOJO_ATTENTION_SM90(NAME, P)                                                                                   \
  extern "C" __global__ void __launch_bounds__(32 * P::wm + 128, 1)                                                    \
      NAME(MOJO_ARG_PARAMS(MOJO_ATTENTION_ARGS, P::dtype), const mojo::TensorMap, const mojo::TensorMap) {             \
    static_assert(MOJO_ARG_COUNT(MOJO_ATTENTION_ARGS, P::dtype) == 25, "the descriptors' indices");                    \
    mojo::after_previous_kernels();                                                                                    \
    mojo_attention::run_sm90<P::dtype, P>(out, q, k, v, MOJO_ATTENTION_BATCH(P), sinks, lse, q_stride, heads,          \
                                          kv_heads, scale, softcap, window, section_heads,                             \
                                          MOJO_PARAM_ADDRESS(NAME, 25), MOJO_PARAM_ADDRESS(NAME, 26));                 \
  }
// The sm_90a prefill that gathers a paged cache's keys (gather = 1): no TMA descriptors.
#define MOJO_ATTENTION_SM90_GATHER(NAME, P)                                                                            \
  extern "C" __global__ void __launch_bounds__(32 * P::wm + 128, 1)                                                    \
      NAME(MOJO_ARG_PARAMS(MOJO_ATTENTION_ARGS, P::dtype)) {          \
    mojo::after_previous_kernels();                                                                                    \
    mojo_attention::run_sm90<P::dtype, P>(out, q, k, v, MOJO_ATTENTION_BATCH(P), sinks, lse, q_stride, heads,          \
                                          kv_heads, scale, softcap, window, section_heads, nullptr, nullptr);          \
  }
#define MOJO_KERNEL_sdpa(NAME, P) MOJO_ATTENTION(NAME, P)
#define MOJO_KERNEL_paged_prefill_gqa(NAME, P) MOJO_ATTENTION(NAME, P)
#define MOJO_KERNEL_paged_decode_gqa(NAME, P) MOJO_ATTENTION(NAME, P)
