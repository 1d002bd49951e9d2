// sdpa_backward against the float64 reference, on the inputs sdpa's check makes (lengths, q, k, v, sinks) and
// the forward's out and lse for them.
#include <algorithm>
#include <cmath>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

// The backward's tensors: grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, sinks,
// grad_sinks, grad_lse; sdpa's: out, q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, lse. Where each of sdpa's sits here.
constexpr std::size_t kForwardSlot[] = {7, 4, 5, 6, 9, 10, 11, 8};

class SdpaBackwardCheck final : public OpCheck {
 public:
  SdpaBackwardCheck() : OpCheck(sdpa_backward_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec &q = specs[4], &k = specs[5];
    const std::int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2), kv_tokens = k.dim(0);
    auto has = [&](std::size_t i) { return specs[i].rank() != 0; };
    auto floats = [&](std::size_t i) { return host_data::floats(specs[i], d[i]); };
    const std::vector<std::int64_t> cu_q =
        has(9) ? host_data::indices(specs[9], d[9]) : std::vector<std::int64_t>{0, tokens};
    const std::vector<std::int64_t> cu_k = has(10)  ? host_data::indices(specs[10], d[10])
                                           : has(9) ? cu_q
                                                    : std::vector<std::int64_t>{0, kv_tokens};
    std::vector<reference::AttentionSequence> seqs;
    for (std::size_t b = 0; b + 1 < cu_q.size(); ++b) {
      reference::AttentionSequence s{cu_q[b], cu_q[b + 1] - cu_q[b], {}};
      for (std::int64_t j = cu_k[b]; j < cu_k[b + 1]; ++j) s.key_rows.push_back(j);
      seqs.push_back(std::move(s));
    }
    const double scale = scalar(scalars, "scale");
    const reference::AttentionShape shape{tokens,
                                          heads,
                                          k.dim(1),
                                          head_dim,
                                          scale != 0 ? scale : 1.0 / std::sqrt(double(head_dim)),
                                          scalar(scalars, "softcap"),
                                          scalar(scalars, "causal") != 0,
                                          std::int64_t(std::max(scalar(scalars, "window"), -1.0))};
    const std::vector<float> sinks = has(11) ? floats(11) : std::vector<float>();
    std::vector<float> grad_q(std::size_t(q.numel())), grad_k(std::size_t(k.numel())), grad_v(grad_k.size());
    std::vector<float> grad_sinks(static_cast<std::size_t>(heads));
    const std::vector<float> grad_lse = has(13) ? floats(13) : std::vector<float>();
    reference::attention_backward(
        shape, seqs, floats(4).data(), floats(5).data(), floats(6).data(), sinks.empty() ? nullptr : sinks.data(),
        floats(3).data(), grad_lse.empty() ? nullptr : grad_lse.data(), floats(7).data(), floats(8).data(),
        grad_q.data(), grad_k.data(), grad_v.data(), has(12) ? grad_sinks.data() : nullptr, kv_tokens);
    d[0] = reference::encode(specs[0].dtype(), grad_q);
    d[1] = reference::encode(specs[1].dtype(), grad_k);
    d[2] = reference::encode(specs[2].dtype(), grad_v);
    if (has(12)) d[12] = reference::encode(DType::f32, grad_sinks);
  }

  // sdpa's inputs as its check makes them (the same lengths, q, k, v and sinks for a seed), and its out and lse
  // for them; grad_out random.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    const auto at = std::find(std::begin(kForwardSlot), std::end(kForwardSlot), i);
    if (at == std::end(kForwardSlot)) return OpCheck::random_data(i, specs, scalars, seed);
    const std::vector<TensorSpec> fwd = forward_specs(specs);
    const std::size_t slot = std::size_t(at - std::begin(kForwardSlot));
    const OpCheck& sdpa = sdpa_check();
    if (slot != 0 && slot != 7) return sdpa.random_data(slot, fwd, scalars, seed);
    std::vector<std::vector<std::uint8_t>> data(fwd.size());
    for (std::size_t j = 1; j < 7; ++j)
      if (fwd[j].rank() != 0) data[j] = sdpa.random_data(j, fwd, scalars, seed);
    data[0].resize(fwd[0].nbytes());
    data[7].resize(fwd[7].nbytes());
    sdpa.reference(fwd, data, scalars);  // the forward at the same scalars (sdpa's names): out and lse
    return data[slot];
  }

  // Products of products, each rounded: dS and P in the storage type before their products (as in
  // FlashAttention), twice sdpa's tolerance.
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override {
    if (out == DType::f32) return {2e-3, 2e-4};
    return out == DType::bf16 ? Tolerance{4e-2, 2e-2} : Tolerance{8e-3, 4e-3};
  }

 private:
  static std::vector<TensorSpec> forward_specs(std::span<const TensorSpec> specs) {
    std::vector<TensorSpec> f;
    for (std::size_t i : kForwardSlot) f.push_back(specs[i]);
    return f;
  }
};

}  // namespace

const OpCheck& sdpa_backward_check() {
  static const SdpaBackwardCheck check;
  return check;
}

}  // namespace mojo
