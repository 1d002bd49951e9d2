// linear_cross_entropy and linear_cross_entropy_backward against the float64 reference.
#include <algorithm>
#include <cmath>

#include "check/host_data.hpp"
#include "check/registry.hpp"
#include "ops/registry.hpp"
#include "reference/reference.hpp"

namespace mojo {
namespace {

class LinearCrossEntropyCheck final : public OpCheck {
 public:
  explicit LinearCrossEntropyCheck(bool backward)
      : OpCheck(backward ? linear_cross_entropy_backward_op() : linear_cross_entropy_op()), backward_(backward) {}

  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const std::size_t hi = hidden_index();
    const TensorSpec& h = specs[hi];
    reference::CrossEntropy ce{.tokens = h.dim(0),
                               .hidden = h.dim(1),
                               .vocab = specs[hi + 1].dim(0),
                               .reduction = int(scalar(scalars, "reduction")),
                               .ignore_index = op().whole_scalar(scalars, "ignore_index"),
                               .smoothing = scalar(scalars, "label_smoothing"),
                               .z_loss = scalar(scalars, "z_loss"),
                               .softcap = scalar(scalars, "softcap")};
    const std::vector<float> hidden = host_data::floats(h, d[hi]), weight = host_data::floats(specs[hi + 1], d[hi + 1]);
    const std::vector<std::int64_t> y = host_data::indices(specs[hi + 2], d[hi + 2]);
    if (!backward_) {
      std::vector<float> loss, lse;
      reference::linear_cross_entropy(ce, hidden, weight, y, loss, lse);
      d[0] = reference::encode(DType::f32, loss);
      if (!d[1].empty()) d[1] = reference::encode(DType::f32, lse);
      return;
    }
    std::vector<float> grad_hidden, grad_weight;
    const std::vector<float> grad_lse = specs[7].rank() == 0 ? std::vector<float>{} : host_data::floats(specs[7], d[7]);
    reference::linear_cross_entropy_backward(ce, hidden, weight, y, host_data::floats(specs[6], d[6]),
                                             host_data::floats(specs[2], d[2]), grad_lse, grad_hidden, grad_weight);
    d[0] = reference::encode(h.dtype(), grad_hidden);
    d[1] = reference::encode(h.dtype(), grad_weight);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList) const override {
    const std::size_t hi = hidden_index();
    const std::int64_t k = std::max({specs[hi].dim(1), specs[hi].dim(0), specs[hi + 1].dim(0)});
    const Tolerance t = product_tolerance(out, k, false);
    return {4 * t.rtol, 4 * t.atol};  // products of products, each rounded
  }
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs, ScalarList scalars,
                                        std::uint32_t seed) const override {
    const std::size_t hi = hidden_index();
    const TensorSpec& s = specs[i];
    if (i == hi + 2) {  // labels in range, a few ignored (-100)
      std::vector<std::int64_t> y = host_data::random_indices(s.numel(), specs[hi + 1].dim(0), seed, false);
      for (std::size_t j = 3; j < y.size(); j += 7) y[j] = -100;
      return host_data::index_bytes(s.dtype(), y);
    }
    if (backward_ && i == 6) {  // the forward's lse for these inputs
      const double work = double(specs[hi].dim(0)) * double(specs[hi].dim(1)) * double(specs[hi + 1].dim(0));
      if (work > kExactLseWork) return estimated_lse(specs, scalars, seed);
      std::vector<std::vector<std::uint8_t>> d(specs.size());
      for (std::size_t j : {hi, hi + 1, hi + 2}) d[j] = random_data(j, specs, scalars, seed);
      std::vector<TensorSpec> f = {TensorSpec(DType::f32, {1}), TensorSpec(DType::f32, {specs[hi].dim(0)}), specs[hi],
                                   specs[hi + 1], specs[hi + 2]};
      std::vector<std::vector<std::uint8_t>> fd = {std::vector<std::uint8_t>(4), std::vector<std::uint8_t>(s.nbytes()),
                                                   d[hi], d[hi + 1], d[hi + 2]};
      linear_cross_entropy_check().reference(f, fd, scalars);  // the forward at the same scalars
      return fd[1];
    }
    if (i == hi || i == hi + 1) {  // logits of a few units: hidden and weight of a small scale
      return reference::encode(s.dtype(), test_values(0, s.numel(), value_seed(seed, i)));
    }
    return OpCheck::random_data(i, specs, scalars, seed);
  }

 private:
  bool backward_;

  std::size_t hidden_index() const { return backward_ ? 3 : 2; }

  // Above this many multiply-adds (tokens x hidden x vocab), random_data's lse is estimated, not the float64
  // forward: at hidden=8192x4096 weight=151936x4096 that reference is 5e12 multiply-adds on one core and a
  // 10 GB logits buffer (hours: a benchmark's data never got to the launches).
  static constexpr double kExactLseWork = double(std::int64_t(1) << 30);

  // Each row's lse from evenly spaced vocabulary rows (as many as kExactLseWork allows, at least 16):
  // log(vocab / sampled) + the lse of their logits (float64, without the soft-cap). Close to the
  // forward's (logits of a few units), so the softmax the backward forms stays finite and near 1 in sum.
  // Only the sampled rows of weight are made (test_values is random access): at the full size of 2026-11-25
  // making all 622M values took 17 of this function's 19 s on the development machine.
  std::vector<std::uint8_t> estimated_lse(std::span<const TensorSpec> specs, ScalarList scalars,
                                          std::uint32_t seed) const {
    const std::size_t hi = hidden_index();
    const TensorSpec& weight = specs[hi + 1];
    const std::int64_t tokens = specs[hi].dim(0), hidden = specs[hi].dim(1), vocab = weight.dim(0);
    const std::int64_t per_column = std::max<std::int64_t>(1, tokens * hidden);
    const std::int64_t sampled = std::min(vocab, std::max<std::int64_t>(16, std::int64_t(kExactLseWork) / per_column));
    const std::vector<float> h = host_data::floats(specs[hi], random_data(hi, specs, scalars, seed));
    std::vector<float> w;  // the sampled rows, rounded to weight's dtype as the kernels read them
    w.reserve(std::size_t(sampled * hidden));
    for (std::int64_t c = 0; c < sampled; ++c) {
      const std::vector<float> row = test_values(c * vocab / sampled * hidden, hidden, value_seed(seed, hi + 1));
      w.insert(w.end(), row.begin(), row.end());
    }
    w = reference::decode(weight.dtype(), reference::encode(weight.dtype(), w));
    std::vector<float> lse(std::size_t(std::max<std::int64_t>(tokens, 0)));
    std::vector<double> logits(static_cast<std::size_t>(sampled));
    for (std::int64_t r = 0; r < tokens; ++r) {
      double max = -INFINITY;
      for (std::int64_t c = 0; c < sampled; ++c) {
        double dot = 0;
        for (std::int64_t k = 0; k < hidden; ++k)
          dot += double(h[std::size_t(r * hidden + k)]) * w[std::size_t(c * hidden + k)];
        logits[std::size_t(c)] = dot;
        max = std::max(max, dot);
      }
      double sum = 0;
      for (double x : logits) sum += std::exp(x - max);
      lse[std::size_t(r)] = float(max + std::log(sum) + std::log(double(vocab) / double(sampled)));
    }
    return reference::encode(DType::f32, lse);
  }

  // Values first .. first + n of a tensor's stream, each in ±[0.01, 0.3] (never zero): logits of a few units.
  // Value i is a hash of (seed, i) alone, so any part of a tensor can be made without the rest.
  static std::vector<float> test_values(std::int64_t first, std::int64_t n, std::uint64_t seed) {
    std::vector<float> v(std::size_t(std::max<std::int64_t>(n, 0)));
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::uint64_t x = seed + std::uint64_t(first + std::int64_t(i)) * 0x9E3779B97F4A7C15ull;  // splitmix64
      x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
      x ^= x >> 31;
      const float magnitude = 0.01f + 0.29f * float(x >> 40) * (1.f / 16777216.f);  // the top 24 bits
      v[i] = x & 1 ? magnitude : -magnitude;
    }
    return v;
  }
  static std::uint64_t value_seed(std::uint32_t seed, std::size_t tensor) {
    return (std::uint64_t(seed) << 32 | tensor) * 0xD1B54A32D192ED03ull;
  }
};

}  // namespace

const OpCheck& linear_cross_entropy_check() {
  static const LinearCrossEntropyCheck check(false);
  return check;
}
const OpCheck& linear_cross_entropy_backward_check() {
  static const LinearCrossEntropyCheck check(true);
  return check;
}

}  // namespace mojo
