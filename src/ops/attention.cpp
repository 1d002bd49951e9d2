// Attention: sdpa (packed keys, one sequence or varlen), paged_prefill_gqa and
// paged_decode_gqa (keys from store_kv_cache's paged cache), one template
// (kernel_templates/attention.cu, params there). Paged decode splits the keys
// over blocks when the batch alone would leave the GPU idle (as many as fill
// the model's last wave: decode_splits): a plan of the partial pass and a
// merge, through a workspace.
#include "ops/attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>

#include "attention_args.h"
#include "mojo/error.hpp"
#include "mojo/perf_model.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "ops/cost.hpp"

namespace mojo {
namespace {

using attention::AttentionOp;
using attention::Kind;
using attention::kTypes;

constexpr ScalarArgInfo kScale{"scale", 0.0, "logit scale; 0: 1 / sqrt(head_dim)"},
    kWindow{"window", -1.0, "sliding window: a query sees the keys at most this many positions before it; < 0: all"},
    kSoftcap{"softcap", 0.0, "logit soft-cap: cap * tanh(logit / cap); 0: none"},
    kCausal{"causal", 1.0, "1: a query sees no later key (positions aligned at the sequences' ends); 0: every key"},
    kKeyTile{"key_tile", 0.0,
             "keys a tile on the sm_90a path: 0 the heuristic (176 with neither a causal mask nor a window where that "
             "takes fewer tiles than 128, else 128; 80 at head_dim 256), 128, or 176 without a mask"},
    kQueryTile{"query_tile", 0.0,
               "query rows a block on the sm_90a path: 0 the heuristic (128), 128, or 192 at head_dim 64 (three "
               "consumer warpgroups, as FlashAttention 3's; key tiles of 128)"},
    kPersistent{"persistent", 0.0,
                "1: on the sm_90a path a block an SM, the blocks taking the row tiles round by round in snake order "
                "(FlashAttention 3's persistent kernel: the next tile's keys load under this one's output); 0: a "
                "block a row tile"},
    kPath{"path", 0.0,
          "0: the heuristic picks the kernel path; 80: the sm_80 path (mma.sync); 90: the sm_90a path (TMA + wgmma)"};
constexpr ScalarArgInfo kSdpaScalars[] = {kScale, kWindow, kSoftcap, kCausal, kKeyTile, kQueryTile, kPersistent, kPath};
constexpr ScalarArgInfo kPrefillScalars[] = {kScale, kWindow, kSoftcap, kQueryTile, kPersistent, kPath};
constexpr ScalarArgInfo kDecodeScalars[] = {kScale, kWindow, kSoftcap};

constexpr TensorArgInfo kSdpaTensors[] = {
    {"out", "out", "[tokens, heads, head_dim], contiguous"},
    {"q", "in", "[tokens, heads, head_dim]; tokens may be strided (a view of qkv)"},
    {"k", "in", "[kv_tokens, kv_heads, head_dim]; kv_heads divides heads; tokens may be strided"},
    {"v", "in", "like k"},
    {"cu_seqlens_q", "in", "i32 [batch + 1]: cumulative query lengths (varlen), or absent: one sequence"},
    {"cu_seqlens_k", "in", "i32 [batch + 1]: cumulative key lengths, or absent: those of q"},
    {"sinks", "in", "f32 [heads]: attention-sink logits, or absent"},
    {"lse", "out", "f32 [heads, tokens]: log-sum-exp of each query's logits, or absent"},
};
constexpr TensorArgInfo kPrefillTensors[] = {
    {"out", "out", "[tokens, heads, head_dim], contiguous"},
    {"q", "in", "[tokens, heads, head_dim], the sequences' new tokens packed; tokens may be strided"},
    {"k_cache", "in", "[num_blocks, block_size, kv_heads, head_dim] (store_kv_cache's layout), contiguous"},
    {"v_cache", "in", "like k_cache"},
    {"cu_seqlens_q", "in", "i32 [batch + 1]: cumulative new-token counts"},
    {"block_tables", "in", "i32 [batch, max_blocks]: each sequence's cache blocks, in position order"},
    {"context_lens", "in", "i32 [batch]: each sequence's length, new tokens included (they are its last)"},
    {"sinks", "in", "f32 [heads]: attention-sink logits, or absent"},
    {"lse", "out", "f32 [heads, tokens]: log-sum-exp of each query's logits, or absent"},
};
constexpr TensorArgInfo kDecodeTensors[] = {
    {"out", "out", "[batch * q_len, heads, head_dim], contiguous"},
    {"q", "in", "[batch * q_len, heads, head_dim]: q_len (1 to 16) new tokens per sequence; may be strided"},
    {"k_cache", "in", "[num_blocks, block_size, kv_heads, head_dim] (store_kv_cache's layout), contiguous"},
    {"v_cache", "in", "like k_cache"},
    {"block_tables", "in", "i32 [batch, max_blocks]: each sequence's cache blocks, in position order"},
    {"context_lens", "in", "i32 [batch]: each sequence's length, new tokens included (they are its last)"},
    {"sinks", "in", "f32 [heads]: attention-sink logits, or absent"},
    {"lse", "out", "f32 [heads, batch * q_len]: log-sum-exp of each query's logits, or absent"},
};

constexpr OpInfo kSdpa{
    .name = "sdpa",
    .summary = "scaled dot-product attention over packed keys: GQA, varlen, causal, window, soft-cap, sinks, lse",
    .tensors = kSdpaTensors,
    .scalars = kSdpaScalars,
    .dtypes = kTypes,
    .template_file = "attention.cu",
    .example_shapes = "q=4096x32x128 k=4096x8x128",
};
constexpr OpInfo kPagedPrefill{
    .name = "paged_prefill_gqa",
    .summary = "causal attention of new tokens over a paged KV cache (chunked prefill): GQA, window, soft-cap, sinks",
    .tensors = kPrefillTensors,
    .scalars = kPrefillScalars,
    .dtypes = kTypes,
    .template_file = "attention.cu",
    .example_shapes = "q=1024x32x128 k_cache=1024x16x8x128 cu_seqlens_q=5 block_tables=4x64",
};
constexpr OpInfo kPagedDecode{
    .name = "paged_decode_gqa",
    .summary = "decode attention over a paged KV cache, 1-16 query tokens per sequence, split over the keys",
    .tensors = kDecodeTensors,
    .scalars = kDecodeScalars,
    .dtypes = kTypes,
    .template_file = "attention.cu",
    .example_shapes = "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512",
};

}  // namespace

namespace attention {

std::vector<Params> AttentionOp::plan(const Params& p) const {
  return p.get("splits") == 1 ? std::vector<Params>{p} : two_steps(p);  // the partial attentions, then the merge
}

std::string AttentionOp::entry_macro(const Params& p) const {
  if (is_merge(p)) return "MOJO_ATTENTION_MERGE";
  if (p.get("wgmma")) return p.get("gather") ? "MOJO_ATTENTION_SM90_GATHER" : "MOJO_ATTENTION_SM90";
  return OpDef::entry_macro(p);
}

std::size_t AttentionOp::workspace_bytes(const Params& p, TensorList t) const {
  const std::int64_t splits = p.get("splits"), rows = t[1].spec.dim(0) * t[1].spec.dim(1);
  return splits > 1 ? std::size_t(splits * rows * (p.get("head_dim") + 1)) * sizeof(float) : 0;
}

// The sm_90a prefill's key tile (`pinned`: the key_tile scalar, checked). FlashAttention 3's for head_dim 64 to
// 128: 176 where every tile but a sequence's last is seen whole (`unmasked`: fewer softmax rounds, barriers and
// waits a key), 128 under a causal mask or a window (a wider tile wastes more of the masked keys on their edges);
// a paged cache's blocks of 32 to 128 tokens do not tile 176 keys. And 176 only where it takes fewer rounds over a
// sequence's keys (a varlen batch's mean) than 128: in as many rounds it would only add padding (200 keys: 2
// rounds either way, 352 keys' work against 256). Head_dim 256 takes 80 (masked_key_tile), as FlashAttention 3
// does: its O holds 128 registers a thread (64 for a paged cache whose blocks tile 64 keys but not 80).
std::int64_t AttentionOp::sm90_key_tile(const Shape& s, bool unmasked, std::int64_t pinned) {
  if (masked_key_tile(s.head_dim, s.page) != 128) return masked_key_tile(s.head_dim, s.page);
  if (pinned != 0) return pinned;
  const std::int64_t keys = s.kv_tokens / std::max<std::int64_t>(s.batch, 1);
  auto rounds = [&](std::int64_t bn) { return (keys + bn - 1) / bn; };
  return unmasked && rounds(176) < rounds(128) ? 176 : 128;
}

Params AttentionOp::derive_params(TensorList t, ScalarList scalars, const Target& target) const {
  const Shape s = shape(t);
  const double window = scalar(scalars, "window"), softcap = scalar(scalars, "softcap");
  const double causal = kind_ == Kind::sdpa ? scalar(scalars, "causal") : 1.0;
  if (causal != 0 && causal != 1)
    throw InvalidArgumentError(fmt::format("{}: causal is {}; expected 0 or 1", name(), causal));
  if (!(softcap >= 0) || !std::isfinite(softcap))
    throw InvalidArgumentError(fmt::format("{}: softcap is {}; expected >= 0 (0: none)", name(), softcap));
  if (!std::isfinite(scalar(scalars, "scale")))
    throw InvalidArgumentError(fmt::format("{}: scale is not finite", name()));
  if (window != std::floor(window))  // NaN too
    throw InvalidArgumentError(
        fmt::format("{}: window is {}; expected a whole number (negative: none)", name(), window));
  if (window >= double(INT32_MAX))
    throw InvalidArgumentError(fmt::format("{}: window {} does not fit an int", name(), window));

  Params p;
  p.add_dtype("dtype", s.dtype);
  p.add("head_dim", s.head_dim);
  p.add("group", s.heads / s.kv_heads);
  const std::int64_t dp = padded(s.head_dim);
  std::int64_t wm = 4, wn = 1, bn = dp <= 128 ? 64 : 32, splits = 1, stages = 2;
  const bool wgmma = prefill_path(scalars, target) == 90;
  const bool unmasked = kind_ == Kind::sdpa && causal == 0 && window < 0;
  const double key_tile = kind_ == Kind::sdpa ? scalar(scalars, "key_tile") : 0;
  if (key_tile != 0 && key_tile != 128 && !(key_tile == 176 && unmasked))
    throw InvalidArgumentError(fmt::format(
        "{}: key_tile is {}; expected 0 (the heuristic), 128, or 176 (with neither a causal mask nor a window)", name(),
        key_tile));
  if (wgmma && key_tile != 0 && masked_key_tile(s.head_dim, s.page) != 128)
    throw InvalidArgumentError(fmt::format("{}: key_tile is {}; head_dim {} takes key tiles of {} only (expected 0)",
                                           name(), key_tile, s.head_dim, masked_key_tile(s.head_dim, s.page)));
  const double query_tile = kind_ == Kind::paged_decode ? 0 : scalar(scalars, "query_tile");
  if (query_tile != 0 && query_tile != 128 && query_tile != 192)
    throw InvalidArgumentError(
        fmt::format("{}: query_tile is {}; expected 0 (the heuristic), 128 or 192", name(), query_tile));
  if (query_tile == 192 && !(wgmma && s.head_dim == 64 && key_tile != 176))
    throw InvalidArgumentError(fmt::format(
        "{}: query_tile 192 takes head_dim 64 on the sm_90a path, with key tiles of 128; this is head_dim {} on {}",
        name(), s.head_dim, wgmma ? fmt::format("that path, key_tile {}", key_tile) : std::string("the sm_80 path")));
  const double persistent = kind_ == Kind::paged_decode ? 0 : scalar(scalars, "persistent");
  if (persistent != 0 && persistent != 1)
    throw InvalidArgumentError(fmt::format("{}: persistent is {}; expected 0 or 1", name(), persistent));
  if (persistent == 1 && !wgmma)
    throw InvalidArgumentError(fmt::format("{}: persistent = 1 takes the sm_90a path; this is the sm_80 path", name()));
  // Three consumers' 160 registers do not hold a persistent block's row-tile state beside their tiles: both
  // compilers' builds spilled (16 to 35 local loads and stores).
  if (persistent == 1 && query_tile == 192)
    throw InvalidArgumentError(fmt::format("{}: persistent = 1 takes query tiles of 128 rows, not 192", name()));
  if (wgmma) {
    // A consumer warpgroup for each 64 rows: two, or three for FlashAttention 3's 192-row tiles at head_dim 64,
    // whose registers then hold key tiles of 128 and no more.
    wm = query_tile == 192 ? 12 : 8;
    bn = query_tile == 192 ? 128 : sm90_key_tile(s, unmasked, std::int64_t(key_tile));
  } else if (kind_ == Kind::paged_decode) {
    // Few query rows per sequence (q_len x group): one to four warps along them, the rest split the keys;
    // key tiles small enough that the rings stay within 64 KB.
    const std::int64_t rows = s.q_len * (s.heads / s.kv_heads);
    wm = std::min<std::int64_t>(4, (rows + 15) / 16);
    wn = 4 / wm;
    bn = 32;
    while (wn * 2 * 2 * bn * dp * 2 > 64 * 1024) bn > 16 ? bn /= 2 : wn /= 2;
    Params ring;  // what the kernel's shared memory depends on
    for (auto [name, value] : {std::pair<const char*, std::int64_t>{"head_dim", s.head_dim}, {"wm", wm}, {"wn", wn},
                               {"bn", bn}, {"stages", stages}, {"splits", 1}, {"wgmma", 0}})
      ring.add(name, value);
    splits = decode_splits(s, wm, unsigned(32 * wm * wn), max_dynamic_smem(ring), target);
  }
  p.add("wm", wm);
  p.add("wn", wn);
  p.add("bn", bn);
  p.add("stages", stages);
  p.add("causal", std::int64_t(causal));
  p.add("window", window >= 0 ? 1 : 0);
  p.add("softcap", softcap > 0 ? 1 : 0);
  p.add("sinks", present(t, slots_.sinks) ? 1 : 0);
  p.add("lse", present(t, slots_.lse) ? 1 : 0);
  p.add("varlen", varlen(s, t) ? 1 : 0);
  p.add("paged", kind_ == Kind::sdpa ? 0 : 1);
  p.add("page", s.page);
  p.add("splits", splits);
  p.add("wgmma", wgmma ? 1 : 0);
  p.add("gather", wgmma && kind_ != Kind::sdpa && !tma_tiles(bn, s.page) ? 1 : 0);
  p.add("persistent", std::int64_t(persistent));
  return p;
}

std::vector<Params> AttentionOp::candidates(const Params& chosen, TensorList tensors, ScalarList scalars,
                                            const Target& target) const {
  std::vector<Params> out{chosen};
  if (chosen.get("wgmma") == 0 || scalar(scalars, "path") != 0) return out;  // no choice, or pinned
  // The other key tile, unless pinned, at head_dim 64 the 192-row query tile, and the persistent grid, then the
  // sm_80 path: a hedge on the sm_90a path's tiles, and on its head dims other than 128, which no GPU has timed.
  auto add = [&](const char* name, double value) {
    std::vector<ScalarArg> pinned(scalars.begin(), scalars.end());
    pinned.push_back({name, value});
    try {
      out.push_back(derive_params(tensors, pinned, target));
    } catch (const InvalidArgumentError&) {  // 176 under a mask, or at head_dim 256
    }
  };
  if (kind_ == Kind::sdpa && scalar(scalars, "key_tile") == 0) add("key_tile", chosen.get("bn") == 176 ? 128.0 : 176.0);
  if (chosen.get("head_dim") == 64 && scalar(scalars, "query_tile") == 0) add("query_tile", 192);
  if (scalar(scalars, "persistent") == 0) add("persistent", 1);
  add("path", 80);
  return out;
}

std::string AttentionOp::bucket(TensorList tensors) const {
  const Shape s = shape(tensors);
  auto up = [](std::int64_t v) { return std::bit_ceil(std::uint64_t(std::max<std::int64_t>(v, 1))); };
  const std::int64_t batch = std::max<std::int64_t>(s.batch, 1);
  const std::int64_t keys = kind_ == Kind::sdpa ? s.kv_tokens / batch : s.max_blocks * s.page;
  return fmt::format("tokens<={} keys<={}", up(s.tokens / batch), up(keys));
}

double query_key_pairs(std::int64_t q_len, std::int64_t k_len, bool causal, double window) {
  double pairs = 0;
  for (std::int64_t i = 0; i < q_len; ++i) {
    double seen = causal ? double(std::clamp<std::int64_t>(k_len - q_len + i + 1, 0, k_len)) : double(k_len);
    if (window >= 0) seen = std::min(seen, window + 1);
    pairs += seen;
  }
  return pairs;
}

IdealCost AttentionOp::ideal_cost(TensorList t, ScalarList scalars) const {
  IdealCost c = OpDef::ideal_cost(t, scalars);
  const Shape s = shape(t);
  const bool paged = kind_ != Kind::sdpa;
  const std::int64_t q_len = s.tokens / s.batch, k_len = paged ? s.max_blocks * s.page : s.kv_tokens / s.batch;
  const bool causal = kind_ == Kind::sdpa ? scalar(scalars, "causal") != 0 : true;
  const double pairs = query_key_pairs(q_len, k_len, causal, scalar(scalars, "window"));
  c.flops = 4.0 * pairs * double(s.batch) * double(s.heads) * double(s.head_dim);
  const double per_tensor =
      double(s.batch * k_len) * double(s.kv_heads * s.head_dim) * double(dtype_size(s.dtype));  // K, and V
  for (std::size_t i : {std::size_t(2), std::size_t(3)}) {
    const double read = std::min(per_tensor, cost::bytes(t[i]));
    cost::recount(c, cost::bytes(t[i]), read);
    c.weight_bytes += read;
  }
  return c;
}

std::int64_t AttentionOp::row_tiles(const Params& p, TensorList t) const {
  const Shape s = shape(t);
  return mojo_attention::prefill_row_tiles(s.tokens, int(p.get("group")), 16 * int(p.get("wm")), int(s.batch),
                                           varlen(s, t));
}

LaunchGeometry AttentionOp::geometry(const Params& p, TensorList t) const {
  const Shape s = shape(t);
  LaunchGeometry g;
  if (is_merge(p)) {  // the merge: a warp per (token, head)
    g.grid.x = unsigned((s.tokens * s.heads + 3) / 4);
    g.block.x = 128;
    return g;
  }
  const std::int64_t tiles = kind_ == Kind::paged_decode ? decode_tiles(s, p.get("wm")) : row_tiles(p, t);
  g.grid = {unsigned(tiles), unsigned(s.kv_heads), unsigned(p.get("splits"))};
  if (p.get("persistent")) {  // the runtime clamps x to the SMs; the kernel loops over every (tile, KV head)
    g.grid = {unsigned(tiles * s.kv_heads), 1, 1};
    g.persistent = true;
  }
  // The sm_90a prefill: a consumer warpgroup for each 64 rows, and the producer's.
  g.block.x = p.get("wgmma") ? unsigned(32 * p.get("wm") + 128) : unsigned(32 * p.get("wm") * p.get("wn"));
  g.dynamic_smem = max_dynamic_smem(p);
  return g;
}

// A causal prefill's tiles in launch order, as find_work and place_block (attention.cu) give them out: longest
// first, by rank, then by sequence, then by KV head within a section of them. Each costs its key tiles and one
// more for its Q tile and output; the grid's spare blocks nothing. The sequences are taken as equally long and
// each sees its whole context (as the bench fills them). Other grids' blocks cost alike (a window's nearly).
std::vector<double> AttentionOp::block_work(const Params& p, TensorList t) const {
  if (kind_ == Kind::paged_decode || is_merge(p) || p.get("causal") == 0 || p.get("window") != 0) return {};
  const Shape s = shape(t);
  const std::int64_t bm = 16 * p.get("wm"), bn = p.get("bn"), group = p.get("group");
  const std::int64_t batch = std::max<std::int64_t>(s.batch, 1);
  const std::int64_t kv_len = kind_ == Kind::paged_prefill ? s.max_blocks * s.page : s.kv_tokens / batch;
  std::vector<std::vector<double>> by_rank(static_cast<std::size_t>(batch));  // each sequence's, longest first
  for (std::int64_t seq = 0; seq < batch; ++seq) {
    const std::int64_t q_count = s.tokens / batch + (seq == batch - 1 ? s.tokens % batch : 0);
    const std::int64_t rows = q_count * group, tiles = (rows + bm - 1) / bm;
    for (std::int64_t rank = 0; rank < tiles; ++rank) {
      const std::int64_t last_token = (std::min((tiles - rank) * bm, rows) - 1) / group;
      const std::int64_t keys = std::clamp<std::int64_t>(kv_len - q_count + last_token + 1, 0, kv_len);
      by_rank[std::size_t(seq)].push_back(double((keys + bn - 1) / bn + 1));
    }
  }
  std::vector<double> head;  // the blocks of one KV head (grid.x), the same for each
  for (std::size_t rank = 0;; ++rank) {
    const std::size_t before = head.size();
    for (const auto& tiles : by_rank)
      if (rank < tiles.size()) head.push_back(tiles[rank]);
    if (head.size() == before) break;
  }
  head.resize(std::size_t(row_tiles(p, t)), 0.0);
  const std::int64_t together = section_heads(p, s);  // each tile for every head of a section, then the next
  std::vector<double> work;
  for (std::int64_t split = 0; split < p.get("splits"); ++split)
    for (std::int64_t section = 0; section < s.kv_heads / together; ++section)
      for (double tile : head) work.insert(work.end(), std::size_t(together), tile);
  return work;
}

// The KV heads whose row tiles go out together (place_block, attention.cu): for a causal prefill, the most that
// divide kv_heads and whose keys and values take at most 32 MB together (FlashAttention 3's share of an H100's
// 50 MB of L2), so that the heads of a section share the SMs without reading each other's K and V out of L2. 1
// (head by head) where a grid's tiles cost alike: decode, a window, no causal mask.
std::int64_t AttentionOp::section_heads(const Params& p, const Shape& s) const {
  if (kind_ == Kind::paged_decode || p.get("causal") == 0 || p.get("window") != 0) return 1;
  const std::int64_t keys = kind_ == Kind::sdpa ? s.kv_tokens : s.batch * s.max_blocks * s.page;
  const std::int64_t head_bytes = keys * s.head_dim * 2 * 2;  // K and V, 16-bit
  constexpr std::int64_t kL2Bytes = std::int64_t{32} << 20;
  std::int64_t together = 1;
  for (std::int64_t heads = 2; heads <= s.kv_heads; ++heads)
    if (s.kv_heads % heads == 0 && heads * head_bytes <= kL2Bytes) together = heads;
  return together;
}

// The kernels' own formulas (attention_args.h): the sm_90a prefill's and the sm_80 template's.
unsigned AttentionOp::max_dynamic_smem(const Params& p) const {
  if (is_merge(p)) return 0;
  const int dp = int(padded(p.get("head_dim"))), bn = int(p.get("bn")), stages = int(p.get("stages"));
  if (p.get("wgmma"))
    return mojo_attention::sm90_smem(16 * int(p.get("wm")), dp, bn, stages, p.get("paged") != 0,
                                     p.get("persistent") != 0)
        .bytes;
  return mojo_attention::sm80_smem(16 * int(p.get("wm")), dp, int(p.get("wn")), stages, bn).bytes;
}

void AttentionOp::pack_args(const Params& p, TensorList t, ScalarList scalars, const Workspace& workspace,
                            KernelArgs& args) const {
  const Shape s = shape(t);
  const auto infos = tensor_args();
  for (int i = 0; i < 4; ++i) checks::expect_pointer(name(), infos[std::size_t(i)].name, t[std::size_t(i)], 16);
  auto optional = [&](int slot, unsigned align) {
    if (slot < 0 || !present(t, slot)) return DevicePtr(0);
    checks::expect_pointer(name(), infos[std::size_t(slot)].name, t[std::size_t(slot)], align);
    return t[std::size_t(slot)].data;
  };
  const DevicePtr cu_q = optional(slots_.cu_q, 4);
  const DevicePtr kv_info = kind_ == Kind::sdpa ? (present(t, slots_.cu_k) ? optional(slots_.cu_k, 4) : cu_q)
                                                : optional(slots_.context_lens, 4);
  const DevicePtr block_table = optional(slots_.block_tables, 4), sinks = optional(slots_.sinks, 4),
                  lse = optional(slots_.lse, 4);
  if (p.get("splits") > 1 && workspace.scratch == 0) throw InternalError("a split attention plan without workspace");
  const double scale = scalar(scalars, "scale");
  args.push_args(mojo_attention::Args<void>{
      .out = ptr(t[0]),
      .q = ptr(t[1]),
      .k = ptr(t[2]),
      .v = ptr(t[3]),
      .cu_q = ptr<int>(cu_q),
      .kv_info = ptr<int>(kv_info),
      .block_table = ptr<int>(block_table),
      .sinks = ptr<float>(sinks),
      .lse = ptr<float>(lse),
      .workspace = ptr<float>(workspace.scratch),
      .q_stride = s.q_stride,
      .k_stride = s.k_stride,
      .v_stride = s.v_stride,
      .batch = int(s.batch),
      .q_tokens = int(s.tokens),
      .kv_tokens = int(s.kv_tokens),
      .heads = int(s.heads),
      .kv_heads = int(s.kv_heads),
      .max_blocks = int(s.max_blocks),
      .q_len = int(kind_ == Kind::paged_decode ? s.q_len : 0),
      .chunk = int(chunk(p, s)),
      .scale = float(scale != 0 ? scale : 1.0 / std::sqrt(double(s.head_dim))),
      .softcap = float(scalar(scalars, "softcap")),
      .window = int(std::max(scalar(scalars, "window"), -1.0)),
      .section_heads = int(section_heads(p, s)),
  });
  if (p.get("wgmma") && !p.get("gather")) {
    // K and V as (head_dim, rows, kv_heads) for TMA: packed tokens in boxes of a key tile, or the cache's
    // slots in boxes of one block (of a key tile where a block holds several).
    const std::int64_t rows = kind_ == Kind::sdpa ? s.kv_tokens : s.kv_tokens * s.page;
    const std::int64_t row_stride = kind_ == Kind::sdpa ? s.k_stride : s.kv_heads * s.head_dim;
    const unsigned box = unsigned(kind_ == Kind::sdpa ? p.get("bn") : std::min(s.page, p.get("bn")));
    args.push(tile_tensor_map(t[2].data, s.dtype, s.head_dim, rows, s.kv_heads, row_stride, s.head_dim, 64, box));
    const std::int64_t v_stride = kind_ == Kind::sdpa ? s.v_stride : row_stride;
    args.push(tile_tensor_map(t[3].data, s.dtype, s.head_dim, rows, s.kv_heads, v_stride, s.head_dim, 64, box));
  }
}

// The op's tensors, validated, as the numbers the kernel takes.
AttentionOp::Shape AttentionOp::shape(TensorList t) const {
  const auto infos = tensor_args();
  const TensorSpec &out = t[0].spec, &q = t[1].spec;
  checks::expect_dtype_in(name(), "q", q.dtype(), kTypes);
  for (int i : {0, 2, 3}) checks::expect_same_dtype(name(), infos[std::size_t(i)].name, t[std::size_t(i)].spec, "q", q);
  Shape s{};
  s.dtype = q.dtype();
  s.q_stride = rows::token_stride(name(), "q", q);
  s.tokens = q.dim(0);
  s.heads = q.dim(1);
  s.head_dim = q.dim(2);
  checks::expect_same_shape(name(), "out", out, "q", q);
  checks::expect_contiguous(name(), "out", out);
  if (std::find(std::begin(kHeadDims), std::end(kHeadDims), s.head_dim) == std::end(kHeadDims))
    throw ShapeError(fmt::format("{}: head_dim {} is not supported; supported: 64, 96, 128, 256", name(), s.head_dim));
  keys_of(t, s);
  if (s.heads < 1) throw ShapeError(fmt::format("{}: q is {}; it has no heads", name(), q.str()));
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    throw ShapeError(fmt::format("{}: kv_heads {} does not divide heads {}", name(), s.kv_heads, s.heads));
  if (s.tokens * s.heads > INT32_MAX || s.kv_tokens > INT32_MAX)
    throw ShapeError(fmt::format("{}: more tokens than the kernel's 32-bit indices take", name()));
  sequences_of(t, s);
  sinks_and_lse_of(t, s);
  // 16-byte rows: every token stride a multiple of 8 elements.
  for (auto [arg, stride] : {std::pair{"q", s.q_stride}, {"k", s.k_stride}, {"v", s.v_stride}})
    if (stride % 8 != 0)
      throw ShapeError(fmt::format("{}: {}'s token stride {} is not a multiple of 8 elements", name(), arg, stride));
  return s;
}

// k and v: packed tokens (sdpa) or the paged cache's blocks.
void AttentionOp::keys_of(TensorList t, Shape& s) const {
  const auto infos = tensor_args();
  const TensorSpec &k = t[2].spec, &v = t[3].spec;
  checks::expect_same_shape(name(), infos[3].name, v, infos[2].name, k);
  if (kind_ == Kind::sdpa) {
    s.k_stride = rows::token_stride(name(), "k", k);
    s.v_stride = rows::token_stride(name(), "v", v);
    s.kv_tokens = k.dim(0);
    s.kv_heads = k.dim(1);
    if (k.dim(2) != s.head_dim)
      throw ShapeError(fmt::format("{}: k is {} but q's head_dim is {}", name(), k.str(), s.head_dim));
    return;
  }
  if (k.rank() != 4 || k.dim(3) != s.head_dim)
    throw ShapeError(fmt::format("{}: {} is {}; expected [num_blocks, block_size, kv_heads, {}]", name(), infos[2].name,
                                 k.str(), s.head_dim));
  checks::expect_contiguous(name(), infos[2].name, k);
  checks::expect_contiguous(name(), infos[3].name, v);
  s.kv_tokens = k.dim(0);
  s.page = k.dim(1);
  s.kv_heads = k.dim(2);
  if (s.page < 1 || s.page > 1024)
    throw ShapeError(fmt::format("{}: block_size {}; supported: 1 to 1024", name(), s.page));
  if (s.kv_tokens < 1)  // block_tables index it, in every row
    throw ShapeError(
        fmt::format("{}: {} is {}; it has no blocks for block_tables to name", name(), infos[2].name, k.str()));
}

// The sequences: cu_seqlens_q / cu_seqlens_k, the block tables and context lengths, decode's q_len.
void AttentionOp::sequences_of(TensorList t, Shape& s) const {
  const auto infos = tensor_args();
  s.batch = 1;
  if (present(t, slots_.cu_q)) {
    const TensorSpec& cu = t[std::size_t(slots_.cu_q)].spec;
    index_vector(infos[std::size_t(slots_.cu_q)].name, cu);
    if (cu.dim(0) < 2)
      throw ShapeError(fmt::format("{}: cu_seqlens_q is {}; expected [batch + 1], batch >= 1", name(), cu.str()));
    s.batch = cu.dim(0) - 1;
  } else if (kind_ == Kind::paged_prefill) {
    throw ShapeError(fmt::format("{}: cu_seqlens_q is required ([batch + 1])", name()));
  }
  if (kind_ == Kind::sdpa && present(t, slots_.cu_k)) {
    const TensorSpec& cu = t[std::size_t(slots_.cu_k)].spec;
    index_vector("cu_seqlens_k", cu);
    if (!present(t, slots_.cu_q) || cu.dim(0) != s.batch + 1)
      throw ShapeError(
          fmt::format("{}: cu_seqlens_k is {}; give it with cu_seqlens_q, both [batch + 1]", name(), cu.str()));
  }
  if (kind_ != Kind::sdpa) {
    const TensorSpec &table = t[std::size_t(slots_.block_tables)].spec,
                     &context = t[std::size_t(slots_.context_lens)].spec;
    if (table.rank() != 2 || table.dtype() != DType::i32 || !table.is_contiguous() || table.dim(1) < 1)
      throw ShapeError(
          fmt::format("{}: block_tables is {}; expected i32 [batch, max_blocks], contiguous", name(), table.str()));
    if (kind_ == Kind::paged_decode) s.batch = table.dim(0);
    if (table.dim(0) != s.batch)
      throw ShapeError(fmt::format("{}: block_tables has {} rows but cu_seqlens_q gives {} sequences", name(),
                                   table.dim(0), s.batch));
    index_vector("context_lens", context);
    if (context.dim(0) != s.batch)
      throw ShapeError(
          fmt::format("{}: context_lens is {}; expected [{}], one per sequence", name(), context.str(), s.batch));
    s.max_blocks = table.dim(1);
    if (s.max_blocks * s.page > INT32_MAX) throw ShapeError(fmt::format("{}: block_tables too wide", name()));
  }
  if (kind_ == Kind::paged_decode) {
    if (s.batch < 1 || s.tokens % s.batch != 0 || s.tokens < s.batch || s.tokens / s.batch > 16)
      throw ShapeError(fmt::format("{}: q has {} tokens for {} sequences; expected batch x q_len, q_len 1 to 16",
                                   name(), s.tokens, s.batch));
    s.q_len = s.tokens / s.batch;
  }
}

// sinks and lse, where given.
void AttentionOp::sinks_and_lse_of(TensorList t, const Shape& s) const {
  if (present(t, slots_.sinks)) {
    const TensorSpec& sinks = t[std::size_t(slots_.sinks)].spec;
    if (sinks.dtype() != DType::f32 || sinks.rank() != 1 || sinks.dim(0) != s.heads || !sinks.is_contiguous())
      throw ShapeError(fmt::format("{}: sinks is {}; expected f32 [{}] (one per head)", name(), sinks.str(), s.heads));
  }
  if (present(t, slots_.lse)) {
    const TensorSpec& lse = t[std::size_t(slots_.lse)].spec;
    if (lse.dtype() != DType::f32 || lse.rank() != 2 || lse.dim(0) != s.heads || lse.dim(1) != s.tokens ||
        !lse.is_contiguous())
      throw ShapeError(fmt::format("{}: lse is {}; expected f32 [{}, {}] ([heads, tokens]), contiguous", name(),
                                   lse.str(), s.heads, s.tokens));
  }
}

void AttentionOp::index_vector(std::string_view arg, const TensorSpec& t) const {
  if (t.dtype() != DType::i32 || t.rank() != 1 || !t.is_contiguous())
    throw ShapeError(fmt::format("{}: {} is {}; expected a contiguous i32 vector", name(), arg, t.str()));
}

// Decode: the blocks of one split (batch x kv_heads x query tiles) run in the target's slots, its SMs times
// the blocks an SM holds by threads and shared memory (registers are not known before the compile; the rings
// are sized so that shared memory binds: on sm_90a, 3 blocks an SM for Qwen3-8B's decode with either compiler,
// 128 registers at q_len 1 and 162-168 at q_len 8). A sequence's time goes as its waves times its keys per split, i.e.
// as 1 / the last wave's fill. Of 1 to 16 splits, each at least 512 keys: the most when even they fit one wave (each
// split more shortens it); else the fewest whose fill is within 85% of the fullest any count reaches (FlashAttention's
// num_splits_heuristic, on the model's slots): each split more costs its merge.
std::int64_t AttentionOp::decode_splits(const Shape& s, std::int64_t wm, unsigned threads, unsigned smem,
                                        const Target& target) {
  const std::int64_t blocks = decode_tiles(s, wm) * s.kv_heads;
  const SmLimits limits = sm_limits(target);
  const std::uint64_t slots =
      std::uint64_t(limits.sm_count) * std::uint64_t(std::max(1, occupancy(limits, threads, 0, smem, 1, 1).blocks_per_sm));
  const std::int64_t most = std::clamp<std::int64_t>(s.max_blocks * s.page / 512, 1, 16);
  if (std::uint64_t(blocks * most) <= slots) return most;
  auto fill = [&](std::int64_t splits) { return wave_fill(std::uint64_t(blocks * splits), slots); };
  double best = 0;
  for (std::int64_t n = 1; n <= most; ++n) best = std::max(best, fill(n));
  std::int64_t splits = 1;
  while (fill(splits) < 0.85 * best) ++splits;
  return splits;
}

// Keys per split: the longest possible context over the splits, in whole key tiles.
std::int64_t AttentionOp::chunk(const Params& p, const Shape& s) {
  const std::int64_t splits = p.get("splits"), bn = p.get("bn");
  if (splits == 1) return INT32_MAX / 2;
  const std::int64_t keys = (s.max_blocks * s.page + splits - 1) / splits;
  return (keys + bn - 1) / bn * bn;
}

// The path: the `path` scalar's (sdpa's and paged_prefill_gqa's; 90 only on an sm_90a target), else the sm_90a
// path wherever the target takes it.
int AttentionOp::prefill_path(ScalarList scalars, const Target& target) const {
  const int asked = kind_ == Kind::paged_decode ? 0 : checks::kernel_path(*this, scalars);
  if (asked == 90 && !sm90_path(target))
    throw InvalidArgumentError(
        fmt::format("{}: path = 90 (TMA + wgmma) needs an sm_90a target; this one is {}", name(), target.sm_name()));
  return asked == 80 || !sm90_path(target) ? 80 : 90;
}

// The sm_90a prefill (attention_sm90.cuh): TMA and wgmma for every head_dim (kHeadDims; 96 as 128) and every
// paged cache (its keys gathered where TMA boxes do not tile them).
bool AttentionOp::sm90_path(const Target& target) const {
  return kind_ != Kind::paged_decode && target.arch_specific && target.sm >= 90;
}

}  // namespace attention

const OpDef& sdpa_op() {
  static const AttentionOp op(kSdpa, Kind::sdpa);
  return op;
}
const OpDef& paged_prefill_gqa_op() {
  static const AttentionOp op(kPagedPrefill, Kind::paged_prefill);
  return op;
}
const OpDef& paged_decode_gqa_op() {
  static const AttentionOp op(kPagedDecode, Kind::paged_decode);
  return op;
}

}  // namespace mojo
