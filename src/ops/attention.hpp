// The three attention ops (sdpa, paged_prefill_gqa, paged_decode_gqa) are one
// OpDef over one template (kernel_templates/attention.cu): attention.cpp
// holds their data, params, geometry and kernel arguments; attention_data.cpp
// their shapes from the command line and the debug checks of the lengths and
// tables a launch reads. Their references and random inputs: src/check/attention.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/op.hpp"

namespace mojo::attention {

constexpr DType kTypes[] = {DType::f16, DType::bf16};
constexpr std::int64_t kHeadDims[] = {64, 96, 128, 256};

enum class Kind { sdpa, paged_prefill, paged_decode };

// Where each of the kernel's inputs sits in an op's tensor list (-1: the op has none).
struct Slots {
  int cu_q, cu_k, block_tables, context_lens, sinks, lse;
};
constexpr Slots slots_of(Kind kind) {
  switch (kind) {
    case Kind::sdpa:
      return {4, 5, -1, -1, 6, 7};
    case Kind::paged_prefill:
      return {4, -1, 5, 6, 7, 8};
    case Kind::paged_decode:
      return {-1, -1, 4, 5, 6, 7};
  }
  return {};
}

// D rounded up to the tile width the kernel uses (attention.cu's DP).
inline std::int64_t padded(std::int64_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }
// Whether TMA boxes of a paged cache's blocks of `page` tokens tile the sm_90a prefill's key tiles of `bn` keys:
// whole blocks of 8 or more tokens (a box starts on the 8-row atom of the 128-byte swizzle), or tiles within one
// block. Elsewhere its producer gathers the keys (param gather).
inline bool tma_tiles(std::int64_t bn, std::int64_t page) {
  return (bn % page == 0 && page % 8 == 0) || page % bn == 0;
}
// The sm_90a prefill's key tiles under a mask or for a paged cache (and at head_dim 256 always): 128 keys, or at
// head_dim 256, whose O takes 128 registers a thread, 80 (FlashAttention 3's tiles), or 64 where a paged cache's
// blocks (of 32 tokens, or a multiple of 64) take TMA boxes for 64 but not for 80 (`page`: the cache's block size;
// 0 for packed keys).
inline std::int64_t masked_key_tile(std::int64_t head_dim, std::int64_t page) {
  if (head_dim != 256) return 128;
  return page > 0 && !tma_tiles(80, page) && tma_tiles(64, page) ? 64 : 80;
}

// The query-key pairs one sequence of `q_len` queries over `k_len` keys computes: causal aligns the queries at
// the keys' end (query i sees k_len - q_len + i + 1 keys), a window >= 0 keeps window + 1 of them. Counted by
// ideal_cost and by the bench (which knows each sequence's real lengths).
double query_key_pairs(std::int64_t q_len, std::int64_t k_len, bool causal, double window);

class AttentionOp final : public OpDef, public Tunable {
 public:
  AttentionOp(const OpInfo& info, Kind kind) : OpDef(info), kind_(kind), slots_(slots_of(kind)) {}

  // Autotuning the prefill ops on sm_90a: the heuristic's kernel, sdpa's other key tile where there is a choice,
  // and the sm_80 path.
  const Tunable* tuning() const noexcept override { return kind_ != Kind::paged_decode ? this : nullptr; }
  std::vector<Params> candidates(const Params& chosen, TensorList tensors, ScalarList scalars,
                                 const Target& target) const override;
  // "tokens<=4096 keys<=4096": a sequence's (a varlen batch's mean; a paged sequence's keys: its block table's
  // reach), each a power of two.
  std::string bucket(TensorList tensors) const override;
  bool safe(TensorList, ScalarList) const override { return true; }  // the outputs are only written

  std::vector<Params> plan(const Params& p) const override;
  std::string entry_macro(const Params& p) const override;
  std::size_t workspace_bytes(const Params& p, TensorList t) const override;

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override;

  LaunchGeometry geometry(const Params& p, TensorList t) const override;
  std::vector<double> block_work(const Params& p, TensorList t) const override;

  // Every sequence as long as the shapes allow (equal lengths; paged: its whole block table): the query-key
  // pairs' FLOPs (causal aligned at the sequences' ends, a window keeping window + 1 keys), the K/V read once.
  IdealCost ideal_cost(TensorList t, ScalarList scalars) const override;

  // attention.cu's shared memory: the Q tile and the K/V rings, or after the loop the f32 O tile and row
  // stats; attention_sm90.cuh's: Q, the K/V ring, P and the barriers.
  unsigned max_dynamic_smem(const Params& p) const override;

  void pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace& workspace,
                 KernelArgs& args) const override;

  // Debug checks: the lengths agree with each other and the tensors, block table entries are pages.
  void check_data(TensorList t, ScalarList, StreamHandle stream) const override;

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override;

 private:
  struct Shape {
    DType dtype;
    std::int64_t tokens, heads, head_dim, kv_heads, kv_tokens;  // kv_tokens: the cache's blocks when paged
    std::int64_t q_stride, k_stride, v_stride, batch, page, max_blocks, q_len;  // q_len: decode only
  };

  // The second kernel of a split plan; op-level params (no "step") stand for the first.
  static bool is_merge(const Params& p) { return p.get("splits") > 1 && p.get_or("step", 0) == 1; }

  static bool present(TensorList t, int slot) { return slot >= 0 && t[std::size_t(slot)].spec.rank() != 0; }
  // Several sequences (a batch, or lengths from cu_seqlens_q), or one: the kernel's param varlen.
  bool varlen(const Shape& s, TensorList t) const {
    return kind_ != Kind::sdpa || s.batch > 1 || present(t, slots_.cu_q);
  }

  // The op's tensors, validated, as the numbers the kernel takes; its three parts below.
  Shape shape(TensorList t) const;
  void keys_of(TensorList t, Shape& s) const;
  void sequences_of(TensorList t, Shape& s) const;
  void sinks_and_lse_of(TensorList t, const Shape& s) const;

  void index_vector(std::string_view arg, const TensorSpec& t) const;

  // Prefill: the row tiles of 16 * wm packed query rows of a KV head (attention_args.h's prefill_row_tiles, which
  // the persistent kernel counts too): the grid's x, or what a persistent grid's blocks loop over for each head.
  std::int64_t row_tiles(const Params& p, TensorList t) const;
  // Decode: the query tiles of 16 * wm rows (q_len x group) of every sequence, the grid's x.
  static std::int64_t decode_tiles(const Shape& s, std::int64_t wm) {
    return s.batch * ((s.q_len * (s.heads / s.kv_heads) + 16 * wm - 1) / (16 * wm));
  }
  // Decode: how many splits of each sequence's keys, from the performance model (attention.cpp says how).
  // `threads` and `smem`: a block's threads and dynamic shared memory.
  static std::int64_t decode_splits(const Shape& s, std::int64_t wm, unsigned threads, unsigned smem,
                                    const Target& target);
  // Keys per split: the longest possible context over the splits, in whole key tiles.
  static std::int64_t chunk(const Params& p, const Shape& s);
  // The KV heads whose row tiles go out together, longest first (attention.cu's place_block); 1: head by head.
  std::int64_t section_heads(const Params& p, const Shape& s) const;

  // 90: the sm_90a prefill; 80: the sm_80 template (the `path` scalar, checked, or the heuristic).
  int prefill_path(ScalarList scalars, const Target& target) const;
  // Whether the target takes the sm_90a prefill (attention_sm90.cuh): every head_dim and paged cache.
  bool sm90_path(const Target& target) const;
  // Its key tile: `unmasked` (no causal mask, window or paged cache), `pinned` the key_tile scalar (0: free).
  static std::int64_t sm90_key_tile(const Shape& s, bool unmasked, std::int64_t pinned);

  // cu_seqlens values read back: starts at 0, never decreases, ends at `total`; the lengths.
  std::vector<std::int64_t> lengths(std::string_view arg, const Tensor& cu, std::int64_t total,
                                    StreamHandle stream) const;

  Kind kind_;
  Slots slots_;
};

}  // namespace mojo::attention
