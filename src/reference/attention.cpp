// attention: a float64 softmax(scale * q k^T) v per query, with the masks,
// soft-cap and sinks of kernel_templates/attention.cu.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/reference.hpp"

namespace mojo::reference {

void attention(const AttentionShape& shape, const std::vector<AttentionSequence>& sequences, const float* q,
               const float* k, const float* v, const float* sinks, float* out, float* lse) {
  const std::int64_t H = shape.heads, D = shape.head_dim, group = shape.heads / shape.kv_heads;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> logits, acc(static_cast<std::size_t>(D));
  std::vector<std::int64_t> visible;
  for (const AttentionSequence& seq : sequences) {
    const std::int64_t kv_len = std::int64_t(seq.key_rows.size());
    for (std::int64_t t = 0; t < seq.q_count; ++t) {
      const std::int64_t token = seq.q_start + t, position = kv_len - seq.q_count + t;
      visible.clear();
      for (std::int64_t j = 0; j < kv_len; ++j)
        if ((!shape.causal || j <= position) && (shape.window < 0 || j >= position - shape.window))
          visible.push_back(j);
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t kv_head = h / group;
        const float* qr = q + (token * H + h) * D;
        logits.assign(visible.size(), 0.0);
        double top = sinks ? double(sinks[h]) : -inf;
        for (std::size_t i = 0; i < visible.size(); ++i) {
          const float* kr = k + (seq.key_rows[std::size_t(visible[i])] * shape.kv_heads + kv_head) * D;
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += double(qr[d]) * double(kr[d]);
          double x = shape.scale * dot;
          if (shape.softcap > 0) x = shape.softcap * std::tanh(x / shape.softcap);
          logits[i] = x;
          top = std::max(top, x);
        }
        double denominator = sinks ? std::exp(double(sinks[h]) - top) : 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::size_t i = 0; i < visible.size(); ++i) {
          const double p = std::exp(logits[i] - top);
          denominator += p;
          const float* vr = v + (seq.key_rows[std::size_t(visible[i])] * shape.kv_heads + kv_head) * D;
          for (std::int64_t d = 0; d < D; ++d) acc[std::size_t(d)] += p * double(vr[d]);
        }
        float* o = out + (token * H + h) * D;
        for (std::int64_t d = 0; d < D; ++d) o[d] = denominator > 0 ? float(acc[std::size_t(d)] / denominator) : 0.f;
        if (lse) lse[h * shape.tokens + token] = denominator > 0 ? float(top + std::log(denominator)) : float(-inf);
      }
    }
  }
}

}  // namespace mojo::reference
