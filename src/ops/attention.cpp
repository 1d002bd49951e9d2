// Attention: sdpa (packed keys, one sequence or varlen), paged_prefill_gqa and
// paged_decode_gqa (keys from store_kv_cache's paged cache), one template
// (kernel_templates/attention.cu, params there). Paged decode splits the keys
// over blocks when the batch alone would leave the GPU idle: a plan of the
// partial pass and a merge, through a workspace.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/host_data.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

constexpr DType kTypes[] = {DType::f16, DType::bf16};
constexpr std::int64_t kHeadDims[] = {64, 96, 128, 256};

constexpr ScalarArgInfo kScalars[] = {
    {"scale", 0.0, "logit scale; 0: 1 / sqrt(head_dim)"},
    {"window", -1.0, "sliding window: a query sees the keys at most this many positions before it; < 0: all"},
    {"softcap", 0.0, "logit soft-cap: cap * tanh(logit / cap); 0: none"},
    {"causal", 1.0, "1: a query sees no later key (positions aligned at the sequences' ends); 0: every key"},
};

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
    .scalars = kScalars,
    .dtypes = kTypes,
    .template_file = "attention.cu",
    .example_shapes = "q=4096x32x128 k=4096x8x128",
};
constexpr OpInfo kPagedPrefill{
    .name = "paged_prefill_gqa",
    .summary = "causal attention of new tokens over a paged KV cache (chunked prefill): GQA, window, soft-cap, sinks",
    .tensors = kPrefillTensors,
    .scalars = {kScalars, 3},
    .dtypes = kTypes,
    .template_file = "attention.cu",
    .example_shapes = "q=1024x32x128 k_cache=1024x16x8x128 cu_seqlens_q=5 block_tables=4x64",
};
constexpr OpInfo kPagedDecode{
    .name = "paged_decode_gqa",
    .summary = "decode attention over a paged KV cache, 1-16 query tokens per sequence, split over the keys",
    .tensors = kDecodeTensors,
    .scalars = {kScalars, 3},
    .dtypes = kTypes,
    .template_file = "attention.cu",
    .example_shapes = "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512",
};

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

// D rounded up to the tile width the kernel uses (attention.cu's pow2_at_least).
std::int64_t padded(std::int64_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

class AttentionOp final : public OpDef {
 public:
  AttentionOp(const OpInfo& info, Kind kind) : OpDef(info), kind_(kind), slots_(slots_of(kind)) {}

  std::vector<Params> plan(const Params& p) const override {
    if (p.get("splits") == 1) return {p};
    Params partial = p, merge = p;
    partial.add("step", 0);
    merge.add("step", 1);
    return {partial, merge};
  }
  std::string entry_macro(const Params& p) const override {
    if (is_merge(p)) return "MOJO_ATTENTION_MERGE";
    return p.get("wgmma") ? "MOJO_ATTENTION_SM90" : OpDef::entry_macro(p);
  }
  std::size_t workspace_bytes(const Params& p, TensorList t) const override {
    const std::int64_t splits = p.get("splits"), rows = t[1].spec.dim(0) * t[1].spec.dim(1);
    return splits > 1 ? std::size_t(splits * rows * (p.get("head_dim") + 1)) * sizeof(float) : 0;
  }

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const Shape s = shape(t);
    const double window = scalar(scalars, "window"), softcap = scalar(scalars, "softcap");
    const double causal = kind_ == Kind::sdpa ? scalar(scalars, "causal") : 1.0;
    if (causal != 0 && causal != 1)
      throw InvalidArgumentError(fmt::format("{}: causal is {}; expected 0 or 1", name(), causal));
    if (!(softcap >= 0) || !std::isfinite(softcap))
      throw InvalidArgumentError(fmt::format("{}: softcap is {}; expected >= 0 (0: none)", name(), softcap));
    if (!std::isfinite(scalar(scalars, "scale")))
      throw InvalidArgumentError(fmt::format("{}: scale is not finite", name()));
    if (window >= double(INT32_MAX))
      throw InvalidArgumentError(fmt::format("{}: window {} does not fit an int", name(), window));

    Params p;
    p.add_dtype("dtype", s.dtype);
    p.add("head_dim", s.head_dim);
    p.add("group", s.heads / s.kv_heads);
    const std::int64_t dp = padded(s.head_dim);
    std::int64_t wm = 4, wn = 1, bn = dp <= 128 ? 64 : 32, splits = 1, stages = 2;
    const bool wgmma = sm90_path(s, target);
    if (wgmma) {
      wm = 8;  // two consumer warpgroups of 64 rows
      bn = 128;
    } else if (kind_ == Kind::paged_decode) {
      // Few query rows per sequence (q_len x group): one to four warps along them, the rest split the keys;
      // key tiles small enough that the rings stay within 64 KB.
      const std::int64_t rows = s.q_len * (s.heads / s.kv_heads);
      wm = std::min<std::int64_t>(4, (rows + 15) / 16);
      wn = 4 / wm;
      bn = 32;
      while (wn * 2 * 2 * bn * dp * 2 > 64 * 1024) bn > 16 ? bn /= 2 : wn /= 2;
      splits = decode_splits(s, wm);
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
    p.add("paged", kind_ == Kind::sdpa ? 0 : 1);
    p.add("page", s.page);
    p.add("splits", splits);
    p.add("wgmma", wgmma ? 1 : 0);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Shape s = shape(t);
    LaunchGeometry g;
    if (is_merge(p)) {  // the merge: a warp per (token, head)
      g.grid.x = unsigned((s.tokens * s.heads + 3) / 4);
      g.block.x = 128;
      return g;
    }
    const std::int64_t bm = 16 * p.get("wm"), group = p.get("group");
    std::int64_t tiles = (s.tokens * group + bm - 1) / bm;
    if (kind_ == Kind::paged_decode)
      tiles = s.batch * ((s.q_len * group + bm - 1) / bm);
    else if (s.batch > 1 || present(t, slots_.cu_q))
      tiles += s.batch;  // each sequence may end in a part tile
    g.grid = {unsigned(tiles), unsigned(s.kv_heads), unsigned(p.get("splits"))};
    g.block.x = p.get("wgmma") ? 384 : unsigned(32 * p.get("wm") * p.get("wn"));
    g.dynamic_smem = max_dynamic_smem(p);
    return g;
  }

  // attention.cu's smem_bytes(): the Q tile and the K/V rings, or after the loop the f32 O tile and row stats.
  unsigned max_dynamic_smem(const Params& p) const override {
    if (is_merge(p)) return 0;
    if (p.get("wgmma")) {  // attention_sm90.cuh: alignment slack, Q, the K/V ring, P, barriers
      const std::int64_t d = p.get("head_dim"), bn = p.get("bn"), stages = p.get("stages");
      return unsigned(1024 + 128 * d * 2 + stages * 2 * bn * d * 2 + 2 * 64 * bn * 2 + 16 * stages);
    }
    const std::int64_t bm = 16 * p.get("wm"), dp = padded(p.get("head_dim")), wn = p.get("wn");
    const std::int64_t loop = bm * dp * 2 + wn * p.get("stages") * 2 * p.get("bn") * dp * 2;
    const std::int64_t merge = bm * dp * 4 + 4 * wn * bm * 4;
    return unsigned(std::max(loop, merge));
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, DevicePtr workspace,
                 KernelArgs& args) const override {
    const Shape s = shape(t);
    const auto infos = tensor_args();
    for (int i = 0; i < 4; ++i) checks::expect_pointer(name(), infos[std::size_t(i)].name, t[std::size_t(i)].data, 16);
    auto optional = [&](int slot, unsigned align) {
      if (slot < 0 || !present(t, slot)) return DevicePtr(0);
      checks::expect_pointer(name(), infos[std::size_t(slot)].name, t[std::size_t(slot)].data, align);
      return t[std::size_t(slot)].data;
    };
    for (int i = 0; i < 4; ++i) args.push(t[std::size_t(i)].data);
    const DevicePtr cu_q = optional(slots_.cu_q, 4);
    const DevicePtr kv_info = kind_ == Kind::sdpa ? (present(t, slots_.cu_k) ? optional(slots_.cu_k, 4) : cu_q)
                                                  : optional(slots_.context_lens, 4);
    args.push(cu_q);
    args.push(kv_info);
    args.push(optional(slots_.block_tables, 4));
    args.push(optional(slots_.sinks, 4));
    args.push(optional(slots_.lse, 4));
    if (p.get("splits") > 1 && workspace == 0) throw Error("internal error: a split attention plan without workspace");
    args.push(workspace);
    args.push(static_cast<long long>(s.q_stride));
    args.push(static_cast<long long>(s.k_stride));
    args.push(static_cast<long long>(s.v_stride));
    args.push(int(s.batch));
    args.push(int(s.tokens));
    args.push(int(s.kv_tokens));
    args.push(int(s.heads));
    args.push(int(s.kv_heads));
    args.push(int(s.max_blocks));
    args.push(int(kind_ == Kind::paged_decode ? s.q_len : 0));
    args.push(int(chunk(p, s)));
    const double scale = scalar(scalars, "scale");
    args.push(float(scale != 0 ? scale : 1.0 / std::sqrt(double(s.head_dim))));
    args.push(float(scalar(scalars, "softcap")));
    args.push(int(std::max(scalar(scalars, "window"), -1.0)));
    if (p.get("wgmma")) {
      // K and V as (head_dim, rows, kv_heads) for TMA: packed tokens in boxes of a key tile, or the cache's
      // slots in boxes of one block.
      const std::int64_t rows = kind_ == Kind::sdpa ? s.kv_tokens : s.kv_tokens * s.page;
      const std::int64_t row_stride = kind_ == Kind::sdpa ? s.k_stride : s.kv_heads * s.head_dim;
      const unsigned box = unsigned(kind_ == Kind::sdpa ? p.get("bn") : s.page);
      args.push(tile_tensor_map(t[2].data, s.dtype, s.head_dim, rows, s.kv_heads, row_stride, s.head_dim, 64, box));
      const std::int64_t v_stride = kind_ == Kind::sdpa ? s.v_stride : row_stride;
      args.push(tile_tensor_map(t[3].data, s.dtype, s.head_dim, rows, s.kv_heads, v_stride, s.head_dim, 64, box));
    }
  }

  // Debug checks: the lengths agree with each other and the tensors, block table entries are pages.
  void check_data(TensorList t, StreamHandle stream) const override {
    const Shape s = shape(t);
    std::vector<std::int64_t> q_counts(std::size_t(s.batch), s.q_len);
    if (present(t, slots_.cu_q)) q_counts = lengths("cu_seqlens_q", t[std::size_t(slots_.cu_q)], s.tokens, stream);
    if (kind_ == Kind::sdpa) {
      if (present(t, slots_.cu_k)) lengths("cu_seqlens_k", t[std::size_t(slots_.cu_k)], s.kv_tokens, stream);
      return;
    }
    const std::vector<std::int64_t> context = indices::read(t[std::size_t(slots_.context_lens)], stream);
    const std::vector<std::int64_t> table = indices::read(t[std::size_t(slots_.block_tables)], stream);
    for (std::int64_t b = 0; b < s.batch; ++b) {
      const std::int64_t len = context[std::size_t(b)];
      if (len < q_counts[std::size_t(b)] || len > s.max_blocks * s.page)
        throw InvalidArgumentError(
            fmt::format("{}: context_lens[{}] = {}; expected {} (its new tokens) to {} (max_blocks x block_size)",
                        name(), b, len, q_counts[std::size_t(b)], s.max_blocks * s.page));
      for (std::int64_t j = 0; j < (len + s.page - 1) / s.page; ++j) {
        const std::int64_t page = table[std::size_t(b * s.max_blocks + j)];
        if (page < 0 || page >= s.kv_tokens)
          throw InvalidArgumentError(fmt::format("{}: block_tables[{}, {}] = {} is not a block of the cache [0, {})",
                                                 name(), b, j, page, s.kv_tokens));
      }
    }
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& q = shapes::required(name(), shapes, "q", example_shapes());
    auto optional = [&](std::string_view n, DType d) {
      auto it = shapes.find(n);
      return it == shapes.end() ? TensorSpec() : TensorSpec(d, it->second);
    };
    std::vector<TensorSpec> specs{TensorSpec(dtype, shapes::value_or(shapes, "out", q)), TensorSpec(dtype, q)};
    if (kind_ == Kind::sdpa) {
      const auto& k = shapes::required(name(), shapes, "k", example_shapes());
      specs.insert(specs.end(), {TensorSpec(dtype, k), TensorSpec(dtype, shapes::value_or(shapes, "v", k)),
                                 optional("cu_seqlens_q", DType::i32), optional("cu_seqlens_k", DType::i32)});
    } else {
      const auto& cache = shapes::required(name(), shapes, "k_cache", example_shapes());
      const auto& table = shapes::required(name(), shapes, "block_tables", example_shapes());
      specs.insert(specs.end(),
                   {TensorSpec(dtype, cache), TensorSpec(dtype, shapes::value_or(shapes, "v_cache", cache))});
      if (kind_ == Kind::paged_prefill)
        specs.push_back(TensorSpec(DType::i32, shapes::required(name(), shapes, "cu_seqlens_q", example_shapes())));
      specs.push_back(TensorSpec(DType::i32, table));
      specs.push_back(TensorSpec(DType::i32, shapes::value_or(shapes, "context_lens", {table.empty() ? 0 : table[0]})));
    }
    specs.push_back(optional("sinks", DType::f32));
    specs.push_back(optional("lse", DType::f32));
    return specs;
  }

  // Consistent lengths from one seed: query lengths splitting the tokens (with three sequences or more, the
  // second is empty), context lengths at least
  // those (chunked prefill: cached tokens before the new ones), and block tables of distinct pages out of order.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs,
                                        std::uint32_t seed) const override {
    const int slot = int(i);
    const bool index =
        slot == slots_.cu_q || slot == slots_.cu_k || slot == slots_.block_tables || slot == slots_.context_lens;
    if (!index) return OpDef::random_data(i, specs, seed);
    const RandomLayout layout = random_layout(specs, seed);
    const std::vector<std::int64_t>& values = slot == slots_.cu_q           ? layout.cu_q
                                              : slot == slots_.cu_k         ? layout.cu_k
                                              : slot == slots_.block_tables ? layout.block_tables
                                                                            : layout.context_lens;
    return host_data::index_bytes(DType::i32, values);
  }

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec& q = specs[1];
    const std::int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2);
    std::vector<reference::AttentionSequence> seqs;
    auto ints = [&](int slot) { return host_data::indices(specs[std::size_t(slot)], d[std::size_t(slot)]); };
    auto has = [&](int slot) { return slot >= 0 && specs[std::size_t(slot)].rank() != 0; };
    std::int64_t kv_heads = specs[2].dim(kind_ == Kind::sdpa ? 1 : 2);
    if (kind_ == Kind::sdpa) {
      const std::vector<std::int64_t> cu_q =
          has(slots_.cu_q) ? ints(slots_.cu_q) : std::vector<std::int64_t>{0, tokens};
      const std::vector<std::int64_t> cu_k = has(slots_.cu_k)   ? ints(slots_.cu_k)
                                             : has(slots_.cu_q) ? cu_q
                                                                : std::vector<std::int64_t>{0, specs[2].dim(0)};
      for (std::size_t b = 0; b + 1 < cu_q.size(); ++b) {
        reference::AttentionSequence s{cu_q[b], cu_q[b + 1] - cu_q[b], {}};
        for (std::int64_t j = cu_k[b]; j < cu_k[b + 1]; ++j) s.key_rows.push_back(j);
        seqs.push_back(std::move(s));
      }
    } else {
      const std::int64_t page = specs[2].dim(1);
      const std::vector<std::int64_t> table = ints(slots_.block_tables), context = ints(slots_.context_lens);
      const std::int64_t batch = specs[std::size_t(slots_.block_tables)].dim(0);
      const std::int64_t max_blocks = specs[std::size_t(slots_.block_tables)].dim(1);
      std::vector<std::int64_t> cu_q;
      if (has(slots_.cu_q)) {
        cu_q = ints(slots_.cu_q);
      } else {
        for (std::int64_t b = 0; b <= batch; ++b) cu_q.push_back(b * (tokens / batch));
      }
      for (std::int64_t b = 0; b < batch; ++b) {
        reference::AttentionSequence s{cu_q[std::size_t(b)], cu_q[std::size_t(b) + 1] - cu_q[std::size_t(b)], {}};
        for (std::int64_t j = 0; j < context[std::size_t(b)]; ++j)
          s.key_rows.push_back(table[std::size_t(b * max_blocks + j / page)] * page + j % page);
        seqs.push_back(std::move(s));
      }
    }
    const double scale = scalar(scalars, "scale");
    const reference::AttentionShape shape{tokens,
                                          heads,
                                          kv_heads,
                                          head_dim,
                                          scale != 0 ? scale : 1.0 / std::sqrt(double(head_dim)),
                                          scalar(scalars, "softcap"),
                                          kind_ == Kind::sdpa ? scalar(scalars, "causal") != 0 : true,
                                          std::int64_t(std::max(scalar(scalars, "window"), -1.0))};
    const std::vector<float> qf = host_data::floats(q, d[1]), kf = host_data::floats(specs[2], d[2]),
                             vf = host_data::floats(specs[3], d[3]);
    const std::vector<float> sinks =
        has(slots_.sinks) ? host_data::floats(specs[std::size_t(slots_.sinks)], d[std::size_t(slots_.sinks)])
                          : std::vector<float>();
    std::vector<float> out(std::size_t(tokens * heads * head_dim)), lse(std::size_t(heads * tokens));
    reference::attention(shape, seqs, qf.data(), kf.data(), vf.data(), sinks.empty() ? nullptr : sinks.data(),
                         out.data(), has(slots_.lse) ? lse.data() : nullptr);
    d[0] = reference::encode(specs[0].dtype(), out);
    if (has(slots_.lse)) d[std::size_t(slots_.lse)] = reference::encode(DType::f32, lse);
  }

  // P is rounded to the storage type before P V (as in FlashAttention); lse is exact but for exp2/log2's
  // approximations.
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override {
    if (out == DType::f32) return {1e-3, 1e-4};
    return out == DType::bf16 ? Tolerance{2e-2, 1e-2} : Tolerance{4e-3, 2e-3};
  }

 private:
  struct Shape {
    DType dtype;
    std::int64_t tokens, heads, head_dim, kv_heads, kv_tokens;  // kv_tokens: the cache's blocks when paged
    std::int64_t q_stride, k_stride, v_stride, batch, page, max_blocks, q_len;  // q_len: decode only
  };

  // The second kernel of a split plan; op-level params (no "step") stand for the first.
  static bool is_merge(const Params& p) { return p.get("splits") > 1 && p.get_or("step", 0) == 1; }

  static bool present(TensorList t, int slot) { return slot >= 0 && t[std::size_t(slot)].spec.rank() != 0; }

  // The op's tensors, validated, as the numbers the kernel takes.
  Shape shape(TensorList t) const {
    const auto infos = tensor_args();
    const TensorSpec &out = t[0].spec, &q = t[1].spec, &k = t[2].spec, &v = t[3].spec;
    checks::expect_dtype_in(name(), "q", q.dtype(), kTypes);
    for (int i : {0, 2, 3})
      checks::expect_same_dtype(name(), infos[std::size_t(i)].name, t[std::size_t(i)].spec, "q", q);
    Shape s{};
    s.dtype = q.dtype();
    s.q_stride = rows::token_stride(name(), "q", q);
    s.tokens = q.dim(0);
    s.heads = q.dim(1);
    s.head_dim = q.dim(2);
    checks::expect_same_shape(name(), "out", out, "q", q);
    checks::expect_contiguous(name(), "out", out);
    if (std::find(std::begin(kHeadDims), std::end(kHeadDims), s.head_dim) == std::end(kHeadDims))
      throw ShapeError(
          fmt::format("{}: head_dim {} is not supported; supported: 64, 96, 128, 256", name(), s.head_dim));
    checks::expect_same_shape(name(), infos[3].name, v, infos[2].name, k);
    if (kind_ == Kind::sdpa) {
      s.k_stride = rows::token_stride(name(), "k", k);
      s.v_stride = rows::token_stride(name(), "v", v);
      s.kv_tokens = k.dim(0);
      s.kv_heads = k.dim(1);
      if (k.dim(2) != s.head_dim)
        throw ShapeError(fmt::format("{}: k is {} but q's head_dim is {}", name(), k.str(), s.head_dim));
    } else {
      if (k.rank() != 4 || k.dim(3) != s.head_dim)
        throw ShapeError(fmt::format("{}: {} is {}; expected [num_blocks, block_size, kv_heads, {}]", name(),
                                     infos[2].name, k.str(), s.head_dim));
      checks::expect_contiguous(name(), infos[2].name, k);
      checks::expect_contiguous(name(), infos[3].name, v);
      s.kv_tokens = k.dim(0);
      s.page = k.dim(1);
      s.kv_heads = k.dim(2);
      if (s.page < 1 || s.page > 1024)
        throw ShapeError(fmt::format("{}: block_size {}; supported: 1 to 1024", name(), s.page));
    }
    if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
      throw ShapeError(fmt::format("{}: kv_heads {} does not divide heads {}", name(), s.kv_heads, s.heads));
    if (s.tokens * s.heads > INT32_MAX || s.kv_tokens > INT32_MAX)
      throw ShapeError(fmt::format("{}: more tokens than the kernel's 32-bit indices take", name()));

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
      if (s.batch < 1 || s.tokens % s.batch != 0 || s.tokens / s.batch > 16)
        throw ShapeError(fmt::format("{}: q has {} tokens for {} sequences; expected batch x q_len, q_len 1 to 16",
                                     name(), s.tokens, s.batch));
      s.q_len = s.tokens / s.batch;
    }
    if (present(t, slots_.sinks)) {
      const TensorSpec& sinks = t[std::size_t(slots_.sinks)].spec;
      if (sinks.dtype() != DType::f32 || sinks.rank() != 1 || sinks.dim(0) != s.heads || !sinks.is_contiguous())
        throw ShapeError(
            fmt::format("{}: sinks is {}; expected f32 [{}] (one per head)", name(), sinks.str(), s.heads));
    }
    if (present(t, slots_.lse)) {
      const TensorSpec& lse = t[std::size_t(slots_.lse)].spec;
      if (lse.dtype() != DType::f32 || lse.rank() != 2 || lse.dim(0) != s.heads || lse.dim(1) != s.tokens ||
          !lse.is_contiguous())
        throw ShapeError(fmt::format("{}: lse is {}; expected f32 [{}, {}] ([heads, tokens]), contiguous", name(),
                                     lse.str(), s.heads, s.tokens));
    }
    // 16-byte rows: every token stride a multiple of 8 elements.
    for (auto [arg, stride] : {std::pair{"q", s.q_stride}, {"k", s.k_stride}, {"v", s.v_stride}})
      if (stride % 8 != 0)
        throw ShapeError(fmt::format("{}: {}'s token stride {} is not a multiple of 8 elements", name(), arg, stride));
    return s;
  }

  void index_vector(std::string_view arg, const TensorSpec& t) const {
    if (t.dtype() != DType::i32 || t.rank() != 1 || !t.is_contiguous())
      throw ShapeError(fmt::format("{}: {} is {}; expected a contiguous i32 vector", name(), arg, t.str()));
  }

  // Decode: split each sequence's keys over enough blocks to fill a GPU (about 4 blocks per SM of a
  // 132-SM part), each split at least 512 keys, at most 16 splits.
  static std::int64_t decode_splits(const Shape& s, std::int64_t wm) {
    const std::int64_t blocks = s.batch * s.kv_heads * ((s.q_len * (s.heads / s.kv_heads) + 16 * wm - 1) / (16 * wm));
    const std::int64_t by_work = (512 + blocks - 1) / std::max<std::int64_t>(blocks, 1);
    const std::int64_t by_keys = std::max<std::int64_t>(1, s.max_blocks * s.page / 512);
    return std::clamp<std::int64_t>(std::min(by_work, by_keys), 1, 16);
  }
  // Keys per split: the longest possible context over the splits, in whole key tiles.
  static std::int64_t chunk(const Params& p, const Shape& s) {
    const std::int64_t splits = p.get("splits"), bn = p.get("bn");
    if (splits == 1) return INT32_MAX / 2;
    const std::int64_t keys = (s.max_blocks * s.page + splits - 1) / splits;
    return (keys + bn - 1) / bn * bn;
  }

  // The sm_90a prefill (attention_sm90.cuh): TMA and wgmma for head_dim 128, K/V tiles of whole cache blocks.
  bool sm90_path(const Shape& s, const Target& target) const {
    if (kind_ == Kind::paged_decode || !target.arch_specific || target.sm < 90 || s.head_dim != 128) return false;
    return kind_ == Kind::sdpa || (s.page >= 8 && s.page <= 128 && 128 % s.page == 0);
  }

  // cu_seqlens values read back: starts at 0, never decreases, ends at `total`; the lengths.
  std::vector<std::int64_t> lengths(std::string_view arg, const Tensor& cu, std::int64_t total,
                                    StreamHandle stream) const {
    const std::vector<std::int64_t> v = indices::read(cu, stream);
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const bool ok = i == 0 ? v[0] == 0 : v[i] >= v[i - 1] && (i + 1 < v.size() || v[i] == total);
      if (!ok)
        throw InvalidArgumentError(
            fmt::format("{}: {}[{}] = {}; cumulative lengths start at 0, never decrease and "
                        "end at {} (the tensor's tokens)",
                        name(), arg, i, v[i], total));
      if (i > 0) out.push_back(v[i] - v[i - 1]);
    }
    return out;
  }

  struct RandomLayout {
    std::vector<std::int64_t> cu_q, cu_k, block_tables, context_lens;
  };
  RandomLayout random_layout(std::span<const TensorSpec> specs, std::uint32_t seed) const {
    std::mt19937 rng(seed * 2654435761u + 17);
    RandomLayout r;
    const std::int64_t tokens = specs[1].dim(0);
    auto split = [&](std::int64_t total, std::int64_t parts) {  // cumulative, random cut points (empty parts allowed)
      std::vector<std::int64_t> cuts{0, total};
      for (std::int64_t i = 1; i < parts; ++i)
        cuts.push_back(total ? std::int64_t(rng() % std::uint64_t(total + 1)) : 0);
      std::sort(cuts.begin(), cuts.end());
      if (parts >= 3) cuts[2] = cuts[1];  // the second sequence is empty: kernels must skip it cleanly
      return cuts;
    };
    std::int64_t batch = 1;
    if (slots_.cu_q >= 0 && specs[std::size_t(slots_.cu_q)].rank() != 0) {
      batch = specs[std::size_t(slots_.cu_q)].dim(0) - 1;
      r.cu_q = split(tokens, batch);
    }
    if (kind_ == Kind::sdpa) {
      if (slots_.cu_k >= 0 && specs[std::size_t(slots_.cu_k)].rank() != 0) r.cu_k = split(specs[2].dim(0), batch);
      return r;
    }
    const TensorSpec& table = specs[std::size_t(slots_.block_tables)];
    batch = table.dim(0);
    const std::int64_t max_blocks = table.dim(1), page = specs[2].dim(1), pages = specs[2].dim(0);
    const std::int64_t q_len = kind_ == Kind::paged_decode ? tokens / std::max<std::int64_t>(batch, 1) : 0;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t new_tokens = r.cu_q.empty() ? q_len : r.cu_q[std::size_t(b) + 1] - r.cu_q[std::size_t(b)];
      const std::int64_t room = max_blocks * page;
      const std::int64_t lo = std::min(new_tokens, room);
      r.context_lens.push_back(lo + std::int64_t(rng() % std::uint64_t(room - lo + 1)));
    }
    r.block_tables = host_data::random_indices(batch * max_blocks, pages, seed + 1, true);
    return r;
  }

  Kind kind_;
  Slots slots_;
};

}  // namespace

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
