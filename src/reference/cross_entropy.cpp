// The fused linear cross-entropy's reference: the whole [tokens, vocab]
// logits in double, the loss and its gradients by their formulas.
#include <cmath>

#include "reference/reference.hpp"

namespace mojo::reference {
namespace {

// Row i's logits (soft-capped), lse, and whether it counts.
struct Rows {
  std::vector<double> logits, lse;
  std::vector<bool> counted;
};
Rows rows_of(const CrossEntropy& ce, const std::vector<float>& hidden, const std::vector<float>& weight,
             const std::vector<std::int64_t>& labels) {
  Rows r;
  r.logits.resize(std::size_t(ce.tokens * ce.vocab));
  r.lse.resize(std::size_t(ce.tokens));
  r.counted.resize(std::size_t(ce.tokens));
  for (std::int64_t i = 0; i < ce.tokens; ++i) {
    double max = -INFINITY;
    for (std::int64_t j = 0; j < ce.vocab; ++j) {
      double l = 0;
      for (std::int64_t k = 0; k < ce.hidden; ++k)
        l += double(hidden[std::size_t(i * ce.hidden + k)]) * weight[std::size_t(j * ce.hidden + k)];
      if (ce.softcap > 0) l = ce.softcap * std::tanh(l / ce.softcap);
      r.logits[std::size_t(i * ce.vocab + j)] = l;
      max = std::max(max, l);
    }
    double sum = 0;
    for (std::int64_t j = 0; j < ce.vocab; ++j) sum += std::exp(r.logits[std::size_t(i * ce.vocab + j)] - max);
    r.lse[std::size_t(i)] = max + std::log(sum);
    r.counted[std::size_t(i)] = labels[std::size_t(i)] != ce.ignore_index;
  }
  return r;
}

}  // namespace

void linear_cross_entropy(const CrossEntropy& ce, const std::vector<float>& hidden, const std::vector<float>& weight,
                          const std::vector<std::int64_t>& labels, std::vector<float>& loss, std::vector<float>& lse) {
  const Rows r = rows_of(ce, hidden, weight, labels);
  std::vector<double> per_row(std::size_t(ce.tokens), 0.0);
  double total = 0, counted = 0;
  for (std::int64_t i = 0; i < ce.tokens; ++i) {
    const std::size_t ri = std::size_t(i);
    if (!r.counted[ri]) continue;
    const std::int64_t y = labels[ri];
    double sum = 0;
    for (std::int64_t j = 0; j < ce.vocab; ++j) sum += r.logits[std::size_t(i * ce.vocab + j)];
    const double label_logit = y >= 0 && y < ce.vocab ? r.logits[std::size_t(i * ce.vocab + y)] : NAN;
    per_row[ri] = r.lse[ri] - (1 - ce.smoothing) * label_logit - ce.smoothing / double(ce.vocab) * sum +
                  ce.z_loss * r.lse[ri] * r.lse[ri];
    total += per_row[ri];
    counted += 1;
  }
  lse.assign(r.lse.begin(), r.lse.end());
  if (ce.reduction == 0)
    loss.assign(per_row.begin(), per_row.end());
  else
    loss = {float(ce.reduction == 1 ? total / counted : total)};
}

void linear_cross_entropy_backward(const CrossEntropy& ce, const std::vector<float>& hidden,
                                   const std::vector<float>& weight, const std::vector<std::int64_t>& labels,
                                   const std::vector<float>& lse, const std::vector<float>& grad_loss,
                                   const std::vector<float>& grad_lse, std::vector<float>& grad_hidden,
                                   std::vector<float>& grad_weight) {
  Rows r = rows_of(ce, hidden, weight, labels);
  for (std::size_t i = 0; i < r.lse.size(); ++i) r.lse[i] = lse[i];  // the forward's, as given
  double counted = 0;
  for (bool c : r.counted) counted += c ? 1 : 0;
  std::vector<double> gh(std::size_t(ce.tokens * ce.hidden), 0.0), gw(std::size_t(ce.vocab * ce.hidden), 0.0);
  for (std::int64_t i = 0; i < ce.tokens; ++i) {
    const std::size_t ri = std::size_t(i);
    const double g_lse = grad_lse.empty() ? 0.0 : grad_lse[ri];
    if (!r.counted[ri] && g_lse == 0) continue;
    const double g = !r.counted[ri]      ? 0.0
                     : ce.reduction == 0 ? grad_loss[ri]
                     : ce.reduction == 1 ? grad_loss[0] / counted
                                         : grad_loss[0];
    const std::int64_t y = labels[ri];
    for (std::int64_t j = 0; j < ce.vocab; ++j) {
      const double l = r.logits[std::size_t(i * ce.vocab + j)], p = std::exp(l - r.lse[ri]);
      // d (g loss_i + g_lse lse_i) / d l_j; a row ignored has no loss but still an lse.
      double d = g * (p * (1 + 2 * ce.z_loss * r.lse[ri]) - ce.smoothing / double(ce.vocab) -
                      (j == y ? 1 - ce.smoothing : 0)) +
                 g_lse * p;
      if (r.counted[ri] && (y < 0 || y >= ce.vocab)) d = NAN;  // a label neither in the vocabulary nor ignored
      if (ce.softcap > 0) d *= 1 - (l / ce.softcap) * (l / ce.softcap);
      for (std::int64_t k = 0; k < ce.hidden; ++k) {
        gh[std::size_t(i * ce.hidden + k)] += d * weight[std::size_t(j * ce.hidden + k)];
        gw[std::size_t(j * ce.hidden + k)] += d * hidden[std::size_t(i * ce.hidden + k)];
      }
    }
  }
  grad_hidden.assign(gh.begin(), gh.end());
  grad_weight.assign(gw.begin(), gw.end());
}

}  // namespace mojo::reference
