// Sampling: apply_penalties_temperature, sample and reject_sample, one block
// per request with each request's parameters in tensors, so one launch
// serves a batch of different requests. Template: kernel_templates/sampling.cu.
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <set>

#include "mojo/error.hpp"
#include "ops/checks.hpp"
#include "ops/host_data.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "reference/reference.hpp"
#include "sampling_args.h"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr std::int64_t kMaxVocab = 1 << 18;  // the fixed-point masses (2^40 each) sum below 2^58

// [batch, vocab] rows with unit stride in the vocabulary; returns the row stride.
std::int64_t rows_of(std::string_view op, std::string_view arg, const TensorSpec& t) {
  if (t.rank() != 2 || t.dim(0) < 1 || t.dim(1) < 1 || t.dim(1) > kMaxVocab || t.stride(1) != 1 ||
      t.stride(0) < t.dim(1))
    throw ShapeError(fmt::format("{}: {} is {}; expected [batch, vocab] with 1 <= vocab <= {} and unit stride in vocab",
                                 op, arg, t.str(), kMaxVocab));
  if (t.dim(0) > INT32_MAX) throw ShapeError(fmt::format("{}: {} has more rows than the grid can take", op, arg));
  return t.stride(0);
}

constexpr DType kF32[] = {DType::f32};
constexpr DType kI64[] = {DType::i64};

// Vector width and threads for a row of `vocab` (at least a warp: the kernels reduce over the block).
void add_row_params(Params& p, std::int64_t vocab, DType dtype, std::initializer_list<Tensor> rows) {
  rows::Layout l = rows::pick(vocab, dtype, rows);
  p.add("vocab", vocab);
  p.add("vec", l.vec);
  p.add("threads", std::max<std::int64_t>(32, l.threads));
}

LaunchGeometry one_block_per_row(std::int64_t rows, const Params& p) {
  LaunchGeometry g;
  g.grid.x = unsigned(rows);
  g.block.x = unsigned(p.get("threads"));
  return g;
}

std::vector<float> read_floats(const Tensor& t, StreamHandle stream) {
  std::vector<std::uint8_t> bytes(t.spec.nbytes());
  if (!bytes.empty()) copy_to_host(bytes.data(), t.data, bytes.size(), stream);
  return reference::decode(t.spec.dtype(), bytes);
}

// Throws InvalidArgumentError naming the first value of a per-request f32 tensor that `ok` rejects.
template <class Ok>
void check_values(std::string_view op, std::string_view arg, const Tensor& t, StreamHandle stream,
                  std::string_view expected, Ok ok) {
  const std::vector<float> v = read_floats(t, stream);
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!ok(v[i])) throw InvalidArgumentError(fmt::format("{}: {}[{}] = {}; expected {}", op, arg, i, v[i], expected));
}

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

constexpr TensorArgInfo kPenaltyTensors[] = {
    {"logits", "inout", "[batch, vocab] f32, f16 or bf16, unit stride in vocab"},
    {"token_ids", "in", "i32 or i64 [batch, max_len]: each request's distinct seen tokens, -1 pads"},
    {"token_counts", "in", "[batch, max_len], token_ids' dtype: times each was generated (0: in the prompt only)"},
    {"repetition_penalty", "in", "f32 [batch], > 0 (1: none)"},
    {"presence_penalty", "in", "f32 [batch] (0: none)"},
    {"frequency_penalty", "in", "f32 [batch] (0: none)"},
    {"temperature", "in", "f32 [batch], >= 0 (0: logits left unscaled; greedy requests sample with top_k = 1)"},
};
constexpr OpInfo kPenalties{
    .name = "apply_penalties_temperature",
    .summary =
        "logits = penalties(logits / temperature) per request: repetition on every listed token, presence "
        "and frequency on generated ones",
    .tensors = kPenaltyTensors,
    .dtypes = kFloatTypes,
    .template_file = "sampling.cu",
    .example_shapes = "logits=256x151936 token_ids=256x1024",
};

constexpr std::int64_t kScaleLoads = 4;

class ApplyPenaltiesTemperature final : public OpDef {
 public:
  ApplyPenaltiesTemperature() : OpDef(kPenalties) {}

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
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs,
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
        return OpDef::random_data(i, specs, seed);
    }
  }

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec& logits = t[0].spec;
    checks::expect_dtype_in(name(), "logits", logits.dtype(), kFloatTypes);
    rows_of(name(), "logits", logits);
    const std::int64_t batch = logits.dim(0);
    const TensorSpec& ids = t[1].spec;
    if (ids.rank() != 2 || ids.dim(0) != batch)
      throw ShapeError(fmt::format("{}: token_ids is {}; expected [{}, max_len]", name(), ids.str(), batch));
    checks::expect_exact(name(), "token_ids", ids, {batch, ids.dim(1)}, indices::kTypes);
    const DType id_type[] = {ids.dtype()};
    checks::expect_exact(name(), "token_counts", t[2].spec, {batch, ids.dim(1)}, id_type);
    for (std::size_t i = 3; i < 7; ++i) checks::expect_exact(name(), kPenaltyTensors[i].name, t[i].spec, {batch}, kF32);
    Params p;
    p.add_dtype("dtype", logits.dtype());
    p.add_dtype("index", ids.dtype());
    add_row_params(p, logits.dim(1), logits.dtype(), {t[0]});
    // The temperature step's blocks a row: kScaleLoads vector loads a thread each.
    const std::int64_t per_block = p.get("threads") * kScaleLoads;
    const std::int64_t blocks = (p.get("vocab") / p.get("vec") + per_block - 1) / per_block;
    if (batch > INT32_MAX / blocks)
      throw ShapeError(fmt::format("{}: logits has more rows than the grid can take", name()));
    p.add("blocks", blocks);
    return p;
  }

  // Two kernels: the temperature over all of every row (many blocks a row), then the penalties (one block a row).
  std::vector<Params> plan(const Params& p) const override {
    Params scale = p, penalize = p;
    scale.add("step", 0);
    penalize.add("step", 1);
    return {scale, penalize};
  }
  std::string entry_macro(const Params& p) const override {
    return p.get("step") == 0 ? "MOJO_KERNEL_apply_temperature" : OpDef::entry_macro(p);
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g = one_block_per_row(t[0].spec.dim(0), p);
    if (p.get("step") == 0) g.grid.x *= unsigned(p.get("blocks"));
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, DevicePtr, KernelArgs& args) const override {
    checks::expect_pointer(name(), "logits", t[0].data, checks::vector_bytes(p));
    for (std::size_t i = 1; i < 7; ++i)
      checks::expect_pointer(name(), kPenaltyTensors[i].name, t[i].data, unsigned(dtype_size(t[i].spec.dtype())));
    if (p.get("step") == 0) {
      args.push_args(mojo_sampling::TemperatureArgs<void>{
          .logits = ptr(t[0]),
          .stride = t[0].spec.stride(0),
          .temperature = ptr<float>(t[6]),
      });
      return;
    }
    args.push_args(mojo_sampling::PenaltyArgs<void, void>{
        .logits = ptr(t[0]),
        .stride = t[0].spec.stride(0),
        .ids = ptr(t[1]),
        .counts = ptr(t[2]),
        .max_len = t[1].spec.dim(1),
        .repetition = ptr<float>(t[3]),
        .presence = ptr<float>(t[4]),
        .frequency = ptr<float>(t[5]),
        .temperature = ptr<float>(t[6]),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    const std::int64_t vocab = t[0].spec.dim(1), len = t[1].spec.dim(1);
    indices::check_range(name(), "token_ids", t[1], vocab, true, stream);
    const std::vector<std::int64_t> ids = indices::read(t[1], stream), counts = indices::read(t[2], stream);
    for (std::size_t r = 0; r * std::size_t(len) < ids.size(); ++r) {
      std::set<std::int64_t> seen;
      for (std::size_t j = r * std::size_t(len); j < (r + 1) * std::size_t(len); ++j) {
        if (ids[j] >= 0 && !seen.insert(ids[j]).second)
          throw InvalidArgumentError(
              fmt::format("{}: token_ids row {} lists token {} twice; list each seen token "
                          "once with its count",
                          name(), r, ids[j]));
        if (counts[j] < 0)
          throw InvalidArgumentError(
              fmt::format("{}: token_counts[{}] = {}; expected a count >= 0", name(), j, counts[j]));
      }
    }
    check_values(name(), "repetition_penalty", t[3], stream, "> 0", [](float v) { return v > 0; });
    check_values(name(), "temperature", t[6], stream, ">= 0", [](float v) { return v >= 0; });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& logits = shapes::required(name(), shapes, "logits", example_shapes());
    const auto& ids = shapes::required(name(), shapes, "token_ids", example_shapes());
    const std::int64_t batch = logits.front();
    const TensorSpec per_request(DType::f32, {batch});
    return {TensorSpec(dtype, logits),
            TensorSpec(DType::i64, ids),
            TensorSpec(DType::i64, shapes::value_or(shapes, "token_counts", ids)),
            per_request,
            per_request,
            per_request,
            per_request};
  }
};

// ---- sample ------------------------------------------------------------------

constexpr TensorArgInfo kSampleTensors[] = {
    {"tokens", "out", "i64 [batch]: the drawn token (-1 for a row with no finite logit)"},
    {"logprobs", "out", "f32 [batch], optional: log_softmax(logits) at the token, before the filters"},
    {"logits", "in", "[batch, vocab] f32, f16 or bf16, unit stride in vocab"},
    {"top_k", "in", "i32 or i64 [batch]: keep the k highest (0: all; 1: greedy)"},
    {"top_p", "in", "f32 [batch] in (0, 1]: keep the fewest highest tokens holding this much of the top-k mass"},
    {"min_p", "in", "f32 [batch] in [0, 1]: keep tokens with probability >= min_p * the highest's"},
    {"seed", "in", "i64 [batch]: each request's Philox key"},
    {"offset", "inout", "i64 [batch]: each request's Philox counter, advanced by 1"},
};
constexpr OpInfo kSample{
    .name = "sample",
    .summary =
        "one token per request from softmax(logits) after top-k, top-p and min-p, without sorting; Philox "
        "per request",
    .tensors = kSampleTensors,
    .dtypes = kFloatTypes,
    .template_file = "sampling.cu",
    .example_shapes = "logits=256x151936",
};

class Sample final : public OpDef {
 public:
  Sample() : OpDef(kSample) {}

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
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs,
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
        return OpDef::random_data(i, specs, seed);
    }
  }

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec& logits = t[2].spec;
    checks::expect_dtype_in(name(), "logits", logits.dtype(), kFloatTypes);
    rows_of(name(), "logits", logits);
    const std::int64_t batch = logits.dim(0);
    checks::expect_exact(name(), "tokens", t[0].spec, {batch}, kI64);
    if (t[1].spec.rank() != 0) checks::expect_exact(name(), "logprobs", t[1].spec, {batch}, kF32);
    checks::expect_exact(name(), "top_k", t[3].spec, {batch}, indices::kTypes);
    checks::expect_exact(name(), "top_p", t[4].spec, {batch}, kF32);
    checks::expect_exact(name(), "min_p", t[5].spec, {batch}, kF32);
    checks::expect_exact(name(), "seed", t[6].spec, {batch}, kI64);
    checks::expect_exact(name(), "offset", t[7].spec, {batch}, kI64);
    Params p;
    p.add_dtype("dtype", logits.dtype());
    p.add_dtype("index", t[3].spec.dtype());
    add_row_params(p, logits.dim(1), logits.dtype(), {t[2]});
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return one_block_per_row(t[2].spec.dim(0), p);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, DevicePtr, KernelArgs& args) const override {
    checks::expect_pointer(name(), "logits", t[2].data, checks::vector_bytes(p));
    for (std::size_t i = 0; i < t.size(); ++i)
      if (i != 2 && !(i == 1 && t[1].spec.rank() == 0))
        checks::expect_pointer(name(), kSampleTensors[i].name, t[i].data, unsigned(dtype_size(t[i].spec.dtype())));
    args.push_args(mojo_sampling::SampleArgs<void, void>{
        .tokens = static_cast<long long*>(ptr(t[0])),
        .logprobs = t[1].spec.rank() == 0 ? nullptr : ptr<float>(t[1]),
        .logits = ptr(t[2]),
        .stride = t[2].spec.stride(0),
        .top_k = ptr(t[3]),
        .top_p = ptr<float>(t[4]),
        .min_p = ptr<float>(t[5]),
        .seed = static_cast<const long long*>(ptr(t[6])),
        .offset = static_cast<long long*>(ptr(t[7])),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    const std::vector<std::int64_t> k = indices::read(t[3], stream);
    for (std::size_t r = 0; r < k.size(); ++r)
      if (k[r] < 0)
        throw InvalidArgumentError(fmt::format("{}: top_k[{}] = {}; expected >= 0 (0: no top-k)", name(), r, k[r]));
    check_values(name(), "top_p", t[4], stream, "a value in (0, 1]", [](float v) { return v > 0 && v <= 1; });
    check_values(name(), "min_p", t[5], stream, "a value in [0, 1]", [](float v) { return v >= 0 && v <= 1; });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& logits = shapes::required(name(), shapes, "logits", example_shapes());
    const TensorSpec ints(DType::i64, {logits.front()}), floats(DType::f32, {logits.front()});
    return {ints, floats, TensorSpec(dtype, logits), ints, floats, floats, ints, ints};
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

constexpr TensorArgInfo kRejectTensors[] = {
    {"out", "out", "i64 [batch, spec + 1]: accepted drafts, then the recovered or bonus token, then -1"},
    {"accepted", "out", "i64 [batch]: how many draft tokens were accepted"},
    {"draft_tokens", "in", "i32 or i64 [batch, spec]"},
    {"draft_probs", "in", "[batch, spec, vocab] f32, f16 or bf16: the draft model's probabilities"},
    {"target_probs", "in", "[batch, spec + 1, vocab], draft_probs' dtype: the target model's"},
    {"seed", "in", "i64 [batch]: each request's Philox key"},
    {"offset", "inout", "i64 [batch]: each request's Philox counter, advanced by 1"},
};
constexpr OpInfo kReject{
    .name = "reject_sample",
    .summary =
        "speculative decoding: accept draft tokens while u < target / draft, then draw the recovered token "
        "from max(0, target - draft) or the bonus token",
    .tensors = kRejectTensors,
    .dtypes = kFloatTypes,
    .template_file = "sampling.cu",
    .example_shapes = "target_probs=64x5x151936",
};

class RejectSample final : public OpDef {
 public:
  RejectSample() : OpDef(kReject) {}

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
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs,
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
        return OpDef::random_data(i, specs, seed);
    }
  }

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec& target = t[4].spec;
    checks::expect_dtype_in(name(), "target_probs", target.dtype(), kFloatTypes);
    if (target.rank() != 3 || target.dim(1) < 2 || target.dim(2) > kMaxVocab || !target.is_contiguous() ||
        target.dim(0) > INT32_MAX)
      throw ShapeError(
          fmt::format("{}: target_probs is {}; expected a contiguous [batch, spec + 1, vocab] with spec "
                      ">= 1 and vocab <= {}",
                      name(), target.str(), kMaxVocab));
    const std::int64_t batch = target.dim(0), spec = target.dim(1) - 1, vocab = target.dim(2);
    if (spec > 32) throw ShapeError(fmt::format("{}: {} speculative tokens; at most 32", name(), spec));
    checks::expect_same_dtype(name(), "draft_probs", t[3].spec, "target_probs", target);
    checks::expect_exact(name(), "draft_probs", t[3].spec, {batch, spec, vocab}, kFloatTypes);
    checks::expect_exact(name(), "out", t[0].spec, {batch, spec + 1}, kI64);
    checks::expect_exact(name(), "accepted", t[1].spec, {batch}, kI64);
    checks::expect_exact(name(), "draft_tokens", t[2].spec, {batch, spec}, indices::kTypes);
    checks::expect_exact(name(), "seed", t[5].spec, {batch}, kI64);
    checks::expect_exact(name(), "offset", t[6].spec, {batch}, kI64);
    Params p;
    p.add_dtype("dtype", target.dtype());
    p.add_dtype("index", t[2].spec.dtype());
    add_row_params(p, vocab, target.dtype(), {});
    p.add("spec", spec);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return one_block_per_row(t[4].spec.dim(0), p);
  }

  void pack_args(const Params&, TensorList t, ScalarList, DevicePtr, KernelArgs& args) const override {
    for (std::size_t i = 0; i < t.size(); ++i)
      checks::expect_pointer(name(), kRejectTensors[i].name, t[i].data, unsigned(dtype_size(t[i].spec.dtype())));
    args.push_args(mojo_sampling::RejectArgs<void, void>{
        .out = static_cast<long long*>(ptr(t[0])),
        .accepted = static_cast<long long*>(ptr(t[1])),
        .draft_tokens = ptr(t[2]),
        .draft_probs = ptr(t[3]),
        .target_probs = ptr(t[4]),
        .seed = static_cast<const long long*>(ptr(t[5])),
        .offset = static_cast<long long*>(ptr(t[6])),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "draft_tokens", t[2], t[4].spec.dim(2), false, stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& target = shapes::required(name(), shapes, "target_probs", example_shapes());
    if (target.size() != 3) throw ShapeError(fmt::format("{}: give target_probs as BATCHxSPEC+1xVOCAB", name()));
    const std::int64_t batch = target[0], spec = target[1] - 1, vocab = target[2];
    const TensorSpec per_request(DType::i64, {batch});
    return {TensorSpec(DType::i64, {batch, spec + 1}),
            per_request,
            TensorSpec(DType::i64, {batch, spec}),
            TensorSpec(dtype, {batch, spec, vocab}),
            TensorSpec(dtype, target),
            per_request,
            per_request};
  }
};

}  // namespace

const OpDef& apply_penalties_temperature_op() {
  static const ApplyPenaltiesTemperature op;
  return op;
}
const OpDef& sample_op() {
  static const Sample op;
  return op;
}
const OpDef& reject_sample_op() {
  static const RejectSample op;
  return op;
}

}  // namespace mojo
