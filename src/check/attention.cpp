// sdpa, paged_prefill_gqa and paged_decode_gqa against the float64 reference, on random inputs with
// consistent lengths and block tables.
#include "ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

using attention::Kind;

class AttentionCheck final : public OpCheck {
 public:
  AttentionCheck(const OpDef& op, Kind kind) : OpCheck(op), kind_(kind), slots_(attention::slots_of(kind)) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override;

  // Consistent lengths from one seed: query lengths splitting the tokens (with three sequences or more, the
  // second is empty), context lengths at least those (chunked prefill: cached tokens before the new ones), and
  // block tables of distinct pages out of order. A paged cache holds NaN in every slot no context reaches (the
  // rest of a sequence's last block, the blocks past its length, the blocks no table names), as memory that an
  // engine allocated and never wrote may: a kernel that lets one into a sum (even times a probability of 0)
  // writes NaN.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override;

  // P is rounded to the storage type before P V (as in FlashAttention); lse is exact but for exp2/log2's
  // approximations.
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override {
    if (out == DType::f32) return {1e-3, 1e-4};
    return out == DType::bf16 ? Tolerance{2e-2, 1e-2} : Tolerance{4e-3, 2e-3};
  }

 private:
  struct RandomLayout {
    std::vector<std::int64_t> cu_q, cu_k, block_tables, context_lens;
  };
  RandomLayout random_layout(std::span<const TensorSpec> specs, std::uint32_t seed) const;

  Kind kind_;
  attention::Slots slots_;
};

std::vector<std::uint8_t> AttentionCheck::random_data(std::size_t i, std::span<const TensorSpec> specs,
                                                      ScalarList scalars, std::uint32_t seed) const {
  const int slot = int(i);
  const bool index =
      slot == slots_.cu_q || slot == slots_.cu_k || slot == slots_.block_tables || slot == slots_.context_lens;
  const bool cache = kind_ != Kind::sdpa && (i == 2 || i == 3);
  if (!index && !cache) return OpCheck::random_data(i, specs, scalars, seed);
  const RandomLayout layout = random_layout(specs, seed);
  if (cache) {
    const TensorSpec& c = specs[i];
    std::vector<float> values = host_data::floats(c, OpCheck::random_data(i, specs, scalars, seed));
    const std::int64_t page = c.dim(1), row = c.dim(2) * c.dim(3);  // a slot's elements: kv_heads x head_dim
    const std::int64_t max_blocks = specs[std::size_t(slots_.block_tables)].dim(1);
    std::vector<bool> read(std::size_t(c.dim(0) * page));
    for (std::size_t b = 0; b < layout.context_lens.size(); ++b)
      for (std::int64_t j = 0; j < layout.context_lens[b]; ++j)
        read[std::size_t(layout.block_tables[b * std::size_t(max_blocks) + std::size_t(j / page)] * page + j % page)] =
            true;
    for (std::size_t slot = 0; slot < read.size(); ++slot)
      if (!read[slot])
        std::fill_n(values.begin() + std::ptrdiff_t(slot) * row, row, std::numeric_limits<float>::quiet_NaN());
    return reference::encode(c.dtype(), values);
  }
  const std::vector<std::int64_t>& values = slot == slots_.cu_q           ? layout.cu_q
                                            : slot == slots_.cu_k         ? layout.cu_k
                                            : slot == slots_.block_tables ? layout.block_tables
                                                                          : layout.context_lens;
  return host_data::index_bytes(DType::i32, values);
}

void AttentionCheck::reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                               ScalarList scalars) const {
  const TensorSpec& q = specs[1];
  const std::int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2);
  std::vector<reference::AttentionSequence> seqs;
  auto ints = [&](int slot) { return host_data::indices(specs[std::size_t(slot)], d[std::size_t(slot)]); };
  auto has = [&](int slot) { return slot >= 0 && specs[std::size_t(slot)].rank() != 0; };
  std::int64_t kv_heads = specs[2].dim(kind_ == Kind::sdpa ? 1 : 2);
  if (kind_ == Kind::sdpa) {
    const std::vector<std::int64_t> cu_q = has(slots_.cu_q) ? ints(slots_.cu_q) : std::vector<std::int64_t>{0, tokens};
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
  reference::attention(shape, seqs, qf.data(), kf.data(), vf.data(), sinks.empty() ? nullptr : sinks.data(), out.data(),
                       has(slots_.lse) ? lse.data() : nullptr);
  d[0] = reference::encode(specs[0].dtype(), out);
  if (has(slots_.lse)) d[std::size_t(slots_.lse)] = reference::encode(DType::f32, lse);
}

AttentionCheck::RandomLayout AttentionCheck::random_layout(std::span<const TensorSpec> specs,
                                                           std::uint32_t seed) const {
  std::mt19937 rng(seed * 2654435761u + 17);
  RandomLayout r;
  const std::int64_t tokens = specs[1].dim(0);
  auto split = [&](std::int64_t total, std::int64_t parts) {  // cumulative, random cut points (empty parts allowed)
    std::vector<std::int64_t> cuts{0, total};
    for (std::int64_t i = 1; i < parts; ++i) cuts.push_back(total ? std::int64_t(rng() % std::uint64_t(total + 1)) : 0);
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

}  // namespace

const OpCheck& sdpa_check() {
  static const AttentionCheck check(sdpa_op(), Kind::sdpa);
  return check;
}
const OpCheck& paged_prefill_gqa_check() {
  static const AttentionCheck check(paged_prefill_gqa_op(), Kind::paged_prefill);
  return check;
}
const OpCheck& paged_decode_gqa_check() {
  static const AttentionCheck check(paged_decode_gqa_op(), Kind::paged_decode);
  return check;
}

}  // namespace mojo
