// Attention prefill, the sm_90a path (Hopper), FlashAttention-3 style:
// included by attention.cu for head_dim 64, 96 (as 128), 128 and 256 (sdpa
// and paged_prefill_gqa, over a paged cache of any block size), param
// wgmma = 1.
//
// A block takes 128 packed query rows (two consumer warpgroups of 64) of one
// KV head, or 192 (three consumers) at head_dim 64 where param wm = 12, as
// FlashAttention 3 does there; with param persistent = 1, a block an SM
// takes row tiles one after another, handed out in shared memory (run_sm90
// says how), the ring and the turns going on from tile to tile.
// Warpgroup 0 is the producer: one thread streams the K and V tiles
// (BN keys x head_dim: 176 keys without a causal mask or window, else 128;
// 80 at head_dim 256, whose O takes 128 registers a thread, or 64 there for
// a paged cache of blocks that tile 64 keys but not 80) with TMA into a
// STAGES-deep ring of 128-byte-swizzled shared memory (64-column boxes; a
// paged tile is one box per cache block, or part of one block), each stage
// guarded by a "full" mbarrier (its bytes landed) and an "empty" one (all
// consumers are done with it). The whole producer warpgroup gathers a paged
// tile instead, 16 bytes at a time with cp.async into the same layout (as
// FlashAttention 3 does for such caches), where TMA boxes cannot tile it
// with cache blocks (blocks of 1 to 4 tokens, as SGLang's, or of sizes that
// neither divide nor are a multiple of BN: param gather = 1), and for a
// sequence's last tile, whose boxes would read slots past its context.
// Each consumer computes S = Q K^T with wgmma from shared memory (its Q
// tile, which it loads itself), applies the masks (only to the tiles some
// of its rows see in part) and the online softmax in registers, and
// accumulates O += P V with wgmma, P from registers (the layout of S's
// accumulators is that of A's fragments: packed in pairs, they are the
// operand as they stand) and V read MN-major. The consumers take turns on
// the tensor cores (a named barrier each): one's softmax runs under
// another's matmuls. The producer gives up registers to the consumers.
//
// Kernel args: attention.cu's (MOJO_ATTENTION_ARGS), then (gather = 0) the
// TMA descriptors of k and v as 3-D tensors (head_dim, rows, kv_heads): rows
// are the packed tokens (boxes of 64 x BN x 1) or the cache's slots (boxes
// of 64 x min(block_size, BN) x 1).
// Geometry: 128 threads a warpgroup (384, or 512 with three consumers); grid
// as the sm_80 path's with tiles of 16 * wm rows, or persistent (row tiles x
// KV heads, which the runtime clamps to the SMs); dynamic
// shared memory: sm90_smem (attention_args.h; head_dim 256: 230,432 bytes, or
// 231,072 paged, under the 232,448 a block may take).
#pragma once

#include "mojo_wgmma.cuh"

namespace mojo_attention {

// A key tile's scores S of a thread's two rows (at positions pos) into log2 units, capped, and masked where
// MASKED; each row's maximum into tile_max. Element 4j + e of s is row e / 2's, key key0 + 8j + e % 2.
template <class P, bool MASKED, int N>
__device__ __forceinline__ void scale_scores(float (&s)[N], float (&tile_max)[2], int key0, const int (&pos)[2],
                                             const Work& w, int window, float score_scale, float cap_log2) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int h = (i % 4) / 2, key = key0 + (i / 4) * 8 + i % 2;
    const float x = P::softcap ? cap_log2 * mojo::tanh_f(s[i] * score_scale) : s[i] * score_scale;
    s[i] = MASKED ? mojo::select_f(visible<P::causal != 0, P::window != 0>(key, pos[h], w, window), x, mojo::neg_inf())
                  : x;
    tile_max[h] = mojo::max_f(tile_max[h], s[i]);
  }
}

// The block's shared memory (sm90_smem): the window addresses of the ring and its barriers, and the key rows a
// gathered tile looks up.
struct Smem {
  unsigned ring, full, empty;
  long long* key_rows;
};

// A persistent block's row tiles as its threads learn them (run_sm90): two slots, each a row tile's work and KV
// head or (valid = 0) the end; their mbarriers after them (kSm90TileSlotsBytes).
struct TileSlots {
  struct Slot {
    Work w;
    int kv_head, valid;
    int pad[3];
  } slot[2];
};
static_assert(sizeof(TileSlots) + 4 * 8 == kSm90TileSlotsBytes, "sm90_smem's count");

// The producer warpgroup: a row tile's key tiles into the ring, stage by stage as the consumers release them;
// `done` key tiles went through the ring before (a persistent block's earlier row tiles), so its stages and their
// phases go on from there.
template <class T, class P>
__device__ __forceinline__ void produce_keys(const T* __restrict__ k, const T* __restrict__ v, const Batch& a,
                                             const Work& w, const Smem& m, int kv_heads, int kv_head, int done,
                                             const mojo::TensorMap* k_map, const mojo::TensorMap* v_map) {
  constexpr int D = P::head_dim, DP = (D + 63) / 64 * 64, BN = P::bn, STAGES = P::stages;
  constexpr int BOX = P::paged && P::page < BN ? P::page : BN;  // key rows per TMA box
  static_assert(P::gather || (BN % BOX == 0 && BOX % 8 == 0 && (!P::paged || P::page % BOX == 0)),
                "TMA boxes: whole cache blocks of 8 to 128 tokens a key tile, or a key tile within one block");
  constexpr unsigned KV_BYTES = sm90_smem(16 * P::wm, DP, BN, STAGES, P::paged != 0, P::persistent != 0).kv_bytes;
  constexpr int GATHERED = 2 * (P::wm / 4) + 1;  // the named barrier of the gather: after the consumers' (run_sm90)
  const int tid = (int)mojo::thread_x();
  // A tile's keys by TMA (thread 0 alone): whole boxes, zeros past the tensor's edges.
  auto tma_tile = [&](int stage, int k0) MOJO_INLINE_LAMBDA {
    const unsigned k_dst = m.ring + stage * 2 * KV_BYTES, v_dst = k_dst + KV_BYTES, bar = m.full + 8 * stage;
    mojo::mbarrier_arrive_expect_tx(bar, 2 * KV_BYTES);
#pragma unroll
    for (int box = 0; box < BN / BOX; ++box) {
      int row = w.sq.kv_start + k0 + box * BOX;
      if constexpr (P::paged != 0) {
        // A block past the table or not in the cache: a box past the cache's end, which reads zeros.
        const int key = k0 + box * BOX, index = key / P::page;
        const int page = index < a.max_blocks ? a.block_table[(long long)w.seq * a.max_blocks + index] : -1;
        row = page >= 0 && page < a.kv_tokens ? page * P::page + key % P::page : a.kv_tokens * P::page;
      }
#pragma unroll
      for (int sub = 0; sub < DP / 64; ++sub) {
        const unsigned at = sub * BN * 128 + box * BOX * 128;
        mojo::tma_load_3d(k_dst + at, k_map, bar, sub * 64, row, kv_head);
        mojo::tma_load_3d(v_dst + at, v_map, bar, sub * 64, row, kv_head);
      }
    }
  };
  // A tile's keys gathered by the whole warpgroup: each warp takes a quarter of them, its lanes look up one
  // key's cache row each (a load a lane, all in flight at once) into `rows`, and all copy the keys 16 bytes at a
  // time with cp.async, zeros where a key is not there to read. Each thread waits for its copies, makes them
  // visible to wgmma (the async proxy reads what the generic proxy wrote), and when all have, thread 0 arrives
  // at the stage's "full" barrier. Waiting costs no overlap: a consumer releases a stage only once the next
  // tile has landed, so the next tile's stage is not free before this one lands.
  auto gather_tile = [&](int stage, int k0) MOJO_INLINE_LAMBDA {
    constexpr int ROWS = BN / 4, CHUNKS = DP / 8;  // a warp's keys of a tile; the 16-byte pieces of a key
    static_assert(!P::paged || (ROWS <= 32 && ROWS * CHUNKS % 32 == 0), "a key a lane; every lane copies as often");
    const int warp = tid / 32, lane = tid % 32;
    if (lane < ROWS) {  // -1: not there to read
      const CacheRow row = cache_row<P>(a, w, k0 + warp * ROWS + lane, kv_heads, kv_head);
      m.key_rows[warp * ROWS + lane] = row.valid ? row.at : -1;
    }
    mojo::sync_warps(GATHERED, 128);
    const unsigned k_dst = m.ring + stage * 2 * KV_BYTES;
#pragma unroll 1  // within the producer's 40 registers
    for (int c = lane; c < ROWS * CHUNKS; c += 32) {
      const int r = warp * ROWS + c / CHUNKS, col = (c % CHUNKS) * 8;
      const long long row = m.key_rows[r];
      const bool valid = row >= 0 && col < D;
      const unsigned at = k_dst + mojo::swizzled<BN>(r, col);
      mojo::cp_async_16(at, valid ? k + row + col : k, valid ? 16 : 0);
      mojo::cp_async_16(at + KV_BYTES, valid ? v + row + col : v, valid ? 16 : 0);
    }
    mojo::cp_async_commit();
    mojo::cp_async_wait<0>();
    mojo::fence_proxy_async();
    mojo::sync_warps(GATHERED, 128);  // all copies landed and fenced, and `rows` read before the next tile's
    if (tid == 0) mojo::mbarrier_arrive(m.full + 8 * stage);
  };
  // A paged cache's last tile, where its TMA boxes would reach past the sequence's context into slots that it
  // never wrote (NaN there would reach O, even times a probability of 0), is gathered. Packed keys go by TMA
  // alone. Over a paged cache the whole warpgroup waits for every stage in turn, as thread 0 does: a thread that
  // skipped to a later tile would wait for a phase two or more ahead, and a parity wait cannot tell it from one
  // that completed before.
  if (!P::paged && tid != 0) return;
  for (int it = 0; it < w.kv_tiles; ++it) {
    const int n = done + it, stage = n % STAGES, k0 = w.tile_begin + it * BN;
    mojo::mbarrier_wait(m.empty + 8 * stage, ((n / STAGES) & 1) ^ 1);  // every consumer released it
    if (P::gather || (P::paged && k0 + BN > w.sq.kv_len)) gather_tile(stage, k0);
    else if (tid == 0) tma_tile(stage, k0);
  }
}

template <class T, class P>
__device__ __forceinline__ void run_sm90(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,
                                         const T* __restrict__ v, const Batch& a,
                                         const float* __restrict__ sinks, float* __restrict__ lse, long long q_stride,
                                         int heads, int kv_heads, float scale, float softcap, int window,
                                         int section_heads, const mojo::TensorMap* k_map,
                                         const mojo::TensorMap* v_map) {
  // DP: head_dim in whole 64-column sub-tiles (96 in two, the last half zeros: TMA fills the columns past the
  // tensor's, the Q load writes them, and P V computes and drops them).
  constexpr int D = P::head_dim, DP = (D + 63) / 64 * 64, G = P::group, BM = 16 * P::wm, BN = P::bn;
  constexpr int STAGES = P::stages, CONSUMERS = BM / 64;
  static_assert(D == 64 || D == 96 || D == 128 || D == 256, "the sm_90a path: head_dim 64, 96, 128 or 256");
  static_assert(BM == 128 || (BM == 192 && D == 64 && BN == 128),
                "query tiles of 128 rows, or of 192 at head_dim 64 (FlashAttention 3's), where three consumers' "
                "registers hold key tiles of 128");
  static_assert((D == 256 ? BN == 80 || (BN == 64 && P::paged) : BN == 128) ||
                    (BN == 176 && D != 256 && !P::causal && !P::window && !P::paged),
                "key tiles of 128 (80 at head_dim 256: O holds 128 registers; 64 for cache blocks that do not tile "
                "80), or of 176 where every tile sees all its keys");
  static_assert(sizeof(T) == 2, "wgmma here takes f16 or bf16");
  static_assert(!P::persistent || BM == 128, "a persistent grid on query tiles of 128 rows (attention.cpp says why)");
  constexpr Sm90Smem L = sm90_smem(BM, DP, BN, STAGES, P::paged != 0, P::persistent != 0);
  constexpr unsigned Q_BYTES = L.q_bytes, KV_BYTES = L.kv_bytes;
  MOJO_DYNAMIC_SMEM(smem);
  // 128-byte swizzling repeats every 1024 bytes: the tiles start on such a boundary.
  const unsigned base = (mojo::smem_address(smem) + 1023u) & ~1023u;
  unsigned char* const base_ptr = smem + (base - mojo::smem_address(smem));
  const unsigned ring = base + L.ring, full = base + L.full, empty = base + L.empty;
  const int tid = (int)mojo::thread_x(), warpgroup = tid / 128;

  // A block takes its row tile (place_block: a tile of a KV head, or none, a grid's spare tile). With
  // P::persistent the grid (a block an SM) takes them all, in rounds (hand_out below says in which order): consumer
  // 0's first thread looks the block's row tiles up and hands each one to the producer and the consumers, a row
  // tile ahead, through two slots in shared memory (TileSlots, each slot with a "full" and an "empty" mbarrier),
  // then a slot with valid = 0 for the end. Each warpgroup looking them up itself, find_work's state and the loop's
  // counters spilled: under LLVM in the producer's 40 registers (8 to 52 local loads and stores), and at head_dim
  // 256 and on 192-row tiles in the consumers'.
  TileSlots::Slot* const slots = reinterpret_cast<TileSlots*>(base_ptr + L.tiles)->slot;
  const unsigned slot_full = base + L.tiles + sizeof(TileSlots), slot_empty = slot_full + 16;
  // The j-th row tile handed over (or the end), read by a thread of the producer or of a consumer.
  auto take_slot = [&](int j) MOJO_INLINE_LAMBDA {
    mojo::mbarrier_wait(slot_full + 8 * (j % 2), (j / 2) & 1);
    const TileSlots::Slot slot = slots[j % 2];
    mojo::mbarrier_arrive(slot_empty + 8 * (j % 2));
    return slot;
  };
  auto find = [&](int tile, Work& found) MOJO_INLINE_LAMBDA {
    return find_work<BM, BN, G, P::causal != 0, P::window != 0, P::varlen != 0>(a, tile, 0, 0x3fffffff, window,
                                                                                found);
  };
  Work w;
  int kv_head = 0;
  if constexpr (P::persistent == 0) {  // the block's one row tile
    const Place place = place_block(section_heads);
    kv_head = place.kv_head;
    if (!find(place.tile, w)) return;
  }
  if (tid == 0) {
    if constexpr (P::gather == 0) {
      mojo::tma_prefetch_descriptor(k_map);
      mojo::tma_prefetch_descriptor(v_map);
    }
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mojo::mbarrier_init(full + 8 * s, 1);  // thread 0 of the producer
      mojo::mbarrier_init(empty + 8 * s, CONSUMERS * 128);
    }
    if constexpr (P::persistent != 0)
      for (int s = 0; s < 2; ++s) {
        mojo::mbarrier_init(slot_full + 8 * s, 1);                      // the thread that hands the tiles out
        // The producer threads and every consumer thread, each having read it.
        mojo::mbarrier_init(slot_empty + 8 * s, (P::paged ? 128 : 1) + CONSUMERS * 128);
      }
    mojo::fence_barrier_init();
  }
  mojo::sync_block();

  // The producer gives up registers to the consumers: of the 64K a block of one an SM has, multiples of 8 each.
  constexpr int PRODUCER_REGS = CONSUMERS == 2 ? 40 : 32;
  constexpr int CONSUMER_REGS = (65536 / 128 - PRODUCER_REGS) / CONSUMERS / 8 * 8;
  if (warpgroup == 0) {
    mojo::setmaxnreg_dec<PRODUCER_REGS>();
    long long* const key_rows = reinterpret_cast<long long*>(base_ptr + L.rows);
    if constexpr (P::persistent == 0) {
      produce_keys<T, P>(k, v, a, w, Smem{ring, full, empty, key_rows}, kv_heads, kv_head, 0, k_map, v_map);
    } else {
      if (!P::paged && tid != 0) return;  // TMA alone: thread 0
      int done = 0;
      for (int j = 0;; ++j) {  // the row tiles as they are handed over
        const TileSlots::Slot slot = take_slot(j);
        if (!slot.valid) return;
        produce_keys<T, P>(k, v, a, slot.w, Smem{ring, full, empty, key_rows}, kv_heads, slot.kv_head, done, k_map,
                           v_map);
        done += slot.w.kv_tiles;
      }
    }
    return;
  }

  mojo::setmaxnreg_inc<CONSUMER_REGS>();
  const int consumer = warpgroup - 1, ctid = tid % 128, lane = tid % 32, warp = ctid / 32;
  const unsigned q_tile = base + consumer * Q_BYTES;
  unsigned char* const q_ptr = base_ptr + consumer * Q_BYTES;
  const float kLog2e = 1.4426950408889634f;
  const float score_scale = P::softcap ? scale / softcap : scale * kLog2e, cap_log2 = softcap * kLog2e;
  // Each thread's two rows are r and r + 8 of its warp's 16: row_in(h).
  auto row_in = [&](int h) { return warp * 16 + lane / 4 + h * 8; };
  float o[DP / 2], s[BN / 2], m[2], l[2];
  int first_row = 0;  // of this consumer's 64, in the row tile at hand
  int done = 0;       // key tiles through the ring before the row tile's own (a persistent block's earlier ones)

  // Key tile `it`'s stage (its K and V) landed.
  auto wait_keys = [&](int it) MOJO_INLINE_LAMBDA {
    mojo::mbarrier_wait(full + 8 * ((done + it) % STAGES), ((done + it) / STAGES) & 1);
  };
  // S = Q K^T of key tile `it` (landed): issued and committed, not waited for. k steps of 16 are 32 bytes along a
  // row, the second 64 columns a sub-tile further. Q's descriptors are made again each time from an address
  // the optimizer cannot see into: hoisted out of the loop, LLVM kept all eight (16 registers) live through it,
  // and ptxas spilled them (8 to 48 bytes, with several sequences or lse).
  auto issue_scores = [&](int it) MOJO_INLINE_LAMBDA {
    const unsigned k_tile = ring + ((done + it) % STAGES) * 2 * KV_BYTES, q_now = mojo::opaque(q_tile);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) mojo::wgmma_fence_operand(s[i]);
    mojo::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const unsigned long long qd = mojo::wgmma_descriptor(q_now + (kk / 4) * 64 * 128 + (kk % 4) * 32);
      const unsigned long long kd = mojo::wgmma_descriptor(k_tile + (kk / 4) * BN * 128 + (kk % 4) * 32);
      mojo::wgmma<T, BN, 0, 0>(s, qd, kd, kk > 0);
    }
    mojo::wgmma_commit();
  };
  // The online softmax of tile `it`'s scores (complete): scaled (and capped) into log2 units and masked, s
  // becomes the tile's probabilities over the rows' new base, m and l move on, and `correction` is what O must
  // be scaled by before it adds this tile. Element 4j + e of s is at row row_in(e / 2), column 8j + 2 (lane % 4)
  // + e % 2.
  auto softmax = [&](int it, float (&correction)[2]) MOJO_INLINE_LAMBDA {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) mojo::wgmma_fence_operand(s[i]);
    const int k0 = w.tile_begin + it * BN;
    float tile_max[2] = {mojo::neg_inf(), mojo::neg_inf()};
    const int pos[2] = {w.offset + (first_row + row_in(0)) / G, w.offset + (first_row + row_in(1)) / G};
    // Most tiles are seen whole by all 64 rows of this consumer (a uniform branch): no key is compared there,
    // as in FlashAttention 3, which masks only a sequence's last tile and a causal mask's diagonal.
    if (all_visible<P::causal != 0, P::window != 0>(k0, BN, w.offset + first_row / G,
                                                     w.offset + (first_row + 63) / G, w, window))
      scale_scores<P, false>(s, tile_max, k0 + 2 * (lane % 4), pos, w, window, score_scale, cap_log2);
    else
      scale_scores<P, true>(s, tile_max, k0 + 2 * (lane % 4), pos, w, window, score_scale, cap_log2);
    float row_base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = mojo::max_f(tile_max[h], mojo::shfl_xor(tile_max[h], 1));
      tile_max[h] = mojo::max_f(tile_max[h], mojo::shfl_xor(tile_max[h], 2));
      const float m_new = mojo::max_f(m[h], tile_max[h]);
      row_base[h] = m_new == mojo::neg_inf() ? 0.f : m_new;
      correction[h] = mojo::exp2_approx(m[h] - row_base[h]);
      m[h] = m_new;
      l[h] *= correction[h];
    }
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
      s[i] = mojo::exp2_approx(s[i] - row_base[(i % 4) / 2]);
      l[(i % 4) / 2] += s[i];
    }
  };

  // P, 16-bit, in registers: S's accumulators 8 kk .. 8 kk + 8, packed in pairs, are k step kk's A.
  auto pack_probabilities = [&](unsigned (&p)[BN / 16][4]) MOJO_INLINE_LAMBDA {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        p[kk][r] = mojo::pack_pair<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
        mojo::wgmma_fence_operand(p[kk][r]);
      }
  };
  // O = O * correction + P V of tile `it`, issued and committed: V MN-major (head_dim along its rows; its two
  // 64-column sub-tiles BN * 128 bytes apart), a k step of 16 keys 16 rows of V.
  auto issue_values = [&](int it, const unsigned (&p)[BN / 16][4],
                          const float (&correction)[2]) MOJO_INLINE_LAMBDA {
    const unsigned v_tile = ring + ((done + it) % STAGES) * 2 * KV_BYTES + KV_BYTES;
#pragma unroll
    for (int i = 0; i < DP / 2; ++i) {
      o[i] *= correction[(i % 4) / 2];
      mojo::wgmma_fence_operand(o[i]);
    }
    mojo::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      mojo::wgmma_rs<T, DP, 1>(o, p[kk], mojo::wgmma_descriptor(v_tile + kk * 2048, BN * 128), 1);
    mojo::wgmma_commit();
  };
  // Tile it's O += P V done: its stage (K and V) released to the producer.
  auto finish_values = [&](int it) MOJO_INLINE_LAMBDA {
    mojo::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < DP / 2; ++i) mojo::wgmma_fence_operand(o[i]);
    mojo::mbarrier_arrive(empty + 8 * ((done + it) % STAGES));
  };

  // FlashAttention 3's ping-pong between the consumers: they take turns to issue their products, consumer 0
  // first, then 1 (then 2, with three), so that one's softmax runs while another's matmuls hold the tensor cores.
  // A turn begins at the consumer's named barrier (CONSUMERS + 1 + consumer: the previous consumer's arrival lets
  // it pass) and ends by arriving at the next one's. Each consumer takes kv_tiles turns (the first scores and each
  // step of the loop; the last values go without one: taking a turn there made LLVM's build spill 24 bytes). The
  // last consumer's first arrival lets consumer 0 begin, so one arrival at consumer 0's barrier is left when the
  // block ends, as in FlashAttention 3 (a barrier's state does not outlive its block).
  auto take_turn = [&] MOJO_INLINE_LAMBDA { mojo::sync_warps(CONSUMERS + 1 + consumer, 256); };
  auto pass_turn = [&] MOJO_INLINE_LAMBDA {
    mojo::arrive_warps(CONSUMERS + 1 + (consumer + 1) % CONSUMERS, 256);
  };

  // FlashAttention 3's overlap within a warpgroup: tile it + 1's S = Q K^T and tile it's O += P V are in flight
  // together, and tile it + 1's softmax runs under the second. The last tile's product comes after the loop, so
  // that no branch decides which MMAs are in flight (ptxas then serializes them). A consumer waits for its data
  // before its turn, not holding it.
  float correction[2];
  unsigned p[BN / 16][4];
  auto run_keys = [&] MOJO_INLINE_LAMBDA {
    wait_keys(0);
    take_turn();
    issue_scores(0);
    pass_turn();
    mojo::wgmma_wait<0>();
    softmax(0, correction);
    for (int it = 0; it + 1 < w.kv_tiles; ++it) {
      pack_probabilities(p);  // before the next scores overwrite s
      wait_keys(it + 1);
      take_turn();
      issue_scores(it + 1);
      issue_values(it, p, correction);
      pass_turn();
      mojo::wgmma_wait<1>();  // the scores, committed first
      softmax(it + 1, correction);
      finish_values(it);
    }
    pack_probabilities(p);
    issue_values(w.kv_tiles - 1, p, correction);
    finish_values(w.kv_tiles - 1);
  };

  // Normalise and store: each thread's pairs of columns, with the sink; lse per row.
  auto store_rows = [&] MOJO_INLINE_LAMBDA {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += mojo::shfl_xor(l[h], 1);
      l[h] += mojo::shfl_xor(l[h], 2);
      const int gr = first_row + row_in(h), token = gr / G, head = kv_head * G + gr % G;
      if (token >= w.sq.q_count || w.sq.q_start + token >= a.q_tokens) continue;
      const float base_h = m[h] == mojo::neg_inf() ? 0.f : m[h];
      const Finish f = finish(base_h, l[h], P::sinks ? sinks[head] * kLog2e : mojo::neg_inf());
      T* const row = out + ((long long)(w.sq.q_start + token) * heads + head) * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const int col = j * 8 + 2 * (lane % 4);
        const float pair[2] = {o[4 * j + 2 * h] * f.factor, o[4 * j + 2 * h + 1] * f.factor};
        mojo::store<T, 2>(row + col, mojo::pack_floats<T, 2>(pair));
      }
      if (P::lse && lane % 4 == 0) lse[(long long)head * a.q_tokens + w.sq.q_start + token] = f.lse;
    }
  };

  // Persistent: consumer 0's first thread hands out the row tiles, each into the slot every thread read two tiles
  // before, and after the last one a slot that says so. The grid's blocks take the (tile, KV head) pairs of
  // place_at's order round by round, one each a round, in snake order (block b the b-th of even rounds, the
  // (blocks - 1 - b)-th of odd ones; the performance model's snake_balance): the causal tiles still go out
  // longest first, and the block with a round's longest takes the next round's shortest. In plain order (the b-th
  // of every round) block 0 took the longest of each: the model put Qwen3-8B's 4096-token prefill at 89% busy
  // SMs that way.
  const bool hands_out = P::persistent && consumer == 0 && ctid == 0;
  int handed = 0, round = 0;  // slots filled; the round of the grid's blocks to look at next
  auto hand_out = [&] MOJO_INLINE_LAMBDA {
    if (handed > 0 && !slots[(handed - 1) % 2].valid) return;  // the end went out
    mojo::mbarrier_wait(slot_empty + 8 * (handed % 2), ((handed / 2) & 1) ^ 1);
    const int row_tiles = prefill_row_tiles(a.q_tokens, G, BM, a.batch, P::varlen != 0);
    const int blocks = (int)mojo::grid_dim_x(), at0 = (int)mojo::block_x();
    TileSlots::Slot slot{};
    for (; round * blocks < row_tiles * kv_heads && !slot.valid; ++round) {
      const int at = round * blocks + (round % 2 ? blocks - 1 - at0 : at0);  // snake order
      if (at >= row_tiles * kv_heads) continue;
      const Place place = place_at(at, row_tiles, section_heads);
      slot.kv_head = place.kv_head;
      slot.valid = find(place.tile, slot.w);
    }
    slots[handed % 2] = slot;
    mojo::mbarrier_arrive(slot_full + 8 * (handed % 2));
    ++handed;
  };
  if (hands_out) {  // the first two; then each row tile hands out the next, whose keys load under its output
    hand_out();
    hand_out();
  }

  // The row tiles: Q loaded, the key tiles (a tile may see no key, at a window's or a sequence's edge: its
  // producer loads none), O stored. The turns go on across row tiles: each consumer takes as many in each.
  if (consumer == CONSUMERS - 1) pass_turn();
  for (int j = 0; P::persistent || j == 0; ++j) {
    if constexpr (P::persistent != 0) {
      if (hands_out && j > 0) hand_out();
      const TileSlots::Slot slot = take_slot(j);
      if (!slot.valid) break;
      w = slot.w;
      kv_head = slot.kv_head;
      mojo::sync_warps(1 + consumer, 128);  // every warp's products on the last row tile's Q are done
    }
    first_row = w.row0 + consumer * 64;
    // Q: this consumer's rows into its swizzled tile, zeros past the sequence.
    for (int c = ctid; c < 64 * DP / 8; c += 128) {
      const int r = c / (DP / 8), col = (c % (DP / 8)) * 8, gr = first_row + r, token = gr / G;
      mojo::Pack<T, 8> v;
      if (token < w.sq.q_count && w.sq.q_start + token < a.q_tokens && col < D)
        v = mojo::load<T, 8>(q + (long long)(w.sq.q_start + token) * q_stride + (kv_head * G + gr % G) * D + col);
      else
#pragma unroll
        for (int i = 0; i < 8; ++i) v.v[i] = mojo::from_float<T>(0.f);
      mojo::store<T, 8>(reinterpret_cast<T*>(q_ptr + mojo::swizzled<64>(r, col)), v);
    }
    mojo::fence_proxy_async();
    mojo::sync_warps(1 + consumer, 128);  // named barriers 1 to CONSUMERS
#pragma unroll
    for (int i = 0; i < DP / 2; ++i) o[i] = 0.f;
    m[0] = m[1] = mojo::neg_inf();
    l[0] = l[1] = 0.f;
    if (w.kv_tiles > 0) run_keys();
    store_rows();
    done += w.kv_tiles;
  }
}

}  // namespace mojo_attention
