// sdpa's backward (src/ops/sdpa_backward.cpp), FlashAttention-2 style on mma.sync (any sm_80+ GPU): the
// attention is computed again tile by tile from q, k and the forward's lse, never held whole. With
// s = q.k scale (soft-capped: x = cap tanh(s / cap)), p = exp(x - lse) (0 for a key the query does not see),
// and D = rowsum(grad_out * out) - grad_lse for each query (grad_lse: lse's own gradient, 0 when not given;
// d lse / d x = p, so it joins dS as -D does):
//   grad_v = P^T grad_out,  dP = grad_out V^T,  dS = P (dP - D) (times the cap's slope 1 - (x / cap)^2),
//   grad_k = dS^T q scale,  grad_q = dS k scale,  grad_sinks[h] = -sum over h's queries of exp(sink - lse) D.
// A plan of four steps (P::step), all sums in a fixed order (no atomics: the same bits every run):
//   0 `dot`: D for each (token, head), into the workspace; a warp a row.
//   1 `keys`: a block per BN keys of a KV head (grid (key tiles, kv_heads)), a warp per 16 of them: for each
//     of the G heads that share them and each tile of BQ queries that can see them, S^T = K Q^T and
//     dP^T = V grad_out^T in registers, then grad_v += P^T grad_out and grad_k += dS^T Q; written once. At
//     head_dim 256 two such steps (P::part), one for grad_v (S^T and P^T grad_out only), one for grad_k: a
//     thread's 16 x 256 / 32 = 128 values of each would not fit its registers together. That costs S^T once
//     more: 5 products of the pairs in the key steps, where one step does 4.
//   2 `queries`: a block per BM = 64 packed query rows of a KV head (rows = (token, head) as the forward packs
//     GQA), a warp per 16: for each tile of BK keys they can see, S = Q K^T, dP = grad_out V^T, grad_q += dS K.
//   3 `sinks` (when grad_sinks is given): a block per head.
// Masks and sequences as the forward's (attention_batch.cuh).
// Params (P::name): dtype (f16, bf16), head_dim D (a multiple of 8, at most 256; tiles use DP = 64, 128 or 256
// columns, the rest zero), group G, causal, window, softcap (0/1: present), bn, bq, bk, step, and the key steps'
// part (KeyPart).
// Kernel args: MOJO_SDPA_BACKWARD_ARGS (sdpa_backward_args.h). Sequences from cu_q / cu_k (k: those of q when
// it is null but cu_q is not); both null: one sequence of every token.
#include "mojo_mma.cuh"
#include "sdpa_backward_args.h"
#include "attention_batch.cuh"

namespace mojo_sdpa_backward {

constexpr int kWarps = 4, kThreads = 32 * kWarps;

using mojo_attention::Batch;
using mojo_attention::KeyRange;
using mojo_attention::min_i;
using mojo_attention::Sequence;
using mojo_attention::sequence;

// The sequences: cu_k's keys, or cu_q's where cu_k is null (sdpa's rule).
template <class T>
__device__ __forceinline__ Batch batch_of(const Args<T>& a) {
  return Batch{a.cu_q, a.cu_k != nullptr ? a.cu_k : a.cu_q, nullptr, a.batch, a.q_tokens, a.kv_tokens, 0, 0, false};
}

// Tile `tile` of the grid's x as tile `in_seq` of sequence `seq`, where sequence s has tiles_of(s) tiles; false:
// a spare block (the grid's x is an upper bound).
template <class F>
__device__ __forceinline__ bool find_tile(int batch, int tile, F tiles_of, int& seq, int& in_seq) {
  for (seq = 0; seq < batch; ++seq) {
    const int n = tiles_of(seq);
    if (tile < n) {
      in_seq = tile;
      return true;
    }
    tile -= n;
  }
  return false;
}

// Rows [0, ROWS) of a [ROWS][DP] 16-bit tile in shared memory by cp.async, 8 columns a copy, from src(r, col)
// (null: zeros, as for columns past D).
template <class T, int ROWS, int DP, class Src>
__device__ __forceinline__ void load_tile(unsigned char* tile, const T* any, Src src) {
  constexpr int CHUNKS = DP / 8;
  for (int c = (int)mojo::thread_x(); c < ROWS * CHUNKS; c += kThreads) {
    const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
    const T* from = src(r, col);
    mojo::cp_async_16(mojo::smem_address(tile) + unsigned(mojo::Tile<ROWS, DP, 2>::offset(r, col)),
                      from != nullptr ? from : any, from != nullptr ? 16 : 0);
  }
}

// load_tile's source for keys k0, k0 + 1, ... of a KV head of sequence sq, from k or v (`stride` elements a
// token): null past the sequence's keys and past column D.
template <int D, class T>
__device__ __forceinline__ auto key_rows(const T* base, long long stride, const Sequence& sq, int k0, int kv_head) {
  return [=](int r, int col) -> const T* {
    const int key = k0 + r;
    return key < sq.kv_len && col < D ? base + (long long)(sq.kv_start + key) * stride + kv_head * D + col : nullptr;
  };
}

// acc[N / 8][4] = A B^T for the warp's 16 rows of A (from row a0 of an [A_ROWS][DP] tile) and N rows of B (an
// [N][DP] tile): S = Q K^T's shape, the k dimension the D columns.
template <class T, int D, int DP, int A_ROWS, int N>
__device__ __forceinline__ void rows_times_rows(float (&acc)[N / 8][4], const unsigned char* a, int a0,
                                                const unsigned char* b, int lane) {
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D; kk += 16) {
    unsigned fa[4];
    mojo::load_fragment<T, true, A_ROWS, DP>(a, a0, kk, lane, fa);
#pragma unroll
    for (int j = 0; j < N / 8; j += 2) {
      unsigned r[4];
      mojo::load_fragment<T, true, N, DP>(b, j * 8, kk, lane, r);
      const unsigned b0[2] = {r[0], r[2]}, b1[2] = {r[1], r[3]};
      mojo::mma<T>(acc[j], fa, b0);
      mojo::mma<T>(acc[j + 1], fa, b1);
    }
  }
}

// acc[DP / 8][4] += P B for the warp's 16 rows of P (registers in acc's layout, K columns) and B a [K][DP] tile
// (the k dimension its rows): O += P V's shape.
template <class T, int D, int DP, int K>
__device__ __forceinline__ void add_product(float (&acc)[DP / 8][4], const float (&p)[K / 8][4],
                                            const unsigned char* b, int lane) {
#pragma unroll
  for (int j = 0; j < K / 8; j += 2) {
    const unsigned fp[4] = {mojo::pack_pair<T>(p[j][0], p[j][1]), mojo::pack_pair<T>(p[j][2], p[j][3]),
                            mojo::pack_pair<T>(p[j + 1][0], p[j + 1][1]), mojo::pack_pair<T>(p[j + 1][2], p[j + 1][3])};
#pragma unroll
    for (int d = 0; d < DP / 8; d += 2) {
      if (d * 8 >= D) break;
      unsigned r[4];
      mojo::load_fragment<T, false, K, DP>(b, d * 8, j * 8, lane, r);
      const unsigned b0[2] = {r[0], r[2]}, b1[2] = {r[1], r[3]};
      mojo::mma<T>(acc[d], fp, b0);
      mojo::mma<T>(acc[d + 1], fp, b1);
    }
  }
}

// The padded width of a tile's rows: 64, 128 or 256 columns.
template <int D>
constexpr int kPaddedColumns = D <= 64 ? 64 : D <= 128 ? 128 : 256;

// One score s's logit x (soft-capped) and p = exp(x - lse); 0 for a pair not seen.
template <bool SOFTCAP>
__device__ __forceinline__ float probability(float s, bool seen, float lse, float scale, float softcap, float& x) {
  x = SOFTCAP ? softcap * mojo::tanh_f(s * (scale / softcap)) : s * scale;
  return seen && lse > mojo::neg_inf() ? mojo::exp_approx(x - lse) : 0.f;
}

// One score s of a visible pair (or not): p, and its dS from dP and the query's D.
template <bool SOFTCAP>
__device__ __forceinline__ void score_gradient(float& s, float& dp, bool seen, float lse, float dot, float scale,
                                               float softcap) {
  float x;
  const float p = probability<SOFTCAP>(s, seen, lse, scale, softcap, x);
  float ds = p * (dp - dot);
  if (SOFTCAP) ds *= 1.f - (x / softcap) * (x / softcap);
  s = p;
  dp = ds;
}

// Writes the warp's 16 rows of acc (times `factor`) to dst(row) + column, rows for which dst gives null skipped.
template <class T, int D, int DP, class Dst>
__device__ __forceinline__ void write_rows(const float (&acc)[DP / 8][4], float factor, int lane, Dst dst) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    T* row = dst(lane / 4 + h * 8);
    if (row == nullptr) continue;
#pragma unroll
    for (int d = 0; d < DP / 8; ++d) {
      const int col = d * 8 + 2 * (lane % 4);
      if (col >= D) break;
      row[col] = mojo::from_float<T>(acc[d][2 * h] * factor);
      row[col + 1] = mojo::from_float<T>(acc[d][2 * h + 1] * factor);
    }
  }
}

// Step 0: dot[head, token] = sum over d of grad_out * out, less grad_lse[head, token], a warp a (token, head) row.
template <class T, int D>
__device__ __forceinline__ void dot_rows(float* dot, const T* grad_out, const T* out, const float* grad_lse,
                                         int q_tokens, int heads) {
  const long long row = (long long)mojo::block_x() * kWarps + mojo::thread_x() / 32;
  const int lane = (int)mojo::thread_x() % 32;
  if (row >= (long long)q_tokens * heads) return;
  float sum = 0.f;
  for (int d = lane; d < D; d += 32)
    sum += mojo::to_float(grad_out[row * D + d]) * mojo::to_float(out[row * D + d]);
#pragma unroll
  for (int m = 16; m > 0; m /= 2) sum += mojo::shfl_xor(sum, m);
  const long long at = (long long)(row % heads) * q_tokens + row / heads;
  if (lane == 0) dot[at] = grad_lse != nullptr ? sum - grad_lse[at] : sum;
}

// The rounds of a step go through a ring of kStages = 2 stages: round r + 1's tiles are copied in while round r's
// are used. Each round commits one cp.async group (empty after the last), so waiting for all but the newest group
// leaves round r's, and the tiles loaded once before the rounds, landed.
static_assert(kStages == 2, "a round waits for all but the newest cp.async group");

// The top of round `round` of `rounds`: once the last round's stage is read, start the next round's copies into
// it (load_round commits them), then wait for this round's.
template <class Load>
__device__ __forceinline__ void begin_round(int round, int rounds, Load load_round) {
  mojo::sync_block();
  if (round + 1 < rounds) load_round(round + 1);
  else mojo::cp_async_commit();
  mojo::cp_async_wait<1>();
  mojo::sync_block();
}

// Step 1: grad_k and grad_v of BN keys of one KV head, or one of them (P::part).
template <class T, class P>
__device__ __forceinline__ void keys_step(const Args<T>& a) {
  constexpr int D = P::head_dim, DP = kPaddedColumns<D>, G = P::group, BN = P::bn, BQ = P::bq;
  constexpr bool WANT_V = P::part != kGradKPart, WANT_K = P::part != kGradVPart;  // grad_k needs dP, so V
  static_assert(BN == 16 * kWarps && BQ % 16 == 0, "a warp takes 16 keys; queries go 16 at a time");
  using KTile = mojo::Tile<BN, DP, 2>;
  using QTile = mojo::Tile<BQ, DP, 2>;
  constexpr int STAGE_BYTES = 2 * QTile::BYTES, KEY_TILES = key_tiles_loaded(P::part);  // a stage: Q, grad_out
  static_assert(KEY_TILES * KTile::BYTES + kStages * STAGE_BYTES + 2 * kStages * BQ * 4 ==
                    smem_bytes(KEY_TILES, BN, BQ, DP, kStages * BQ),
                "the layout smem_bytes sizes");
  MOJO_DYNAMIC_SMEM(smem);
  unsigned char *const k_tile = smem, *const v_tile = k_tile + KTile::BYTES;
  unsigned char* const ring = k_tile + KEY_TILES * KTile::BYTES;
  float* const stats = reinterpret_cast<float*>(ring + kStages * STAGE_BYTES);  // per stage: lse[BQ], then D[BQ]

  const int kv_head = (int)mojo::block_y();
  const Batch batch = batch_of(a);
  auto tiles_of = [&](int s) { return (sequence(batch, s).kv_len + BN - 1) / BN; };
  int seq = 0, tile = 0;
  if (!find_tile(a.batch, (int)mojo::block_x(), tiles_of, seq, tile)) return;
  const Sequence sq = sequence(batch, seq);
  const int k0 = tile * BN, offset = sq.kv_len - sq.q_count;
  const int lane = (int)mojo::thread_x() % 32, warp = (int)mojo::thread_x() / 32;

  load_tile<T, BN, DP>(k_tile, a.k, key_rows<D>(a.k, a.k_stride, sq, k0, kv_head));
  if constexpr (WANT_K) load_tile<T, BN, DP>(v_tile, a.v, key_rows<D>(a.v, a.v_stride, sq, k0, kv_head));
  mojo::cp_async_commit();

  // The queries that may see these keys, tokens [t_lo, t_hi); a round per head of the group and tile of BQ of
  // them.
  int t_lo = offset, t_hi = offset + sq.q_count;  // positions first
  mojo_attention::queries_seeing<P::causal != 0, P::window != 0>(k0, BN, a.window, t_lo, t_hi);
  t_lo -= offset;
  t_hi -= offset;
  const int q_tiles = t_hi > t_lo ? (t_hi - t_lo + BQ - 1) / BQ : 0, rounds = G * q_tiles;
  auto load_round = [&](int round) {
    const int head = kv_head * G + round / q_tiles, t0 = t_lo + round % q_tiles * BQ;
    unsigned char* const q_tile = ring + round % kStages * STAGE_BYTES;
    auto query_row = [&](const T* base, long long stride) {
      return [=](int r, int col) -> const T* {
        const int t = t0 + r;
        return t < t_hi && col < D ? base + (long long)(sq.q_start + t) * stride + head * D + col : nullptr;
      };
    };
    load_tile<T, BQ, DP>(q_tile, a.q, query_row(a.q, a.q_stride));
    load_tile<T, BQ, DP>(q_tile + QTile::BYTES, a.grad_out, query_row(a.grad_out, (long long)a.heads * D));
    mojo::cp_async_commit();
    float* const lse_s = stats + round % kStages * 2 * BQ;
    for (int r = (int)mojo::thread_x(); r < BQ; r += kThreads) {
      const long long at = (long long)head * a.q_tokens + sq.q_start + t0 + r;
      lse_s[r] = t0 + r < t_hi ? a.lse[at] : mojo::neg_inf();
      lse_s[BQ + r] = t0 + r < t_hi ? a.dot[at] : 0.f;
    }
  };

  float dk[DP / 8][4], dv[DP / 8][4];
#pragma unroll
  for (int d = 0; d < DP / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.f;

  if (rounds > 0) load_round(0);
  for (int round = 0; round < rounds; ++round) {
    begin_round(round, rounds, load_round);

    const int t0 = t_lo + round % q_tiles * BQ;
    const unsigned char *const q_tile = ring + round % kStages * STAGE_BYTES, *const do_tile = q_tile + QTile::BYTES;
    const float *const lse_s = stats + round % kStages * 2 * BQ, *const dot_s = lse_s + BQ;
    // S^T and dP^T for the warp's 16 keys (rows) and the BQ queries (columns), then P^T and dS^T in place.
    float st[BQ / 8][4], dpt[BQ / 8][4];
    rows_times_rows<T, D, DP, BN, BQ>(st, k_tile, warp * 16, q_tile, lane);
    if constexpr (WANT_K) rows_times_rows<T, D, DP, BN, BQ>(dpt, v_tile, warp * 16, do_tile, lane);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + warp * 16 + lane / 4 + (e / 2) * 8, r = j * 8 + 2 * (lane % 4) + e % 2;
        const bool seen = t0 + r < t_hi && mojo_attention::visible<P::causal != 0, P::window != 0>(
                                               key, offset + t0 + r, KeyRange{0, sq.kv_len}, a.window);
        if constexpr (WANT_K) {
          score_gradient<P::softcap != 0>(st[j][e], dpt[j][e], seen, lse_s[r], dot_s[r], a.scale, a.softcap);
        } else {
          float x;
          st[j][e] = probability<P::softcap != 0>(st[j][e], seen, lse_s[r], a.scale, a.softcap, x);
        }
      }
    if constexpr (WANT_V) add_product<T, D, DP, BQ>(dv, st, do_tile, lane);
    if constexpr (WANT_K) add_product<T, D, DP, BQ>(dk, dpt, q_tile, lane);
  }
  mojo::cp_async_wait<0>();  // the key tiles' copies, where there was no round to wait for them
  const int kv_heads = a.kv_heads;
  auto key_out = [&](T* base) {
    return [=](int r) -> T* {
      const int key = k0 + warp * 16 + r;
      return key < sq.kv_len ? base + ((long long)(sq.kv_start + key) * kv_heads + kv_head) * D : nullptr;
    };
  };
  if constexpr (WANT_K) write_rows<T, D, DP>(dk, a.scale, lane, key_out(a.grad_k));
  if constexpr (WANT_V) write_rows<T, D, DP>(dv, 1.f, lane, key_out(a.grad_v));
}

// Step 2: grad_q of 64 packed query rows of one KV head.
template <class T, class P>
__device__ __forceinline__ void queries_step(const Args<T>& a) {
  constexpr int D = P::head_dim, DP = kPaddedColumns<D>, G = P::group, BM = 16 * kWarps, BK = P::bk;
  static_assert(BK % 16 == 0, "keys go 16 at a time");
  using QTile = mojo::Tile<BM, DP, 2>;
  using KTile = mojo::Tile<BK, DP, 2>;
  constexpr int STAGE_BYTES = 2 * KTile::BYTES;  // K then V
  static_assert(2 * QTile::BYTES + kStages * STAGE_BYTES + 2 * BM * 4 == smem_bytes(2, BM, BK, DP, BM),
                "the layout smem_bytes sizes");
  MOJO_DYNAMIC_SMEM(smem);
  unsigned char *const q_tile = smem, *const do_tile = q_tile + QTile::BYTES, *const ring = do_tile + QTile::BYTES;
  float *const lse_s = reinterpret_cast<float*>(ring + kStages * STAGE_BYTES), *const dot_s = lse_s + BM;

  const int kv_head = (int)mojo::block_y();
  const Batch batch = batch_of(a);
  auto tiles_of = [&](int s) { return (mojo_attention::queries(batch, s).count * G + BM - 1) / BM; };
  int seq = 0, tile = 0;
  if (!find_tile(a.batch, (int)mojo::block_x(), tiles_of, seq, tile)) return;
  const Sequence sq = sequence(batch, seq);
  const int row0 = tile * BM, offset = sq.kv_len - sq.q_count;
  const int lane = (int)mojo::thread_x() % 32, warp = (int)mojo::thread_x() / 32;

  // Row r: token (row0 + r) / G of head kv_head G + (row0 + r) % G.
  auto row_of = [&](const T* base, long long stride) {
    return [=](int r, int col) -> const T* {
      const int token = (row0 + r) / G;
      return token < sq.q_count && col < D
                 ? base + (long long)(sq.q_start + token) * stride + (kv_head * G + (row0 + r) % G) * D + col
                 : nullptr;
    };
  };
  load_tile<T, BM, DP>(q_tile, a.q, row_of(a.q, a.q_stride));
  load_tile<T, BM, DP>(do_tile, a.grad_out, row_of(a.grad_out, (long long)a.heads * D));
  mojo::cp_async_commit();
  for (int r = (int)mojo::thread_x(); r < BM; r += kThreads) {
    const int token = (row0 + r) / G;
    const long long at = (long long)(kv_head * G + (row0 + r) % G) * a.q_tokens + sq.q_start + token;
    lse_s[r] = token < sq.q_count ? a.lse[at] : mojo::neg_inf();
    dot_s[r] = token < sq.q_count ? a.dot[at] : 0.f;
  }

  // The keys these rows may see, [lo, hi); a round per tile of BK of them.
  const int first = row0 / G, last = min_i((row0 + BM - 1) / G, sq.q_count - 1);
  KeyRange keys{0, sq.kv_len};
  mojo_attention::keys_seen<P::causal != 0, P::window != 0>(offset + first, offset + last, a.window, keys.lo,
                                                            keys.hi);
  const int k_begin = keys.lo > 0 ? keys.lo / BK * BK : 0;
  const int rounds = keys.hi > k_begin ? (keys.hi - k_begin + BK - 1) / BK : 0;
  auto load_round = [&](int round) {
    unsigned char* const k_tile = ring + round % kStages * STAGE_BYTES;
    const int k0 = k_begin + round * BK;
    load_tile<T, BK, DP>(k_tile, a.k, key_rows<D>(a.k, a.k_stride, sq, k0, kv_head));
    load_tile<T, BK, DP>(k_tile + KTile::BYTES, a.v, key_rows<D>(a.v, a.v_stride, sq, k0, kv_head));
    mojo::cp_async_commit();
  };

  float dq[DP / 8][4];
#pragma unroll
  for (int d = 0; d < DP / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[d][e] = 0.f;
  int token_of[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) token_of[h] = (row0 + warp * 16 + lane / 4 + h * 8) / G;

  if (rounds > 0) load_round(0);
  for (int round = 0; round < rounds; ++round) {
    begin_round(round, rounds, load_round);

    const int k0 = k_begin + round * BK;
    const unsigned char *const k_tile = ring + round % kStages * STAGE_BYTES, *const v_tile = k_tile + KTile::BYTES;
    float s[BK / 8][4], dp[BK / 8][4];
    rows_times_rows<T, D, DP, BM, BK>(s, q_tile, warp * 16, k_tile, lane);
    rows_times_rows<T, D, DP, BM, BK>(dp, do_tile, warp * 16, v_tile, lane);
#pragma unroll
    for (int j = 0; j < BK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, r = warp * 16 + lane / 4 + h * 8, key = k0 + j * 8 + 2 * (lane % 4) + e % 2;
        const bool seen = token_of[h] < sq.q_count && mojo_attention::visible<P::causal != 0, P::window != 0>(
                                                          key, offset + token_of[h], keys, a.window);
        score_gradient<P::softcap != 0>(s[j][e], dp[j][e], seen, lse_s[r], dot_s[r], a.scale, a.softcap);
      }
    add_product<T, D, DP, BK>(dq, dp, k_tile, lane);
  }
  mojo::cp_async_wait<0>();  // Q and grad_out's copies, where there was no round to wait for them
  write_rows<T, D, DP>(dq, a.scale, lane, [&](int r) -> T* {
    const int row = row0 + warp * 16 + r, token = row / G;
    return token < sq.q_count ? a.grad_q + ((long long)(sq.q_start + token) * a.heads + kv_head * G + row % G) * D
                              : nullptr;
  });
}

// Step 3: grad_sinks[head] = -sum over the head's queries of exp(sink - lse) D.
__device__ __forceinline__ void sinks_step(float* grad_sinks, const float* sinks, const float* lse, const float* dot,
                                           int q_tokens) {
  __shared__ float scratch[32];
  const int head = (int)mojo::block_x();
  float sum = 0.f;
  for (int t = (int)mojo::thread_x(); t < q_tokens; t += kThreads) {
    const long long at = (long long)head * q_tokens + t;
    sum += mojo::exp_approx(sinks[head] - lse[at]) * dot[at];
  }
  sum = mojo::block_sum<kThreads>(sum, scratch);
  if (mojo::thread_x() == 0) grad_sinks[head] = -sum;
}

}  // namespace mojo_sdpa_backward

#define MOJO_KERNEL_sdpa_backward(NAME, P)                                                                      \
  extern "C" __global__ void __launch_bounds__(mojo_sdpa_backward::kThreads, 1)                               \
      NAME(MOJO_ARG_PARAMS(MOJO_SDPA_BACKWARD_ARGS, P::dtype)) {                                              \
    mojo::after_previous_kernels();                                                                           \
    using T = P::dtype;                                                                                       \
    if constexpr (P::step == 0) {                                                                             \
      mojo_sdpa_backward::dot_rows<T, P::head_dim>(dot, grad_out, out, grad_lse, q_tokens, heads);            \
    } else if constexpr (P::step == 3) {                                                                      \
      mojo_sdpa_backward::sinks_step(grad_sinks, sinks, lse, dot, q_tokens);                                  \
    } else {                                                                                                  \
      const mojo_sdpa_backward::Args<T> a{grad_q, grad_k, grad_v, grad_sinks, grad_out, q,     k,     v,         \
                                          out,    lse,    grad_lse, cu_q,     cu_k,     sinks, dot,              \
                                          q_stride, k_stride, v_stride, batch,    q_tokens, kv_tokens, heads, \
                                          kv_heads, scale,  softcap,  window};                                \
      if constexpr (P::step == 1)                                                                             \
        mojo_sdpa_backward::keys_step<T, P>(a);                                                               \
      else                                                                                                    \
        mojo_sdpa_backward::queries_step<T, P>(a);                                                            \
    }                                                                                                         \
  }
