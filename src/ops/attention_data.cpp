// The attention ops on the host: their tensors from the command line's shapes,
// and the debug checks of the lengths and tables a launch reads
// (ops/attention.hpp). Their references and random inputs: src/check/attention.cpp.
#include <fmt/format.h>

#include "mojo/error.hpp"
#include "ops/attention.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"

namespace mojo::attention {

// Debug checks: the lengths agree with each other and the tensors, block table entries are pages.
void AttentionOp::check_data(TensorList t, ScalarList, StreamHandle stream) const {
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
          fmt::format("{}: context_lens[{}] = {}; expected {} (its new tokens) to {} (max_blocks x block_size)", name(),
                      b, len, q_counts[std::size_t(b)], s.max_blocks * s.page));
    for (std::int64_t j = 0; j < (len + s.page - 1) / s.page; ++j) {
      const std::int64_t page = table[std::size_t(b * s.max_blocks + j)];
      if (page < 0 || page >= s.kv_tokens)
        throw InvalidArgumentError(fmt::format("{}: block_tables[{}, {}] = {} is not a block of the cache [0, {})",
                                               name(), b, j, page, s.kv_tokens));
    }
  }
}

std::vector<TensorSpec> AttentionOp::specs_from_shapes(DType dtype, const ShapeMap& shapes) const {
  const auto& q = shapes::required(name(), shapes, "q", example_shapes());
  std::vector<TensorSpec> specs{TensorSpec(dtype, shapes::value_or(shapes, "out", q)), TensorSpec(dtype, q)};
  if (kind_ == Kind::sdpa) {
    const auto& k = shapes::required(name(), shapes, "k", example_shapes());
    specs.insert(specs.end(), {TensorSpec(dtype, k), TensorSpec(dtype, shapes::value_or(shapes, "v", k)),
                               shapes::optional(shapes, "cu_seqlens_q", DType::i32),
                               shapes::optional(shapes, "cu_seqlens_k", DType::i32)});
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
  specs.push_back(shapes::optional(shapes, "sinks", DType::f32));
  specs.push_back(shapes::optional(shapes, "lse", DType::f32));
  return specs;
}

// cu_seqlens values read back: starts at 0, never decreases, ends at `total`; the lengths.
std::vector<std::int64_t> AttentionOp::lengths(std::string_view arg, const Tensor& cu, std::int64_t total,
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

}  // namespace mojo::attention
