// apply_penalties_temperature, sample and reject_sample against the float64 reference.
#include <algorithm>
#include <cmath>
#include <random>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

// Random per-request parameters in [lo, hi] for check inputs.
std::vector<std::uint8_t> random_floats(const TensorSpec& t, std::uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(std::size_t(t.numel()));
  for (float& x : v) x = u(rng);
  return reference::encode(t.dtype(), v);
}
std::vector<std::uint8_t> random_ints(const TensorSpec& t, std::uint32_t seed, std::int64_t lo, std::int64_t hi) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> v(std::size_t(t.numel()));
  for (auto& x : v) x = lo + std::int64_t(rng() % std::uint64_t(hi - lo + 1));
  return host_data::index_bytes(t.dtype(), v);
}

// Logits with a realistic spread (a few likely tokens, a long tail): normal, sigma 3.
std::vector<std::uint8_t> random_logits(const TensorSpec& t, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 3.f);
  std::vector<float> v(std::size_t(t.numel()));
  for (float& x : v) x = n(rng);
  return reference::encode(t.dtype(), v);
}

Tolerance exact(DType out) { return out == DType::f32 ? Tolerance{1e-4, 1e-5} : Tolerance{0, 0}; }

// ---- apply_penalties_temperature -------------------------------------------------

class ApplyPenaltiesTemperatureCheck final : public OpCheck {
 public:
  ApplyPenaltiesTemperatureCheck() : OpCheck(apply_penalties_temperature_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const std::int64_t batch = specs[0].dim(0), vocab = specs[0].dim(1), len = specs[1].dim(1);
    std::vector<float> logits = host_data::floats(specs[0], d[0]);
    const std::vector<std::int64_t> ids = host_data::indices(specs[1], d[1]),
                                    counts = host_data::indices(specs[2], d[2]);
    const std::vector<float> rep = host_data::floats(specs[3], d[3]), pres = host_data::floats(specs[4], d[4]),
                             freq = host_data::floats(specs[5], d[5]), temp = host_data::floats(specs[6], d[6]);
    for (std::int64_t r = 0; r < batch; ++r) {
      std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
      reference::apply_penalties_temperature(row, {ids.begin() + r * len, ids.begin() + (r + 1) * len},
                                             {counts.begin() + r * len, counts.begin() + (r + 1) * len},
                                             rep[std::size_t(r)], pres[std::size_t(r)], freq[std::size_t(r)],
                                             temp[std::size_t(r)]);
      std::copy(row.begin(), row.end(), logits.begin() + r * vocab);
    }
    d[0] = reference::encode(specs[0].dtype(), logits);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override {
    // A penalized logit is rounded to the storage type twice (after the temperature, then after the penalty).
    const Tolerance t = default_tolerance(out);
    return {2 * t.rtol, t.atol};
  }
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    const TensorSpec& t = specs[i];
    const std::uint32_t s = seed * 7919u + std::uint32_t(i);
    switch (i) {
      case 1: {  // distinct ids, a random number of them per request, -1 after
        const std::int64_t batch = t.dim(0), len = t.dim(1), vocab = specs[0].dim(1);
        std::vector<std::int64_t> ids(std::size_t(t.numel()), -1);
        std::mt19937 rng(s);
        for (std::int64_t r = 0; r < batch; ++r) {
          const std::int64_t used = std::min<std::int64_t>(vocab, std::int64_t(rng() % std::uint32_t(len + 1)));
          const auto distinct = host_data::random_indices(used, vocab, s + std::uint32_t(r), true);
          std::copy(distinct.begin(), distinct.end(), ids.begin() + r * len);
        }
        return host_data::index_bytes(t.dtype(), ids);
      }
      case 2:
        return random_ints(t, s, 0, 4);
      case 3:
        return random_floats(t, s, 1.f, 2.f);
      case 4:
      case 5:
        return random_floats(t, s, 0.f, 1.f);
      case 6:
        return random_floats(t, s, 0.5f, 1.5f);
      default:
        return OpCheck::random_data(i, specs, scalars, seed);
    }
  }
};

// ---- sample ------------------------------------------------------------------

class SampleCheck final : public OpCheck {
 public:
  SampleCheck() : OpCheck(sample_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const std::int64_t batch = specs[2].dim(0), vocab = specs[2].dim(1);
    const std::vector<float> logits = host_data::floats(specs[2], d[2]);
    const std::vector<std::int64_t> k = host_data::indices(specs[3], d[3]), seed = host_data::indices(specs[6], d[6]);
    const std::vector<float> p = host_data::floats(specs[4], d[4]), min_p = host_data::floats(specs[5], d[5]);
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(batch)), offset = host_data::indices(specs[7], d[7]);
    std::vector<float> logprobs(static_cast<std::size_t>(batch));
    for (std::size_t r = 0; r < std::size_t(batch); ++r) {
      const std::vector<float> row(logits.begin() + std::int64_t(r) * vocab,
                                   logits.begin() + std::int64_t(r + 1) * vocab);
      const std::vector<double> w = reference::sampling_weights(row, k[r], p[r], min_p[r]);
      tokens[r] = reference::inverse_cdf(w, reference::random24(seed[r], offset[r], 0), k[r] == 1);
      logprobs[r] = tokens[r] < 0 ? NAN : float(log_softmax_at(row, tokens[r]));
      ++offset[r];
    }
    d[0] = host_data::index_bytes(DType::i64, tokens);
    if (!d[1].empty()) d[1] = reference::encode(DType::f32, logprobs);
    d[7] = host_data::index_bytes(DType::i64, offset);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override { return exact(out); }
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    const TensorSpec& t = specs[i];
    const std::uint32_t s = seed * 7919u + std::uint32_t(i);
    switch (i) {
      case 2:
        return random_logits(t, s);
      case 3:
        return random_ints(t, s, 0, std::min<std::int64_t>(specs[2].dim(1), 64));
      case 4:
        return random_floats(t, s, 0.3f, 1.f);
      case 5:
        return random_floats(t, s, 0.f, 0.2f);
      case 6:
        return random_ints(t, s, 0, INT64_MAX / 2);
      case 7:
        return random_ints(t, s, 0, (1 << 24) - 1);  // exact in the floats check_op compares
      default:
        return OpCheck::random_data(i, specs, scalars, seed);
    }
  }

 private:
  static double log_softmax_at(const std::vector<float>& row, std::int64_t token) {
    double max = -INFINITY, sum = 0;
    for (float l : row)
      if (std::isfinite(l)) max = std::max(max, double(l));
    for (float l : row)
      if (std::isfinite(l)) sum += std::exp(double(l) - max);
    return double(row[std::size_t(token)]) - max - std::log(sum);
  }
};

// ---- reject_sample -----------------------------------------------------------

class RejectSampleCheck final : public OpCheck {
 public:
  RejectSampleCheck() : OpCheck(reject_sample_op()) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const std::int64_t batch = specs[4].dim(0), spec = specs[4].dim(1) - 1, vocab = specs[4].dim(2);
    const std::vector<std::int64_t> drafts = host_data::indices(specs[2], d[2]),
                                    seed = host_data::indices(specs[5], d[5]);
    const std::vector<float> draft = host_data::floats(specs[3], d[3]), target = host_data::floats(specs[4], d[4]);
    std::vector<std::int64_t> out(static_cast<std::size_t>(batch * (spec + 1))),
        accepted(static_cast<std::size_t>(batch)), offset = host_data::indices(specs[6], d[6]);
    for (std::int64_t r = 0; r < batch; ++r) {
      const std::size_t ri = std::size_t(r);
      accepted[ri] = reference::reject_sample(
          {drafts.begin() + r * spec, drafts.begin() + (r + 1) * spec},
          {draft.begin() + r * spec * vocab, draft.begin() + (r + 1) * spec * vocab},
          {target.begin() + r * (spec + 1) * vocab, target.begin() + (r + 1) * (spec + 1) * vocab}, vocab, seed[ri],
          offset[ri], out.data() + r * (spec + 1));
      ++offset[ri];
    }
    d[0] = host_data::index_bytes(DType::i64, out);
    d[1] = host_data::index_bytes(DType::i64, accepted);
    d[6] = host_data::index_bytes(DType::i64, offset);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec>, ScalarList) const override { return exact(out); }
  // Draft and target rows near each other (softmax of shared logits plus noise), drafts drawn from the draft rows.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    const TensorSpec& target = specs[4];
    const std::int64_t batch = target.dim(0), spec = target.dim(1) - 1, vocab = target.dim(2);
    const auto probs = [&](std::int64_t rows_per_request, std::uint32_t noise_seed) {
      std::mt19937 base(seed), noise(noise_seed);
      std::normal_distribution<float> n(0.f, 2.f), e(0.f, 0.3f);
      std::vector<float> v(static_cast<std::size_t>(batch * rows_per_request * vocab));
      std::vector<float> logits(static_cast<std::size_t>(vocab));
      for (std::int64_t row = 0; row < batch * rows_per_request; ++row) {
        for (auto& l : logits) l = n(base) + e(noise);
        const float max = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (auto& l : logits) sum += (l = std::exp(l - max));
        for (std::int64_t j = 0; j < vocab; ++j) v[std::size_t(row * vocab + j)] = float(logits[std::size_t(j)] / sum);
      }
      return v;
    };
    switch (i) {
      case 2: {
        const std::vector<float> draft = probs(spec, seed + 1);
        std::mt19937 rng(seed + 3);
        std::vector<std::int64_t> tokens(static_cast<std::size_t>(batch * spec));
        for (std::size_t row = 0; row < tokens.size(); ++row) {
          std::discrete_distribution<std::int64_t> pick(draft.begin() + std::int64_t(row) * vocab,
                                                        draft.begin() + std::int64_t(row + 1) * vocab);
          tokens[row] = pick(rng);
        }
        return host_data::index_bytes(specs[2].dtype(), tokens);
      }
      case 3:
        return reference::encode(specs[3].dtype(), probs(spec, seed + 1));
      case 4:
        return reference::encode(target.dtype(), probs(spec + 1, seed + 2));
      case 5:
        return random_ints(specs[i], seed * 7919u + 5u, 0, INT64_MAX / 2);
      case 6:
        return random_ints(specs[i], seed * 7919u + 6u, 0, (1 << 24) - 1);  // exact in check_op's floats
      default:
        return OpCheck::random_data(i, specs, scalars, seed);
    }
  }
};

}  // namespace

const OpCheck& apply_penalties_temperature_check() {
  static const ApplyPenaltiesTemperatureCheck check;
  return check;
}
const OpCheck& sample_check() {
  static const SampleCheck check;
  return check;
}
const OpCheck& reject_sample_check() {
  static const RejectSampleCheck check;
  return check;
}

}  // namespace mojo
