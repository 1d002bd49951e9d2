// Prewarm manifests: parsing, expansion, errors with line numbers, and the
// promise that a prewarmed directory serves every listed specialization.
#include <gtest/gtest.h>

#include "mojo/error.hpp"
#include "mojo/manifest.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;

namespace {
const char* kManifest = R"(
name = "tiny"
targets = ["sm_80"]
[[kernel]]
op = "rms_norm"
dtypes = ["f16", "bf16"]
shapes = [{ x = [[1, 16], 256] }, { x = [1, 96] }]
params = { eps = 1e-5 }
)";
}  // namespace

TEST(Manifest, ExpandsOpsDtypesShapeBucketsAndTargets) {
  Manifest m = Manifest::parse(kManifest);
  EXPECT_EQ(m.name, "tiny");
  auto items = m.items();
  EXPECT_EQ(items.size(), 2u * 3u * 1u) << "2 dtypes x (2 bucketed + 1) shapes x 1 target";
  EXPECT_EQ(items[0].label, "rms_norm f16 x=1x256 sm_80");
  EXPECT_EQ(items[1].label, "rms_norm f16 x=16x256 sm_80");
  EXPECT_EQ(items[0].scalars.size(), 1u);
  EXPECT_EQ(m.items({Target::parse("sm_90"), Target::parse("sm_90a")}).size(), 12u) << "targets given override";
}

TEST(Manifest, ErrorsNameTheLineAndTheProblem) {
  struct Case {
    std::string text, message;
  } cases[] = {
      {"[[kernel]]\nop = \"rmsnorm\"\ndtypes=[\"f16\"]\nshapes=[{x=[1,8]}]\n", "m.toml:2: unknown op 'rmsnorm'"},
      {"[[kernel]]\nop = \"rms_norm\"\ndtypes=[\"fp8\"]\nshapes=[{x=[1,8]}]\n", "m.toml:3: unknown dtype 'fp8'"},
      {"[[kernel]]\nop = \"rms_norm\"\ndtypes=[\"f16\"]\nshapes=[{x=[1,-8]}]\n", "m.toml:4: a dimension must be a non-negative integer"},
      {"[[kernel]]\nop = \"rms_norm\"\ndtypes=[\"f16\"]\n", "m.toml:1: [[kernel]] needs shapes"},
      {"targets = [\"sm90\"]\n[[kernel]]\nop=\"rms_norm\"\ndtypes=[\"f16\"]\nshapes=[{x=[1,8]}]\n", "m.toml:1: bad arch 'sm90'"},
      {"name = \"x\"\n", "m.toml: no [[kernel]] entries"},
      {"[[kernel]]\nop = \"rms_norm\"\nshape=[]\n", "m.toml:3: unknown key 'shape' in [[kernel]]"},
      {"[[kernel]\n", "m.toml:1:"},
  };
  for (const Case& c : cases) {
    std::string msg = test::error_of<InvalidArgumentError>([&] { Manifest::parse(c.text, "m.toml"); });
    EXPECT_EQ(msg.rfind(c.message, 0), 0u) << "got: " << msg << "\nwant: " << c.message;
  }
}

TEST(Manifest, ShapesTheOpRejectsFailWhenExpanded) {
  Manifest m = Manifest::parse("[[kernel]]\nop=\"rms_norm\"\ndtypes=[\"i32\"]\nshapes=[{x=[1,8]}]\n", "m");
  std::string msg = test::error_of<InvalidArgumentError>([&] { m.items({Target::parse("sm_90")}); });
  EXPECT_NE(msg.find("manifest entry rms_norm i32 x=1x8 sm_90: rms_norm: x has dtype i32"), std::string::npos) << msg;
}

// The shapes an entry's params decide come from the op, as for the CLI and Python: gemm's c with a transposed a,
// the fused loss's loss of a row each with reduction 0 (before 2026-11-30 a manifest made it [1], and refused it).
TEST(Manifest, ShapesThatTheParamsDecide) {
  Manifest m = Manifest::parse(R"(
[[kernel]]
op = "gemm"
dtypes = ["bf16"]
shapes = [{ a = [64, 100], b = [64, 48] }]
params = { trans_a = 1 }
[[kernel]]
op = "linear_cross_entropy"
dtypes = ["bf16"]
shapes = [{ hidden = [9, 64], weight = [300, 64] }]
params = { reduction = 0 }
)");
  const auto items = m.items({Target::parse("sm_90")});
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].tensors[0].spec.str(), "bf16[100, 48]") << "c = [M, N] of a [K, M] and b [K, N]";
  EXPECT_EQ(items[1].tensors[0].spec.str(), "f32[9]") << "the loss, a row each";
}

TEST(Prewarm, IsIdempotentAndServesEverythingWithZeroCompiles) {
  test::TempDir dir;
  auto items = Manifest::parse(kManifest).items({Target::parse("sm_80"), Target::parse("sm_90")});
  RuntimeOptions o;
  o.cache_dir = dir.path();
  {
    Runtime rt(o);
    std::size_t calls = 0;
    PrewarmResult r = rt.prewarm(items, Emit::cubin, 2, [&](std::size_t done, std::size_t total, const PrewarmItem&, bool ok) {
      EXPECT_EQ(done, ++calls);
      EXPECT_EQ(total, items.size());
      EXPECT_TRUE(ok);
    });
    EXPECT_EQ(r.failed, 0u);
    EXPECT_EQ(r.compiled + r.cached, items.size());
    EXPECT_EQ(r.compiled, 8u) << "rows do not change the kernel: 2 dtypes x 2 hidden sizes x 2 targets";
  }
  {
    Runtime again(o);
    PrewarmResult r = again.prewarm(items);
    EXPECT_EQ(r.compiled, 0u);
    EXPECT_EQ(again.stats().compiles, 0u);
  }
  o.offline = true;  // a production server that must never JIT
  Runtime served(o);
  for (const PrewarmItem& item : items)
    EXPECT_FALSE(served.compile(item.op, item.tensors, item.scalar_args(), item.target, Emit::cubin).compiled)
        << item.label;
  EXPECT_EQ(served.stats().compiles, 0u);
}

TEST(Prewarm, FailuresAreCountedAndNamed) {
  test::TempDir dir, templates;
  test::write_file(templates.path() / "rms_norm.cu", "#error broken on purpose\n");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  o.template_paths = {templates.path()};
  Runtime rt(o);
  auto items = Manifest::parse(kManifest).items();
  PrewarmResult r = rt.prewarm(items, Emit::ptx, 2);
  EXPECT_EQ(r.failed, items.size());
  ASSERT_FALSE(r.failures.empty());
  EXPECT_NE(r.failures[0].find("broken on purpose"), std::string::npos) << r.failures[0];
}

TEST(Prewarm, ShippedManifestsAreValid) {
  for (const char* name : {"qwen3-8b", "qwen3-30b-a3b"}) {
    Manifest m = Manifest::load(test::beside_exe(MOJO_TEST_TEMPLATE_DIR_REL) + "/../cache/" + name + ".toml");
    EXPECT_EQ(m.name, name);
    EXPECT_FALSE(m.items().empty());
  }
}

TEST(Manifest, NonAsciiInputIsRejectedWithItsLine) {
  std::string msg = test::error_of<InvalidArgumentError>(
      [] { Manifest::parse("name = \"x\"\n# \xe3\x80\x81 ideographic comma\n", "m.toml"); });
  EXPECT_EQ(msg, "m.toml:2: byte 0xe3 is not printable ASCII; manifests are ASCII text");
}

TEST(Manifest, UnknownTensorNameIsAnError) {
  Manifest m = Manifest::parse("[[kernel]]\nop=\"rms_norm\"\ndtypes=[\"f32\"]\nshapes=[{x=[4,127], t=[127]}]\n", "m");
  EXPECT_EQ(test::error_of<InvalidArgumentError>([&] { m.items({Target::parse("sm_90")}); }),
            "manifest: rms_norm has no tensor 't'; its tensors: out, x, weight");
}

TEST(Manifest, HugeDimensionsAreErrorsNotOverflow) {
  Manifest m = Manifest::parse("[[kernel]]\nop=\"rms_norm\"\ndtypes=[\"f32\"]\nshapes=[{x=[21, 3, 6300000000000000000]}]\n", "m");
  EXPECT_THROW(m.items({Target::parse("sm_90")}), InvalidArgumentError);
}
