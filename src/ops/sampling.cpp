// Sampling: apply_penalties_temperature, sample and reject_sample, each
// request's parameters in tensors, so one launch serves a batch of different
// requests. sample splits each row over several blocks (a plan of phases). Template: kernel_templates/sampling.cu.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/convert.hpp"
#include "mojo/error.hpp"
#include "mojo/perf_model.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"
#include "ops/rows.hpp"
#include "sampling_args.h"

namespace mojo {
namespace {

using checks::kFloatTypes;
constexpr std::int64_t kMaxVocab = 1 << 18;  // the fixed-point masses (2^40 each) sum below 2^58

// [batch, vocab] rows with unit stride in the vocabulary; returns the row stride.
std::int64_t rows_of(std::string_view op, std::string_view arg, const TensorSpec& t) {
  if (t.rank() != 2 || t.dim(1) < 1 || t.dim(1) > kMaxVocab || t.stride(1) != 1 || t.stride(0) < t.dim(1))
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
  return convert::decode(t.spec.dtype(), bytes);
}

// Throws InvalidArgumentError naming the first value of a per-request f32 tensor that `ok` rejects.
template <class Ok>
void check_values(std::string_view op, std::string_view arg, const Tensor& t, StreamHandle stream,
                  std::string_view expected, Ok ok) {
  const std::vector<float> v = read_floats(t, stream);
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!ok(v[i])) throw InvalidArgumentError(fmt::format("{}: {}[{}] = {}; expected {}", op, arg, i, v[i], expected));
}

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
  // Its tensors' places in kPenaltyTensors.
  static constexpr std::size_t kLogits = slot(kPenaltyTensors, "logits");
  static constexpr std::size_t kTokenIds = slot(kPenaltyTensors, "token_ids");
  static constexpr std::size_t kTokenCounts = slot(kPenaltyTensors, "token_counts");
  static constexpr std::size_t kRepetitionPenalty = slot(kPenaltyTensors, "repetition_penalty");
  static constexpr std::size_t kPresencePenalty = slot(kPenaltyTensors, "presence_penalty");
  static constexpr std::size_t kFrequencyPenalty = slot(kPenaltyTensors, "frequency_penalty");
  static constexpr std::size_t kTemperature = slot(kPenaltyTensors, "temperature");

 public:
  ApplyPenaltiesTemperature() : OpDef(kPenalties) {}

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec& logits = t[kLogits].spec;
    checks::expect_dtype_in(name(), "logits", logits.dtype(), kFloatTypes);
    rows_of(name(), "logits", logits);
    const std::int64_t batch = logits.dim(0);
    const TensorSpec& ids = t[kTokenIds].spec;
    if (ids.rank() != 2 || ids.dim(0) != batch)
      throw ShapeError(fmt::format("{}: token_ids is {}; expected [{}, max_len]", name(), ids.str(), batch));
    checks::expect_exact(name(), "token_ids", ids, {batch, ids.dim(1)}, indices::kTypes);
    const DType id_type[] = {ids.dtype()};
    checks::expect_exact(name(), "token_counts", t[kTokenCounts].spec, {batch, ids.dim(1)}, id_type);
    for (std::size_t i = kRepetitionPenalty; i <= kTemperature; ++i)  // the per-request f32 values
      checks::expect_exact(name(), kPenaltyTensors[i].name, t[i].spec, {batch}, kF32);
    Params p;
    p.add_dtype("dtype", logits.dtype());
    p.add_dtype("index", ids.dtype());
    add_row_params(p, logits.dim(1), logits.dtype(), {t[kLogits]});
    // The temperature step's blocks a row: kScaleLoads vector loads a thread each.
    const std::int64_t per_block = p.get("threads") * kScaleLoads;
    const std::int64_t blocks = (p.get("vocab") / p.get("vec") + per_block - 1) / per_block;
    if (batch > INT32_MAX / blocks)
      throw ShapeError(fmt::format("{}: logits has more rows than the grid can take", name()));
    p.add("blocks", blocks);
    return p;
  }

  // Two kernels: the temperature over all of every row (many blocks a row), then the penalties (one block a row).
  std::vector<Params> plan(const Params& p) const override { return two_steps(p); }
  std::string entry_macro(const Params& p) const override {
    return p.get("step") == 0 ? "MOJO_KERNEL_apply_temperature" : OpDef::entry_macro(p);
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g = one_block_per_row(t[kLogits].spec.dim(0), p);
    if (p.get("step") == 0) g.grid.x *= unsigned(p.get("blocks"));
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    checks::expect_pointer(name(), "logits", t[kLogits], checks::vector_bytes(p));
    for (std::size_t i = kTokenIds; i <= kTemperature; ++i)
      checks::expect_pointer(name(), kPenaltyTensors[i].name, t[i], unsigned(dtype_size(t[i].spec.dtype())));
    if (p.get("step") == 0) {
      args.push_args(mojo_sampling::TemperatureArgs<void>{
          .logits = ptr(t[kLogits]),
          .stride = t[kLogits].spec.stride(0),
          .temperature = ptr<float>(t[kTemperature]),
      });
      return;
    }
    args.push_args(mojo_sampling::PenaltyArgs<void, void>{
        .logits = ptr(t[kLogits]),
        .stride = t[kLogits].spec.stride(0),
        .ids = ptr(t[kTokenIds]),
        .counts = ptr(t[kTokenCounts]),
        .max_len = t[kTokenIds].spec.dim(1),
        .repetition = ptr<float>(t[kRepetitionPenalty]),
        .presence = ptr<float>(t[kPresencePenalty]),
        .frequency = ptr<float>(t[kFrequencyPenalty]),
        .temperature = ptr<float>(t[kTemperature]),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    const std::int64_t vocab = t[kLogits].spec.dim(1), len = t[kTokenIds].spec.dim(1);
    indices::check_range(name(), "token_ids", t[kTokenIds], vocab, true, stream);
    const std::vector<std::int64_t> ids = indices::read(t[kTokenIds], stream),
                                    counts = indices::read(t[kTokenCounts], stream);
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
    check_values(name(), "repetition_penalty", t[kRepetitionPenalty], stream, "> 0", [](float v) { return v > 0; });
    check_values(name(), "temperature", t[kTemperature], stream, ">= 0", [](float v) { return v >= 0; });
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
constexpr ScalarArgInfo kSampleScalars[] = {
    {"cooperative", -1,
     "-1: every phase in one cooperative launch where the grid fits on half the target's SMs, else a launch a "
     "phase; 0: a launch a phase; 1: one cooperative launch, over fewer blocks a row where that is needed to fit "
     "the target's SMs"},
};
constexpr OpInfo kSample{
    .name = "sample",
    .summary =
        "one token per request from softmax(logits) after top-k, top-p and min-p, without sorting; Philox "
        "per request",
    .tensors = kSampleTensors,
    .scalars = kSampleScalars,
    .dtypes = kFloatTypes,
    .template_file = "sampling.cu",
    .example_shapes = "logits=256x151936",
};

// The logits' order keys are this many bits wide (sampling.cu's kKeyBits): bf16 keeps 16, f16 24.
int key_bits(DType dtype) { return dtype == DType::f32 ? 32 : dtype == DType::f16 ? 24 : 16; }
int phases(const Params& p) { return MOJO_SAMPLE_PHASES(key_bits(p.dtype("dtype"))); }
// A row's counters (sampling_args.h).
std::size_t row_words(const Params& p) { return MOJO_SAMPLE_ROW_WORDS(key_bits(p.dtype("dtype"))); }
bool is_cooperative(const Params& p) { return p.get("cooperative") != 0; }

// sample's workspace, per row: the chunks' slots (histograms, kept masses) in two buffers, top-k's
// candidates (a thread's worth), the chunks' stats, the state, and the counters of a launch a phase (the
// cooperative launch's are sync words).
struct SampleWorkspace {
  std::size_t candidates, stats, states, counters, bytes;
  explicit SampleWorkspace(std::int64_t batch, const Params& p) {
    const auto align = [](std::size_t n) { return (n + 255) / 256 * 256; };
    const auto rows = std::size_t(batch), chunks = std::size_t(p.get("chunks"));
    candidates = align(rows * 2 * chunks * mojo_sampling::kSlot * sizeof(std::uint64_t));
    stats = candidates + align(rows * std::size_t(p.get("threads")) * sizeof(std::uint64_t));
    states = stats + align(rows * chunks * 2 * sizeof(float));
    counters = states + align(rows * sizeof(mojo_sampling::RowState));
    bytes = counters + (is_cooperative(p) ? 0 : align(rows * row_words(p) * sizeof(unsigned)));
  }
};

class Sample final : public OpDef {
  // Its tensors' places in kSampleTensors.
  static constexpr std::size_t kTokens = slot(kSampleTensors, "tokens");
  static constexpr std::size_t kLogprobs = slot(kSampleTensors, "logprobs");
  static constexpr std::size_t kLogits = slot(kSampleTensors, "logits");
  static constexpr std::size_t kTopK = slot(kSampleTensors, "top_k");
  static constexpr std::size_t kTopP = slot(kSampleTensors, "top_p");
  static constexpr std::size_t kMinP = slot(kSampleTensors, "min_p");
  static constexpr std::size_t kSeed = slot(kSampleTensors, "seed");
  static constexpr std::size_t kOffset = slot(kSampleTensors, "offset");

 public:
  Sample() : OpDef(kSample) {}

  Params derive_params(TensorList t, ScalarList scalars, const Target& target) const override {
    const TensorSpec& logits = t[kLogits].spec;
    checks::expect_dtype_in(name(), "logits", logits.dtype(), kFloatTypes);
    rows_of(name(), "logits", logits);
    const std::int64_t batch = logits.dim(0), vocab = logits.dim(1);
    checks::expect_exact(name(), "tokens", t[kTokens].spec, {batch}, kI64);
    if (t[kLogprobs].spec.rank() != 0) checks::expect_exact(name(), "logprobs", t[kLogprobs].spec, {batch}, kF32);
    checks::expect_exact(name(), "top_k", t[kTopK].spec, {batch}, indices::kTypes);
    checks::expect_exact(name(), "top_p", t[kTopP].spec, {batch}, kF32);
    checks::expect_exact(name(), "min_p", t[kMinP].spec, {batch}, kF32);
    checks::expect_exact(name(), "seed", t[kSeed].spec, {batch}, kI64);
    checks::expect_exact(name(), "offset", t[kOffset].spec, {batch}, kI64);
    const std::int64_t vec = rows::pick(vocab, logits.dtype(), {t[kLogits]}).vec;
    rows::Chunking chunking = rows::chunk(batch, vocab, vec, target);
    // A small batch's time is mostly the launches, one after another (10 of them for f32): the H200 measured
    // 58 µs for one f32 row (2026-11-27), 5.8 µs a launch, for 0.6 MB of logits.
    const bool cooperative = rows::cooperative(*this, scalars, batch, vocab, vec, target, chunking);
    if (batch > INT32_MAX / chunking.chunks)
      throw ShapeError(fmt::format("{}: logits has more rows than the grid can take", name()));
    Params p;
    p.add_dtype("dtype", logits.dtype());
    p.add_dtype("index", t[kTopK].spec.dtype());
    p.add("vocab", vocab);
    p.add("vec", vec);
    p.add("chunks", chunking.chunks);
    p.add("threads", chunking.threads);
    p.add("cooperative", cooperative ? 1 : 0);
    return p;
  }

  // Every phase in one cooperative launch, or one kernel launched once per phase (the repeat is the phase).
  std::string entry_macro(const Params& p) const override {
    return is_cooperative(p) ? "MOJO_KERNEL_sample_cooperative" : OpDef::entry_macro(p);
  }
  std::int64_t repeats(const Params& p, TensorList) const override { return is_cooperative(p) ? 1 : phases(p); }
  std::size_t workspace_bytes(const Params& p, TensorList t) const override {
    return SampleWorkspace(t[kLogits].spec.dim(0), p).bytes;
  }
  std::size_t sync_words(const Params& p, TensorList t) const override {
    return is_cooperative(p) ? std::size_t(t[kLogits].spec.dim(0)) * row_words(p) : 0;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    LaunchGeometry g = one_block_per_row(t[kLogits].spec.dim(0), p);
    g.grid.x *= unsigned(p.get("chunks"));
    g.cooperative = is_cooperative(p);
    return g;
  }

  void pack_args(const Params& p, TensorList t, ScalarList, const Workspace& workspace,
                 KernelArgs& args) const override {
    checks::expect_pointer(name(), "logits", t[kLogits], checks::vector_bytes(p));
    for (std::size_t i = 0; i < t.size(); ++i)
      if (i != kLogits && !(i == kLogprobs && t[kLogprobs].spec.rank() == 0))
        checks::expect_pointer(name(), kSampleTensors[i].name, t[i], unsigned(dtype_size(t[i].spec.dtype())));
    const SampleWorkspace w(t[kLogits].spec.dim(0), p);
    args.push_args(mojo_sampling::SampleArgs<void, void>{
        .tokens = static_cast<long long*>(ptr(t[kTokens])),
        .logprobs = t[kLogprobs].spec.rank() == 0 ? nullptr : ptr<float>(t[kLogprobs]),
        .logits = ptr(t[kLogits]),
        .stride = t[kLogits].spec.stride(0),
        .top_k = ptr(t[kTopK]),
        .top_p = ptr<float>(t[kTopP]),
        .min_p = ptr<float>(t[kMinP]),
        .seed = static_cast<const long long*>(ptr(t[kSeed])),
        .offset = static_cast<long long*>(ptr(t[kOffset])),
        .partials = ptr<unsigned long long>(workspace.scratch),
        .candidates = ptr<unsigned long long>(workspace.scratch + w.candidates),
        .stats = ptr<float>(workspace.scratch + w.stats),
        .states = ptr<mojo_sampling::RowState>(workspace.scratch + w.states),
        .counters = ptr<unsigned>(is_cooperative(p) ? workspace.sync : workspace.scratch + w.counters),
        .phase = int(p.get_or("repeat", 0)),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    const std::vector<std::int64_t> k = indices::read(t[kTopK], stream);
    for (std::size_t r = 0; r < k.size(); ++r)
      if (k[r] < 0)
        throw InvalidArgumentError(fmt::format("{}: top_k[{}] = {}; expected >= 0 (0: no top-k)", name(), r, k[r]));
    check_values(name(), "top_p", t[kTopP], stream, "a value in (0, 1]", [](float v) { return v > 0 && v <= 1; });
    check_values(name(), "min_p", t[kMinP], stream, "a value in [0, 1]", [](float v) { return v >= 0 && v <= 1; });
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& logits = shapes::required(name(), shapes, "logits", example_shapes());
    const TensorSpec ints(DType::i64, {logits.front()}), floats(DType::f32, {logits.front()});
    return {ints, floats, TensorSpec(dtype, logits), ints, floats, floats, ints, ints};
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
  // Its tensors' places in kRejectTensors.
  static constexpr std::size_t kOut = slot(kRejectTensors, "out");
  static constexpr std::size_t kAccepted = slot(kRejectTensors, "accepted");
  static constexpr std::size_t kDraftTokens = slot(kRejectTensors, "draft_tokens");
  static constexpr std::size_t kDraftProbs = slot(kRejectTensors, "draft_probs");
  static constexpr std::size_t kTargetProbs = slot(kRejectTensors, "target_probs");
  static constexpr std::size_t kSeed = slot(kRejectTensors, "seed");
  static constexpr std::size_t kOffset = slot(kRejectTensors, "offset");

 public:
  RejectSample() : OpDef(kReject) {}

  Params derive_params(TensorList t, ScalarList, const Target&) const override {
    const TensorSpec& target = t[kTargetProbs].spec;
    checks::expect_dtype_in(name(), "target_probs", target.dtype(), kFloatTypes);
    if (target.rank() != 3 || target.dim(1) < 2 || target.dim(2) < 1 || target.dim(2) > kMaxVocab ||
        !target.is_contiguous() ||
        target.dim(0) > INT32_MAX)
      throw ShapeError(
          fmt::format("{}: target_probs is {}; expected a contiguous [batch, spec + 1, vocab] with spec "
                      ">= 1 and 1 <= vocab <= {}",
                      name(), target.str(), kMaxVocab));
    const std::int64_t batch = target.dim(0), spec = target.dim(1) - 1, vocab = target.dim(2);
    if (spec > 32) throw ShapeError(fmt::format("{}: {} speculative tokens; at most 32", name(), spec));
    checks::expect_same_dtype(name(), "draft_probs", t[kDraftProbs].spec, "target_probs", target);
    checks::expect_exact(name(), "draft_probs", t[kDraftProbs].spec, {batch, spec, vocab}, kFloatTypes);
    checks::expect_exact(name(), "out", t[kOut].spec, {batch, spec + 1}, kI64);
    checks::expect_exact(name(), "accepted", t[kAccepted].spec, {batch}, kI64);
    checks::expect_exact(name(), "draft_tokens", t[kDraftTokens].spec, {batch, spec}, indices::kTypes);
    checks::expect_exact(name(), "seed", t[kSeed].spec, {batch}, kI64);
    checks::expect_exact(name(), "offset", t[kOffset].spec, {batch}, kI64);
    Params p;
    p.add_dtype("dtype", target.dtype());
    p.add_dtype("index", t[kDraftTokens].spec.dtype());
    add_row_params(p, vocab, target.dtype(), {});
    p.add("spec", spec);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    return one_block_per_row(t[kTargetProbs].spec.dim(0), p);
  }

  void pack_args(const Params&, TensorList t, ScalarList, const Workspace&, KernelArgs& args) const override {
    for (std::size_t i = 0; i < t.size(); ++i)
      checks::expect_pointer(name(), kRejectTensors[i].name, t[i], unsigned(dtype_size(t[i].spec.dtype())));
    args.push_args(mojo_sampling::RejectArgs<void, void>{
        .out = static_cast<long long*>(ptr(t[kOut])),
        .accepted = static_cast<long long*>(ptr(t[kAccepted])),
        .draft_tokens = ptr(t[kDraftTokens]),
        .draft_probs = ptr(t[kDraftProbs]),
        .target_probs = ptr(t[kTargetProbs]),
        .seed = static_cast<const long long*>(ptr(t[kSeed])),
        .offset = static_cast<long long*>(ptr(t[kOffset])),
    });
  }

  void check_data(TensorList t, ScalarList, StreamHandle stream) const override {
    indices::check_range(name(), "draft_tokens", t[kDraftTokens], t[kTargetProbs].spec.dim(2), false, stream);
  }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& target = shapes::required(name(), shapes, "target_probs", example_shapes());
    if (target.size() != 3 || target[1] < 2)
      throw ShapeError(fmt::format("{}: give target_probs as BATCHxSPEC+1xVOCAB, SPEC at least 1", name()));
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
