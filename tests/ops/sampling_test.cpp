// Sampling (sample, apply_penalties_temperature, reject_sample): Philox
// against its published answers; the device against the sort-based
// reference token for token; the drawn distributions against the filtered
// softmax by a chi-square over many draws with fixed seeds; reproducibility
// whatever the batch and the split of a row over blocks, on rows of tied,
// spiked and non-finite values; errors, typed and one line, and the debug
// checks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "mojo/perf_model.hpp"
#include "op_test_util.hpp"
#include "sampling_args.h"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

namespace {

// Random123's known-answer vectors for philox4x32-10 (kat_vectors).
TEST(Philox, MatchesThePublishedAnswers) {
  EXPECT_EQ(reference::philox4x32_10({0, 0, 0, 0}, 0, 0),
            (std::array<std::uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(reference::philox4x32_10({~0u, ~0u, ~0u, ~0u}, ~0u, ~0u),
            (std::array<std::uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(reference::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0),
            (std::array<std::uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// The 99.9% quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty).
double chi_square_limit(int df) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + 3.090 * std::sqrt(a), 3);
}

// Pearson's statistic of `counts` against probabilities `expected` (bins of expected count < 5 merged).
struct ChiSquare {
  double statistic = 0;
  int df = -1;
};
ChiSquare chi_square(const std::vector<std::int64_t>& counts, const std::vector<double>& expected) {
  const double n = double(std::accumulate(counts.begin(), counts.end(), std::int64_t(0)));
  ChiSquare c;
  double pooled_count = 0, pooled_expected = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    pooled_count += double(counts[i]);
    pooled_expected += expected[i] * n;
    if (pooled_expected < 5) continue;
    c.statistic += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
    ++c.df;
    pooled_count = pooled_expected = 0;
  }
  if (pooled_expected > 0)
    c.statistic +=
        (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / std::max(pooled_expected, 1e-12);
  return c;
}

std::vector<double> normalized(std::vector<double> w) {
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= total;
  return w;
}

// One launch of `sample` with every request's parameters given.
struct SampleBatch {
  std::int64_t vocab = 0;
  std::vector<float> logits;  // [batch, vocab]
  std::vector<std::int64_t> top_k, seed, offset;
  std::vector<float> top_p, min_p;
  std::int64_t batch() const { return std::int64_t(top_k.size()); }
  void add(const std::vector<float>& row, std::int64_t k, float p, float mp, std::int64_t s, std::int64_t o) {
    logits.insert(logits.end(), row.begin(), row.end());
    top_k.push_back(k), top_p.push_back(p), min_p.push_back(mp), seed.push_back(s), offset.push_back(o);
  }
};
struct Sampled {
  std::vector<std::int64_t> tokens, offsets;
  std::vector<float> logprobs;
};

Sampled run_sample(Runtime& rt, DType dtype, const SampleBatch& b, ScalarList scalars = {}) {
  const std::int64_t n = b.batch();
  const TensorSpec ints(DType::i64, {n}), floats(DType::f32, {n});
  GpuTensor tokens(ints), logprobs(floats), logits(TensorSpec(dtype, {n, b.vocab}), reference::encode(dtype, b.logits)),
      k(ints, test::index_bytes(DType::i64, b.top_k)), p(floats, reference::encode(DType::f32, b.top_p)),
      mp(floats, reference::encode(DType::f32, b.min_p)), seed(ints, test::index_bytes(DType::i64, b.seed)),
      offset(ints, test::index_bytes(DType::i64, b.offset));
  rt.launch("sample", {tokens, logprobs, logits, k, p, mp, seed, offset}, scalars);
  rt.device().synchronize();
  return {indices::decode(DType::i64, tokens.read()), indices::decode(DType::i64, offset.read()),
          reference::decode(DType::f32, logprobs.read())};
}

std::vector<float> normal_logits(std::int64_t vocab, std::uint32_t seed, float sigma = 3.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, sigma);
  std::vector<float> v(static_cast<std::size_t>(vocab));
  for (float& x : v) x = n(rng);
  return v;
}

// The logits as the device sees them: rounded to the dtype.
std::vector<float> rounded(DType dtype, const std::vector<float>& v) {
  return reference::decode(dtype, reference::encode(dtype, v));
}

}  // namespace

TEST(SampleOp, ParamsAndShapeErrors) {
  // A row over several blocks: about two per SM of the target's GPU (132 on sm_90a), at most 32, none
  // under 1024 tokens; a phase per digit of the order keys (bf16 16 bits, f16 24, f32 32), twice, and 2 more.
  // Phases 1.. in one cooperative launch where the grid fits on half the SMs (66 blocks on sm_90a).
  EXPECT_EQ(params("sample", DType::bf16, "logits=256x151936").str(),
            "dtype=bf16 index=i64 vocab=151936 vec=8 chunks=2 threads=512 cooperative=0");
  EXPECT_EQ(params("sample", DType::f32, "logits=1x151936").str(),
            "dtype=f32 index=i64 vocab=151936 vec=4 chunks=32 threads=256 cooperative=1");
  EXPECT_EQ(params("sample", DType::f32, "logits=2x151936").str(),
            "dtype=f32 index=i64 vocab=151936 vec=4 chunks=32 threads=256 cooperative=1");
  EXPECT_EQ(params("sample", DType::f32, "logits=3x151936").str(),
            "dtype=f32 index=i64 vocab=151936 vec=4 chunks=32 threads=256 cooperative=0");
  EXPECT_EQ(params("sample", DType::f16, "logits=3x4097").str(),
            "dtype=f16 index=i64 vocab=4097 vec=1 chunks=5 threads=128 cooperative=1");
  // The scalar picks a plan (an A/B on one machine): 0, a launch a phase; 1, one cooperative launch up to the SMs,
  // with fewer blocks a row where the rule's would not fit on them (5 rows of 26 on sm_90's 132; 100 of 1).
  EXPECT_EQ(params("sample", DType::f32, "logits=1x151936", {{"cooperative", 0}}).get("cooperative"), 0);
  EXPECT_EQ(params("sample", DType::f32, "logits=4x151936", {{"cooperative", 1}}).get("cooperative"), 1);
  EXPECT_EQ(params("sample", DType::f32, "logits=5x151936", {{"cooperative", 1}}).str(),
            "dtype=f32 index=i64 vocab=151936 vec=4 chunks=26 threads=256 cooperative=1");
  EXPECT_EQ(params("sample", DType::bf16, "logits=100x151936", {{"cooperative", 1}}).str(),
            "dtype=bf16 index=i64 vocab=151936 vec=8 chunks=1 threads=512 cooperative=1");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("sample", DType::f32, "logits=133x151936", {{"cooperative", 1}});
            }),
            "sample: cooperative = 1 needs every block resident at once, one a row at the least: 133 rows; sm_90 has "
            "132 SMs");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("sample", DType::f32, "logits=1x1000", {{"cooperative", 2}});
            }),
            "sample: cooperative is 2; expected -1 (the heuristic's choice), 0 or 1");
  {
    const OpDef& op = find_op("sample");
    const std::vector<Tensor> t = example(op, DType::f32, "logits=1x151936");
    const Params p = op.specialize(t, {}, kSm90);
    EXPECT_EQ(op.repeats(p, t), 1) << "a batch of one: one launch, not ten";
    ASSERT_EQ(op.plan(p).size(), 1u);
    const LaunchGeometry g = op.geometry(p, t);
    EXPECT_EQ(g.grid.x, 32u) << "a batch of one spreads over 32 blocks";
    EXPECT_TRUE(g.cooperative) << "every phase in one cooperative launch";
    EXPECT_EQ(op.entry_macro(p), "MOJO_KERNEL_sample_cooperative");
    EXPECT_EQ(op.sync_words(p, t), std::size_t(MOJO_SAMPLE_ROW_WORDS(32)))
        << "the row's counters are sync words, which no kernel of the launch has to clear";
    for (const auto& [dtype, phases] : {std::pair{DType::f32, 10}, {DType::f16, 8}, {DType::bf16, 6}}) {
      const std::vector<Tensor> batch = example(op, dtype, "logits=256x1000");
      const Params many = op.specialize(batch, {}, kSm90);
      EXPECT_EQ(op.repeats(many, batch), phases) << dtype_name(dtype) << ": the launches do not depend on the values";
      EXPECT_EQ(op.plan(many).size(), 1u);
      EXPECT_FALSE(op.geometry(many, batch).cooperative);
      EXPECT_EQ(op.sync_words(many, batch), 0u) << "phase 0 clears the counters, in the workspace";
    }
  }
  EXPECT_EQ(params("apply_penalties_temperature", DType::f32, "logits=4x1000 token_ids=4x16").str(),
            "dtype=f32 index=i64 vocab=1000 vec=4 threads=64 blocks=1");
  // A batch of one still spreads its temperature step over 10 blocks; the penalties take one.
  EXPECT_EQ(params("apply_penalties_temperature", DType::f32, "logits=1x151936 token_ids=1x1024").str(),
            "dtype=f32 index=i64 vocab=151936 vec=4 threads=1024 blocks=10");
  EXPECT_EQ(params("reject_sample", DType::f32, "target_probs=4x3x1000").str(),
            "dtype=f32 index=i64 vocab=1000 vec=4 threads=64 spec=2");
  const OpDef& op = find_op("sample");
  std::vector<Tensor> t = example(op, DType::f32, "logits=4x1000");
  t[2].spec = TensorSpec(DType::f32, {4, 300000});
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(t, {}, kSm90); }),
            "sample: logits is f32[4, 300000]; expected [batch, vocab] with 1 <= vocab <= 262144 and unit stride in "
            "vocab");
  t = example(op, DType::f32, "logits=4x1000");
  t[4].spec = TensorSpec(DType::f16, {4});
  EXPECT_EQ(error_of<DTypeError>([&] { op.specialize(t, {}, kSm90); }), "sample: top_p has dtype f16; supported: f32");
  t = example(op, DType::f32, "logits=4x1000");
  t[6].spec = TensorSpec(DType::i64, {3});
  EXPECT_EQ(error_of<ShapeError>([&] { op.specialize(t, {}, kSm90); }),
            "sample: seed is i64[3]; expected a contiguous [4]");
}

// More rows than a wave holds (two blocks an SM): each row is split where its blocks then take fewer waves of
// shorter blocks, so that the modelled time, ceil(blocks / slots) waves of 1/chunks of a row, stays within 1.25x
// of the rows' even share of the slots. With a block a row, B = slots + 1 took 2x (sm_80's B 256: 1.69x).
TEST(SampleOp, RowsPastAWaveAreSplitWhereTheWavesThenTakeLessTime) {
  const OpDef& op = find_op("sample");
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = Target::parse(arch);
    const std::int64_t slots = 2 * sm_limits(target).sm_count;
    for (std::int64_t batch : {slots + 1, std::int64_t(256), std::int64_t(300), slots * 2 - 1, std::int64_t(1000)}) {
      SCOPED_TRACE(fmt::format("{} B {}", arch, batch));
      const auto t = example(op, DType::f32, fmt::format("logits={}x151936", batch));
      const Params p = op.specialize(t, {}, target);
      const std::int64_t chunks = p.get("chunks"), blocks = op.geometry(p, t).grid.x;
      ASSERT_EQ(blocks, batch * chunks);
      const double time = double((blocks + slots - 1) / slots) / double(chunks), even = double(batch) / double(slots);
      EXPECT_LE(time, 1.25 * even) << chunks << " chunks";
    }
  }
  EXPECT_EQ(params("sample", DType::f32, "logits=512x151936").get("chunks"), 1) << "sm_90: one wave of 528 slots";
  const auto thousand = example(op, DType::f32, "logits=1000x151936");
  EXPECT_EQ(op.specialize(thousand, {}, Target::parse("sm_80")).get("chunks"), 1)
      << "3 chunks would take 4.67 waves' time for 5: not the tenth a split must save";
}

TEST(SampleOp, PacksOneArgsStruct) {
  using Args = mojo_sampling::SampleArgs<void, void>;
  const OpDef& op = find_op("sample");
  std::vector<Tensor> t = example(op, DType::f32, "logits=4x1000");
  for (std::size_t i = 0; i < t.size(); ++i) t[i].data = DevicePtr(i + 1) << 20;
  KernelArgs a;
  op.pack_args(op.specialize(t, {}, kSm90), t, {}, {}, a);
  const auto& args = packed<Args>(a);
  EXPECT_EQ(args.tokens, ptr(DevicePtr(1) << 20));
  EXPECT_EQ(args.logprobs, ptr(DevicePtr(2) << 20));
  EXPECT_EQ(args.logits, ptr(DevicePtr(3) << 20));
  EXPECT_EQ(args.stride, 1000);
  EXPECT_EQ(args.top_k, ptr(DevicePtr(4) << 20));
  EXPECT_EQ(args.seed, ptr(DevicePtr(7) << 20));
  EXPECT_EQ(args.offset, ptr(DevicePtr(8) << 20));
  t[1] = Tensor{};
  KernelArgs b;
  op.pack_args(op.specialize(t, {}, kSm90), t, {}, {}, b);
  EXPECT_EQ(packed<Args>(b).logprobs, nullptr) << "no logprobs wanted";
}

// A launch a phase plans its grid for two blocks of 512 threads an SM (rows::chunk: one wave from 16 to 128
// rows), and its kernel asks ptxas for them: left alone, ptxas gave NVRTC's f32 kernel at B 32 98 registers (one
// block an SM, 2.18 waves) and held others to 64 by spilling (bf16 B 64: 64 bytes). sm_90a, each compiler.
TEST(SampleCompiles, ALaunchAPhaseHoldsTheBlocksItsGridIsPlannedForWithoutSpills) {
  test::TempDir cache;
  const Target target = Target::parse("sm_90a");
  const SmLimits limits = sm_limits(target);
  const OpDef& op = find_op("sample");
  for (const std::string& compiler : test::compilers()) {
    RuntimeOptions o;
    o.cache_dir = cache.path();
    o.compiler = compiler;
    Runtime rt(o);
    for (const auto& [dtype, batch] : {std::pair{DType::f32, 32}, {DType::bf16, 64}}) {
      SCOPED_TRACE(fmt::format("{} {} B {}", compiler, dtype_name(dtype), batch));
      const std::vector<Tensor> t = example(op, dtype, fmt::format("logits={}x151936", batch));
      const Params p = op.specialize(t, {}, target);
      const LaunchGeometry g = op.geometry(p, t);
      ASSERT_FALSE(g.cooperative);
      ASSERT_EQ(g.block.x, 512u);
      EXPECT_LE(g.grid.x, 2u * unsigned(limits.sm_count)) << "the grid fits one wave at two blocks an SM";
      const Artifact art = rt.compile("sample", t, {}, target, Emit::cubin);
      const KernelResources r = kernel_resources(*art.binary, op.kernel_name(p));
      EXPECT_EQ(r.stack_bytes, 0u) << r.registers << " registers";
      EXPECT_GE(
          occupancy(limits, g.block.x, r.registers, r.static_shared_bytes, g.grid.x, limits.sm_count).blocks_per_sm, 2)
          << r.registers << " registers";
    }
  }
}

struct SamplingGpu : GpuOps {};

// Every filter alone and together, each dtype, vocabularies that do and do
// not divide a vector: the token the reference draws with the same uniform.
TEST_P(SamplingGpu, TokensMatchTheSortingReference) {
  for (DType dtype : kFloatTypes)
    for (std::int64_t vocab : {1000, 4097, 151936}) {  // Qwen3's: draw's second level sums 5 tokens a thread
      SCOPED_TRACE(fmt::format("{} vocab {}", dtype_name(dtype), vocab));
      SampleBatch b;
      b.vocab = vocab;
      const struct {
        std::int64_t k;
        float p, min_p;
      } filters[] = {{0, 1.f, 0.f},   {1, 1.f, 0.f},     {50, 1.f, 0.f},      {0, 0.8f, 0.f}, {0, 1.f, 0.05f},
                     {20, 0.9f, 0.f}, {40, 0.5f, 0.02f}, {vocab, 0.99f, 0.f}, {3, 0.01f, 0.f}, {30, 1.f, 0.1f}};
      for (std::size_t f = 0; f < std::size(filters); ++f)
        for (int rep = 0; rep < 3; ++rep)
          b.add(normal_logits(vocab, std::uint32_t(f * 10 + rep)), filters[f].k, filters[f].p, filters[f].min_p,
                std::int64_t(f * 1000 + rep) << 33, std::int64_t(rep * 7));
      const Sampled got = run_sample(*rt, dtype, b);
      for (std::int64_t r = 0; r < b.batch(); ++r) {
        const std::size_t ri = std::size_t(r);
        const std::vector<float> row =
            rounded(dtype, {b.logits.begin() + r * vocab, b.logits.begin() + (r + 1) * vocab});
        const auto w = reference::sampling_weights(row, b.top_k[ri], b.top_p[ri], b.min_p[ri]);
        const std::int64_t want =
            reference::inverse_cdf(w, reference::random24(b.seed[ri], b.offset[ri], 0), b.top_k[ri] == 1);
        EXPECT_EQ(got.tokens[ri], want) << "row " << r;
        EXPECT_EQ(got.offsets[ri], b.offset[ri] + 1) << "each call advances the request's offset by one";
        if (b.top_k[ri] == 1)
          EXPECT_EQ(got.tokens[ri], std::max_element(row.begin(), row.end()) - row.begin()) << "greedy: the argmax";
      }
    }
}

// Rows whose values break a select that branches on the data: all equal, two
// tied values, one spike, -inf and NaN among finite values, no finite value,
// the largest finite floats, a few distinct values above many ties. The same
// token as the sorting reference under every filter, with the row split into
// 5, 4, 3, 2 and 1 chunks (the batch sets the split; a batch of one runs its
// phases in one cooperative launch, and again a launch a phase as the other
// batches do, so each kind of row and filter goes through both). The launches are the
// same whatever the values (the test above); a top-k row finishes in top-k's
// last merge when its survivors fit the block, else (ties with the k-th) in
// the phase after, with the ties as one weight; only top-k beyond the block's
// threads (k 600 here) takes top-p's and the draw's phases.
TEST_P(SamplingGpu, WorstCaseRowsMatchTheReferenceWhateverTheSplit) {
  const std::int64_t vocab = 4097;
  std::vector<std::vector<float>> rows;
  rows.push_back(std::vector<float>(std::size_t(vocab), 0.5f));  // all equal
  std::vector<float> v = normal_logits(vocab, 11);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? 2.f : -1.f;  // two values, tied in thirds
  rows.push_back(v);
  v = std::vector<float>(std::size_t(vocab), -3.f);
  v[2222] = 40.f;  // one spike
  rows.push_back(v);
  v = normal_logits(vocab, 12);
  for (std::size_t i = 0; i < v.size(); i += 5) v[i] = -INFINITY;
  v[7] = NAN;
  rows.push_back(v);
  rows.push_back(std::vector<float>(std::size_t(vocab), -INFINITY));  // no finite logit: token -1
  v = normal_logits(vocab, 13);
  v[100] = 3.0e38f, v[4000] = -3.0e38f;
  rows.push_back(v);
  // 40 distinct values above 2049 ties: top-p 0.9 keeps the ties only when it weighs them all (their mass
  // is ~15x the 40's), min-p 0.5 drops them.
  v = std::vector<float>(std::size_t(vocab), -5.f);
  for (std::size_t i = 0; i < v.size(); i += 2) v[i] = 0.f;
  for (std::size_t j = 0; j < 40; ++j) v[j * 100 + 1] = 1.f + 0.01f * float(j);
  rows.push_back(v);
  const struct {
    std::int64_t k;
    float p, min_p;
  } filters[] = {{0, 1.f, 0.f}, {1, 1.f, 0.f}, {50, 0.9f, 0.f}, {0, 0.5f, 0.1f}, {60, 0.95f, 0.5f}, {600, 0.9f, 0.f}};
  // With debug checks, which also read the cooperative launch's sync words back: every way a row can end (its
  // token written early, phases skipped) must leave them zero.
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  for (DType dtype : {DType::f32, DType::bf16})
    for (const auto& [batch, chunks] : {std::pair<std::int64_t, std::int64_t>{1, 5}, {66, 4}, {88, 3}, {132, 2}, {264, 1}}) {
      if (dtype == DType::bf16 && chunks % 2 == 0) continue;  // f32's keys have the most digits; bf16 at 5, 3, 1
      SCOPED_TRACE(fmt::format("{} batch {}", dtype_name(dtype), batch));
      const Params p = params("sample", dtype, fmt::format("logits={}x{}", batch, vocab));
      ASSERT_EQ(p.get("chunks"), chunks);
      ASSERT_EQ(p.get("cooperative"), batch == 1 ? 1 : 0);
      const std::int64_t combos = std::int64_t(rows.size() * std::size(filters));
      for (std::int64_t first = 0; first < combos; first += batch) {  // every combination, batch by batch
        SampleBatch b;
        b.vocab = vocab;
        for (std::int64_t r = first; r < first + batch; ++r) {
          const std::size_t combo = std::size_t(r % combos);
          const auto& f = filters[combo / rows.size()];
          b.add(rows[combo % rows.size()], f.k, f.p, f.min_p, 77 + r % 7, r % 5);
        }
        const Sampled got = run_sample(checked, dtype, b);
        if (batch == 1)
          EXPECT_EQ(run_sample(*rt, dtype, b, {{"cooperative", 0}}).tokens, got.tokens) << "a launch a phase";
        if (batch == 66)  // past the rule: forced, its rows over fewer blocks so that the grid fits on the SMs
          EXPECT_EQ(run_sample(checked, dtype, b, {{"cooperative", 1}}).tokens, got.tokens) << "one cooperative launch";
        for (std::int64_t r = 0; r < batch; ++r) {
          const std::size_t ri = std::size_t(r), combo = std::size_t((first + r) % combos);
          const std::vector<float> row =
              rounded(dtype, {b.logits.begin() + r * vocab, b.logits.begin() + (r + 1) * vocab});
          const auto w = reference::sampling_weights(row, b.top_k[ri], b.top_p[ri], b.min_p[ri]);
          ASSERT_EQ(got.tokens[ri],
                    reference::inverse_cdf(w, reference::random24(b.seed[ri], b.offset[ri], 0), b.top_k[ri] == 1))
              << "row " << first + r << " (kind " << combo % rows.size() << ", filter " << combo / rows.size() << ")";
          EXPECT_EQ(got.offsets[ri], b.offset[ri] + 1);
        }
      }
    }
}

// A row's token depends on its seed and offset alone: the same alone as in a batch, and on every run.
TEST_P(SamplingGpu, TheSameSeedGivesTheSameTokenWhateverTheBatch) {
  SampleBatch b;
  b.vocab = 2000;
  for (int r = 0; r < 9; ++r) b.add(normal_logits(b.vocab, 100 + r), r % 3 == 0 ? 0 : 30, 0.9f, 0.f, 42 + r, 1000 * r);
  const Sampled all = run_sample(*rt, DType::bf16, b);
  EXPECT_EQ(run_sample(*rt, DType::bf16, b).tokens, all.tokens) << "bit-identical on a second run";
  for (int r : {0, 4, 8}) {
    SampleBatch one;
    one.vocab = b.vocab;
    one.add({b.logits.begin() + r * b.vocab, b.logits.begin() + (r + 1) * b.vocab}, b.top_k[r], b.top_p[r], 0.f,
            b.seed[r], b.offset[r]);
    EXPECT_EQ(run_sample(*rt, DType::bf16, one).tokens[0], all.tokens[std::size_t(r)]) << "row " << r;
  }
}

// Many draws of one distribution (one request per offset) against softmax
// after each filter: top-k, top-p, min-p, all three, and none.
TEST_P(SamplingGpu, DrawsFollowTheFilteredDistribution) {
  const std::int64_t vocab = 64, draws = 6000;
  const std::vector<float> logits = normal_logits(vocab, 7, 1.5f);
  const struct {
    std::int64_t k;
    float p, min_p;
  } filters[] = {{0, 1.f, 0.f}, {10, 1.f, 0.f}, {0, 0.7f, 0.f}, {0, 1.f, 0.1f}, {24, 0.9f, 0.02f}};
  for (const auto& f : filters) {
    SCOPED_TRACE(fmt::format("top_k {} top_p {} min_p {}", f.k, f.p, f.min_p));
    SampleBatch b;
    b.vocab = vocab;
    for (std::int64_t i = 0; i < draws; ++i) b.add(logits, f.k, f.p, f.min_p, 1234, i);
    const Sampled got = run_sample(*rt, DType::f32, b);
    const std::vector<double> expected = normalized(reference::sampling_weights(logits, f.k, f.p, f.min_p));
    std::vector<std::int64_t> counts(std::size_t(vocab), 0);
    for (std::int64_t t : got.tokens) {
      ASSERT_TRUE(t >= 0 && t < vocab) << t;
      EXPECT_GT(expected[std::size_t(t)], 0.0) << "token " << t << " was filtered out";
      ++counts[std::size_t(t)];
    }
    const ChiSquare c = chi_square(counts, expected);
    ASSERT_GT(c.df, 0);
    EXPECT_LT(c.statistic, chi_square_limit(c.df)) << c.df << " degrees of freedom";
  }
}

// Captured once in a CUDA graph, each replay draws the next token of every request: the kernel advances the
// offsets on the device, so nothing on the host changes between replays. 4 rows run phases 1.. in one cooperative
// launch, 70 a launch a phase.
TEST_P(SamplingGpu, EachGraphReplayDrawsTheNextNumbers) {
  for (const int rows : {4, 70}) {
    SCOPED_TRACE(fmt::format("{} rows", rows));
    SampleBatch b;
    b.vocab = 500;
    for (int r = 0; r < rows; ++r) b.add(normal_logits(b.vocab, 40 + r), 0, 1.f, 0.f, 7 + r, 100);
    const std::int64_t n = b.batch();
    ASSERT_EQ(params("sample", DType::f32, fmt::format("logits={}x500", n)).get("cooperative"), rows == 4 ? 1 : 0);
    const TensorSpec ints(DType::i64, {n}), floats(DType::f32, {n});
    GpuTensor tokens(ints), logits(TensorSpec(DType::f32, {n, b.vocab}), reference::encode(DType::f32, b.logits)),
        k(ints, test::index_bytes(DType::i64, b.top_k)), p(floats, reference::encode(DType::f32, b.top_p)),
        mp(floats, reference::encode(DType::f32, b.min_p)), seed(ints, test::index_bytes(DType::i64, b.seed)),
        offset(ints, test::index_bytes(DType::i64, b.offset));
    Stream stream;
    Graph g = Graph::capture(stream, [&] {
      rt->launch("sample", {tokens, Tensor{}, logits, k, p, mp, seed, offset}, {}, stream);
    });
    for (std::int64_t replay = 0; replay < 3; ++replay) {
      g.launch(stream);
      stream.synchronize();
      const std::vector<std::int64_t> got = indices::decode(DType::i64, tokens.read());
      for (std::size_t r = 0; r < std::size_t(n); ++r) {
        const std::vector<float> row(b.logits.begin() + std::int64_t(r) * b.vocab,
                                     b.logits.begin() + std::int64_t(r + 1) * b.vocab);
        const auto w = reference::sampling_weights(row, 0, 1.0, 0.0);
        EXPECT_EQ(got[r], reference::inverse_cdf(w, reference::random24(b.seed[r], 100 + replay, 0), false))
            << "replay " << replay << " row " << r;
      }
    }
    EXPECT_EQ(indices::decode(DType::i64, offset.read()), (std::vector<std::int64_t>(std::size_t(n), 103)));
  }
}

TEST_P(SamplingGpu, LogprobsAreTheLogSoftmaxAtTheToken) {
  SampleBatch b;
  b.vocab = 3000;
  for (int r = 0; r < 5; ++r) b.add(normal_logits(b.vocab, 300 + r), 10, 0.9f, 0.f, r, r);
  const Sampled got = run_sample(*rt, DType::f32, b);
  for (std::size_t r = 0; r < 5; ++r) {
    const float* row = b.logits.data() + r * std::size_t(b.vocab);
    double max = *std::max_element(row, row + b.vocab), sum = 0;
    for (std::int64_t i = 0; i < b.vocab; ++i) sum += std::exp(double(row[i]) - max);
    EXPECT_NEAR(got.logprobs[r], row[got.tokens[r]] - max - std::log(sum), 1e-4);
  }
}

TEST_P(SamplingGpu, DebugChecksNameABadParameter) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  SampleBatch b;
  b.vocab = 100;
  for (int r = 0; r < 3; ++r) b.add(normal_logits(100, r), 0, 1.f, 0.f, r, 0);
  b.top_p[1] = 0.f;
  EXPECT_EQ(error_of<InvalidArgumentError>([&] { run_sample(checked, DType::f32, b); }),
            "sample: top_p[1] = 0; expected a value in (0, 1]");
  b.top_p[1] = 1.f;
  b.top_k[2] = -1;
  EXPECT_EQ(error_of<InvalidArgumentError>([&] { run_sample(checked, DType::f32, b); }),
            "sample: top_k[2] = -1; expected >= 0 (0: no top-k)");
  b.top_k[2] = 0;
  b.min_p[0] = 1.5f;
  EXPECT_EQ(error_of<InvalidArgumentError>([&] { run_sample(checked, DType::f32, b); }),
            "sample: min_p[0] = 1.5; expected a value in [0, 1]");
}

// Facts worked by hand: logits [2, -2, 1, 0.5] at temperature 2 are [1, -1, 0.5, 0.25]; token 0 (count 2):
// 1 / 2 - (0.25 * 2 + 0.5) / 2 = 0; token 1 (prompt only): -1 * 2 = -2; token 3 (count 1): 0.25 / 2 - 0.75 / 2.
TEST_P(SamplingGpu, PenaltiesAndTemperatureByHand) {
  const TensorSpec logits(DType::f32, {1, 4}), ids(DType::i32, {1, 4}), per_request(DType::f32, {1});
  GpuTensor l(logits, reference::encode(DType::f32, {2.f, -2.f, 1.f, 0.5f})),
      id(ids, test::index_bytes(DType::i32, {0, 1, 3, -1})), count(ids, test::index_bytes(DType::i32, {2, 0, 1, 9})),
      rep(per_request, reference::encode(DType::f32, {2.f})), pres(per_request, reference::encode(DType::f32, {0.5f})),
      freq(per_request, reference::encode(DType::f32, {0.25f})),
      temp(per_request, reference::encode(DType::f32, {2.f}));
  rt->launch("apply_penalties_temperature", {l, id, count, rep, pres, freq, temp});
  sync();
  EXPECT_EQ(reference::decode(DType::f32, l.read()), (std::vector<float>{0.f, -2.f, 0.5f, -0.25f}));

  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  GpuTensor twice(ids, test::index_bytes(DType::i32, {0, 3, 3, -1}));
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              checked.launch("apply_penalties_temperature", {l, twice, count, rep, pres, freq, temp});
            }),
            "apply_penalties_temperature: token_ids row 0 lists token 3 twice; list each seen token once with its "
            "count");
}

// With one speculative token, the first output token of speculative
// sampling is distributed as the target's first row, whatever the draft.
TEST_P(SamplingGpu, RejectSamplingKeepsTheTargetDistribution) {
  const std::int64_t vocab = 24, draws = 6000;
  const auto softmax = [](std::vector<float> l) {
    double sum = 0;
    for (float x : l) sum += std::exp(double(x));
    for (float& x : l) x = float(std::exp(double(x)) / sum);
    return l;
  };
  const std::vector<float> draft = softmax(normal_logits(vocab, 1, 1.f)),
                           target0 = softmax(normal_logits(vocab, 2, 1.f)),
                           target1 = softmax(normal_logits(vocab, 3, 1.f));
  std::vector<float> drafts, targets;
  std::vector<std::int64_t> draft_tokens, seeds(draws, 99), offsets(draws);
  std::iota(offsets.begin(), offsets.end(), 0);
  std::mt19937 rng(5);
  std::discrete_distribution<std::int64_t> from_draft(draft.begin(), draft.end());
  for (std::int64_t r = 0; r < draws; ++r) {
    drafts.insert(drafts.end(), draft.begin(), draft.end());
    targets.insert(targets.end(), target0.begin(), target0.end());
    targets.insert(targets.end(), target1.begin(), target1.end());
    draft_tokens.push_back(from_draft(rng));
  }
  const TensorSpec per_request(DType::i64, {draws});
  GpuTensor out(TensorSpec(DType::i64, {draws, 2})), accepted(per_request),
      dt(TensorSpec(DType::i64, {draws, 1}), test::index_bytes(DType::i64, draft_tokens)),
      dp(TensorSpec(DType::f32, {draws, 1, vocab}), reference::encode(DType::f32, drafts)),
      tp(TensorSpec(DType::f32, {draws, 2, vocab}), reference::encode(DType::f32, targets)),
      seed(per_request, test::index_bytes(DType::i64, seeds)),
      offset(per_request, test::index_bytes(DType::i64, offsets));
  rt->launch("reject_sample", {out, accepted, dt, dp, tp, seed, offset});
  sync();
  const std::vector<std::int64_t> tokens = indices::decode(DType::i64, out.read()),
                                  kept = indices::decode(DType::i64, accepted.read());
  std::vector<std::int64_t> counts(std::size_t(vocab), 0);
  std::int64_t accepted_total = 0;
  for (std::int64_t r = 0; r < draws; ++r) {
    const std::size_t ri = std::size_t(r);
    ASSERT_TRUE(kept[ri] == 0 || kept[ri] == 1);
    if (kept[ri] == 1)
      EXPECT_EQ(tokens[2 * ri], draft_tokens[ri]);
    else
      EXPECT_EQ(tokens[2 * ri + 1], -1) << "nothing after the recovered token";
    accepted_total += kept[ri];
    ++counts[std::size_t(tokens[2 * ri])];
  }
  const ChiSquare c = chi_square(counts, std::vector<double>(target0.begin(), target0.end()));
  EXPECT_LT(c.statistic, chi_square_limit(c.df)) << c.df << " degrees of freedom";
  double overlap = 0;  // the acceptance rate is sum(min(draft, target))
  for (std::int64_t i = 0; i < vocab; ++i) overlap += std::min(draft[std::size_t(i)], target0[std::size_t(i)]);
  EXPECT_NEAR(double(accepted_total) / draws, overlap, 0.03);
}

INSTANTIATE_TEST_SUITE_P(Compilers, SamplingGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
