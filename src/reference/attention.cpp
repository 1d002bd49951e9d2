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

void attention_backward(const AttentionShape& shape, const std::vector<AttentionSequence>& sequences, const float* q,
                        const float* k, const float* v, const float* sinks, const float* grad_out,
                        const float* grad_lse, const float* out, const float* lse, float* grad_q, float* grad_k,
                        float* grad_v, float* grad_sinks, std::int64_t kv_rows) {
  const std::int64_t H = shape.heads, D = shape.head_dim, group = shape.heads / shape.kv_heads;
  std::vector<double> gq(std::size_t(shape.tokens * H * D)), gk(std::size_t(kv_rows * shape.kv_heads * D)),
      gv(gk.size()), gs(static_cast<std::size_t>(H));
  for (const AttentionSequence& seq : sequences) {
    const std::int64_t kv_len = std::int64_t(seq.key_rows.size());
    for (std::int64_t t = 0; t < seq.q_count; ++t) {
      const std::int64_t token = seq.q_start + t, position = kv_len - seq.q_count + t;
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t kv_head = h / group, row = (token * H + h) * D;
        const double row_lse = lse[h * shape.tokens + token];
        double dot = 0;  // D = rowsum(grad_out * out) - grad_lse: d lse / d x = p joins dS as -D does
        for (std::int64_t d = 0; d < D; ++d) dot += double(grad_out[row + d]) * double(out[row + d]);
        if (grad_lse) dot -= grad_lse[h * shape.tokens + token];
        if (sinks) gs[std::size_t(h)] -= std::exp(double(sinks[h]) - row_lse) * dot;
        for (std::int64_t j = 0; j < kv_len; ++j) {
          if ((shape.causal && j > position) || (shape.window >= 0 && j < position - shape.window)) continue;
          const std::int64_t key = (seq.key_rows[std::size_t(j)] * shape.kv_heads + kv_head) * D;
          double s = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            s += double(q[row + d]) * double(k[key + d]);
            dp += double(grad_out[row + d]) * double(v[key + d]);
          }
          double x = shape.scale * s, slope = 1;
          if (shape.softcap > 0) {
            x = shape.softcap * std::tanh(x / shape.softcap);
            slope = 1 - (x / shape.softcap) * (x / shape.softcap);
          }
          const double p = std::isinf(row_lse) && row_lse < 0 ? 0.0 : std::exp(x - row_lse);
          const double ds = p * (dp - dot) * slope * shape.scale;
          for (std::int64_t d = 0; d < D; ++d) {
            gv[std::size_t(key + d)] += p * double(grad_out[row + d]);
            gk[std::size_t(key + d)] += ds * double(q[row + d]);
            gq[std::size_t(row + d)] += ds * double(k[key + d]);
          }
        }
      }
    }
  }
  std::copy(gq.begin(), gq.end(), grad_q);
  std::copy(gk.begin(), gk.end(), grad_k);
  std::copy(gv.begin(), gv.end(), grad_v);
  if (grad_sinks) std::copy(gs.begin(), gs.end(), grad_sinks);
}

}  // namespace mojo::reference
