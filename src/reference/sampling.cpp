// The sampling ops' references: Philox, the filtered distribution by sorting,
// the inverse-CDF draw, penalties and the speculative chain check, in double.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/reference.hpp"

namespace mojo::reference {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t(0xD2511F53u) * c[0], p1 = std::uint64_t(0xCD9E8D57u) * c[2];
    c = {std::uint32_t(p1 >> 32) ^ c[1] ^ k0, std::uint32_t(p1), std::uint32_t(p0 >> 32) ^ c[3] ^ k1,
         std::uint32_t(p0)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

std::uint32_t random24(std::int64_t seed, std::int64_t offset, std::uint32_t stream) {
  const auto s = std::uint64_t(seed), o = std::uint64_t(offset);
  return philox4x32_10({std::uint32_t(o), std::uint32_t(o >> 32), stream, 0}, std::uint32_t(s),
                       std::uint32_t(s >> 32))[0] >>
         8;
}

std::vector<double> sampling_weights(const std::vector<float>& logits, std::int64_t top_k, double top_p, double min_p) {
  const std::size_t n = logits.size();
  std::vector<double> w(n, 0.0);
  double max = -INFINITY;
  for (float l : logits)
    if (std::isfinite(l)) max = std::max(max, double(l));
  if (!std::isfinite(max)) return w;
  for (std::size_t i = 0; i < n; ++i)
    if (std::isfinite(logits[i])) w[i] = std::exp(double(logits[i]) - max);

  // Highest logit first, ties by index (NaN and -inf weigh 0: last). std::sort with the index as tie-break
  // instead of std::stable_sort, whose temporary buffer GCC 12's libstdc++ frees in a way ASan calls mismatched.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const double la = w[a] > 0 ? logits[a] : -INFINITY, lb = w[b] > 0 ? logits[b] : -INFINITY;
    return la > lb || (la == lb && a < b);
  });
  double floor = -INFINITY;  // keep logits >= floor
  if (top_k > 0 && std::size_t(top_k) < n) floor = logits[order[std::size_t(top_k) - 1]];
  if (top_p < 1.0) {
    double total = 0, cum = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (logits[i] >= floor) total += w[i];
    for (std::size_t i : order) {
      if (!(logits[i] >= floor)) break;
      cum += w[i];
      if (cum >= top_p * total) {
        floor = logits[i];
        break;
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!(logits[i] >= floor) || w[i] < min_p) w[i] = 0;
  return w;
}

std::int64_t inverse_cdf(const std::vector<double>& weights, std::uint32_t r24, bool greedy) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (!(total > 0)) return -1;
  const double point = greedy ? 0.0 : total * std::ldexp(double(r24), -24);
  double acc = 0;
  std::int64_t last = -1;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    acc += weights[i];
    last = std::int64_t(i);
    if (acc > point) return last;
  }
  return last;  // rounding put the point past the end
}

void apply_penalties_temperature(std::vector<float>& logits, const std::vector<std::int64_t>& ids,
                                 const std::vector<std::int64_t>& counts, double repetition, double presence,
                                 double frequency, double temperature) {
  const double scale = temperature > 0 ? 1.0 / temperature : 1.0;
  std::vector<double> out(logits.begin(), logits.end());
  for (double& l : out) l *= scale;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const std::int64_t id = ids[j];
    if (id < 0 || id >= std::int64_t(out.size())) continue;
    double& l = out[std::size_t(id)];
    l = l > 0 ? l / repetition : l * repetition;
    l -= (frequency * double(counts[j]) + (counts[j] > 0 ? presence : 0.0)) * scale;
  }
  std::copy(out.begin(), out.end(), logits.begin());
}

std::int64_t reject_sample(const std::vector<std::int64_t>& drafts, const std::vector<float>& draft_probs,
                           const std::vector<float>& target_probs, std::int64_t vocab, std::int64_t seed,
                           std::int64_t offset, std::int64_t* out) {
  const auto spec = std::int64_t(drafts.size());
  std::int64_t j = 0;
  for (; j < spec; ++j) {
    const std::int64_t d = drafts[std::size_t(j)];
    if (d < 0 || d >= vocab) break;
    // The acceptance test is one float comparison, as the kernel makes it.
    const float pd = draft_probs[std::size_t(j * vocab + d)], pt = target_probs[std::size_t(j * vocab + d)];
    const float u = float(random24(seed, offset, std::uint32_t(j))) * 0x1p-24f;
    if (!(u * pd < pt)) break;
  }
  std::vector<double> residual(static_cast<std::size_t>(vocab)), target(static_cast<std::size_t>(vocab));
  for (std::int64_t i = 0; i < vocab; ++i) {
    target[std::size_t(i)] = std::max(0.0, double(target_probs[std::size_t(j * vocab + i)]));
    residual[std::size_t(i)] =
        j < spec ? std::max(0.0, target[std::size_t(i)] - double(draft_probs[std::size_t(j * vocab + i)]))
                 : target[std::size_t(i)];
  }
  const std::uint32_t r24 = random24(seed, offset, std::uint32_t(spec));
  std::int64_t token = inverse_cdf(residual, r24, false);
  if (token < 0) token = inverse_cdf(target, r24, false);
  for (std::int64_t i = 0; i <= spec; ++i) out[i] = i < j ? drafts[std::size_t(i)] : (i == j ? token : -1);
  return j;
}

}  // namespace mojo::reference
