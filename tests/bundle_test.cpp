// All-kernel modules: a set of specializations compiled as one module, and
// each of its kernels found later by a single-kernel lookup, compiling nothing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mojo/error.hpp"
#include "mojo/manifest.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;

namespace {
// 3 dtypes x 4 hidden sizes = 12 distinct kernels (the 2 row counts share them).
const char* kManifest = R"(
[[kernel]]
op = "rms_norm"
dtypes = ["f32", "f16", "bf16"]
shapes = [{ x = [[1, 8], 64] }, { x = [1, 128] }, { x = [1, 1000] }, { x = [2, 4096] }]
)";

RuntimeOptions with(const std::string& compiler, const std::filesystem::path& dir) {
  RuntimeOptions o;
  o.compiler = compiler;
  o.cache_dir = dir;
  return o;
}

void bundle_then_single_lookups(const std::string& compiler, Emit emit, int jobs) {
  test::TempDir dir;
  const Target sm90 = Target::parse("sm_90");
  auto items = Manifest::parse(kManifest).items({sm90});
  ASSERT_EQ(items.size(), 15u);
  Bundle b;
  {
    Runtime rt(with(compiler, dir.path()));
    auto bundles = rt.compile_all(items, emit, jobs);
    ASSERT_EQ(bundles.size(), 1u);
    b = bundles[0];
    EXPECT_EQ(b.kernels.size(), 12u);
    EXPECT_TRUE(b.compiled);
    EXPECT_EQ(rt.stats().compiles, 1u) << "one compile for the whole set";
    if (emit == Emit::ptx)
      for (const std::string& k : b.kernels) EXPECT_NE(b.binary->find(".entry " + k + "("), std::string::npos) << k;
    else
      EXPECT_EQ(b.binary->substr(0, 4), "\x7f" "ELF");
  }
  Runtime later(with(compiler, dir.path()));
  for (const PrewarmItem& item : items) {
    Artifact a = later.compile(item.op, item.tensors, item.scalar_args(), item.target, emit);
    EXPECT_FALSE(a.compiled) << item.label;
    EXPECT_EQ(*a.binary, *b.binary) << "the kernel's lookup answers with its bundle: " << item.label;
  }
  EXPECT_EQ(later.stats().compiles, 0u);
  EXPECT_EQ(Runtime(with(compiler, dir.path())).compile_all(items, emit, jobs)[0].compiled, false) << "idempotent";

  std::vector<std::string> problems;
  std::size_t aliases = 0;
  for (const DiskEntryInfo& e : DiskCache(dir.path()).list(&problems)) aliases += e.alias;
  EXPECT_EQ(aliases, 12u);
  EXPECT_TRUE(problems.empty());
}
}  // namespace

TEST(Bundle, NvrtcPtxBundleServesEachKernel) { bundle_then_single_lookups("nvrtc", Emit::ptx, 1); }
TEST(Bundle, NvrtcCubinBundleServesEachKernel) { bundle_then_single_lookups("nvrtc", Emit::cubin, 1); }
TEST(Bundle, NvrtcCubinBundleOnTwoThreadsServesEachKernel) { bundle_then_single_lookups("nvrtc", Emit::cubin, 2); }
#if MOJO_TEST_WITH_LLVM
TEST(Bundle, LlvmPtxBundleServesEachKernel) { bundle_then_single_lookups("llvm", Emit::ptx, 2); }
TEST(Bundle, LlvmCubinBundleWithSplitBackEndServesEachKernel) { bundle_then_single_lookups("llvm", Emit::cubin, 2); }

// The sm_90a wgmma kernels (attention prefill, the Hopper GEMM) in one LLVM bundle, its back end split over two
// threads: each part holds whole kernels and ptxas sees one module, so its SASS is that of the one-thread build
// (HGMMA asynchronous, setmaxnreg kept, no local memory), never the serialized code of relocatable units.
TEST(Bundle, LlvmWgmmaBundleOnTwoThreadsIsTheOneThreadCode) {
  const char* manifest = R"(
[[kernel]]
op = "sdpa"
dtypes = ["bf16", "f16"]
shapes = [{ q = [4096, 32, 128], k = [4096, 8, 128] }]
[[kernel]]
op = "paged_prefill_gqa"
dtypes = ["bf16"]
shapes = [{ q = [512, 32, 128], k_cache = [1024, 16, 8, 128], cu_seqlens_q = [3], block_tables = [2, 64] }]
[[kernel]]
op = "linear"
dtypes = ["bf16"]
shapes = [{ x = [4096, 4096], weight = [12288, 4096] }]
)";
  auto items = Manifest::parse(manifest).items({Target::parse("sm_90a")});
  test::TempDir dir;
  std::optional<test::SassFacts> facts[2];
  for (int jobs : {1, 2}) {
    RuntimeOptions o = with("llvm", dir.path() / std::to_string(jobs));
    auto bundles = Runtime(o).compile_all(items, Emit::cubin, jobs);
    ASSERT_EQ(bundles.size(), 1u);
    EXPECT_EQ(bundles[0].kernels.size(), 4u);
    facts[jobs - 1] = test::sass_facts(*bundles[0].binary);
    if (!facts[jobs - 1]) GTEST_SKIP() << "compiled; no nvdisasm to read the SASS (tools/setup.sh installs one)";
    SCOPED_TRACE(fmt::format("-j {}", jobs));
    test::expect_whole_program_wgmma(*facts[jobs - 1]);
  }
  EXPECT_EQ(facts[1]->hgmma, facts[0]->hgmma);
  EXPECT_EQ(facts[1]->wgmma_waits, facts[0]->wgmma_waits);
  EXPECT_EQ(facts[1]->setmaxnreg, facts[0]->setmaxnreg);
}
#endif

TEST(Bundle, PtxBundleIsAcceptedByPtxas) {
  RuntimeOptions o;
  o.disk_cache = false;
  Runtime rt(o);
  auto b = rt.compile_all(Manifest::parse(kManifest).items({Target::parse("sm_80")}), Emit::ptx)[0];
  test::TempDir dir;
  test::write_file(dir.path() / "b.ptx", *b.binary);
  auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -arch=sm_80 " + (dir.path() / "b.ptx").string() + " -o " +
                             (dir.path() / "b.cubin").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

namespace {
// A cubin entry's key for a made-up source `name`.
KernelKey key_named(const char* name) { return compute_key(KeyInputs{name, name, "", "sm_90", "c", Emit::cubin}); }
}  // namespace

TEST(Bundle, AliasToAMissingBundleIsAMissNotAnError) {
  test::TempDir dir;
  DiskCache cache(dir.path());
  KernelKey kernel = key_named("k"), bundle = key_named("b");
  cache.store_alias(kernel, Emit::cubin, bundle, "");
  std::string problem;
  EXPECT_FALSE(cache.load(kernel, Emit::cubin, &problem).has_value());
  EXPECT_TRUE(problem.empty()) << problem;
  cache.store(bundle, Emit::cubin, "", "module bytes");
  EXPECT_EQ(cache.load(kernel, Emit::cubin), "module bytes");
}

// Aliases that name each other (a damaged or hand-edited cache): a bad entry, never a loop.
TEST(Bundle, AliasToAnAliasIsABadEntry) {
  test::TempDir dir;
  DiskCache cache(dir.path());
  KernelKey a = key_named("a"), b = key_named("b");
  cache.store_alias(a, Emit::cubin, b, "");
  cache.store_alias(b, Emit::cubin, a, "");
  std::string problem;
  EXPECT_FALSE(cache.load(a, Emit::cubin, &problem).has_value());
  EXPECT_NE(problem.find("an alias where a bundle should be; removed"), std::string::npos) << problem;
  EXPECT_FALSE(std::filesystem::exists(cache.entry_path(b, Emit::cubin))) << "the alias at the bundle's key is removed";
  cache.store(b, Emit::cubin, "", "module bytes");
  EXPECT_EQ(cache.load(a, Emit::cubin), "module bytes") << "a's alias is fine once b holds a module";
}

TEST(Bundle, CliCompileAll) {
  test::TempDir dir;
  test::write_file(dir.path() / "m.toml", kManifest);
  auto r = test::run_command(std::string(MOJO_TEST_CLI) + " compile-all --manifest " + (dir.path() / "m.toml").string() +
                             " --arch sm_90 --emit ptx --cache-dir " + dir.str() + " -o " + (dir.path() / "b.ptx").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("sm_90 ptx: 12 kernels in one module"), std::string::npos) << r.output;
  EXPECT_NE(test::read_file(dir.path() / "b.ptx").find(".entry rms_norm_bf16_hidden_4096"), std::string::npos);
}

TEST(Bundle, ExamplesManifestHasEveryOpAndDtype) {
  std::size_t want = 0;
  for (const OpDef* op : all_ops()) want += op->dtypes().size();
  auto items = Manifest::examples().items({Target::parse("sm_90")});
  EXPECT_EQ(items.size(), want);
  EXPECT_GE(want, 12u);
  auto two = Manifest::examples({"softmax", "embedding"}).items({Target::parse("sm_80")});
  ASSERT_EQ(two.size(), find_op("softmax").dtypes().size() + find_op("embedding").dtypes().size());
  EXPECT_EQ(two.front().label.rfind("softmax ", 0), 0u) << two.front().label;
  EXPECT_THROW(Manifest::examples({"no_such_op"}), UnknownOpError);
}

TEST(Bundle, CliCompileAllOps) {
  test::TempDir dir;
  const std::string cli = std::string(MOJO_TEST_CLI) + " compile-all --arch sm_80 --emit ptx --cache-dir " + dir.str();
  auto r = test::run_command(cli + " --ops silu,swiglu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("sm_80 ptx: 6 kernels in one module"), std::string::npos) << r.output;
  r = test::run_command(cli);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("give --manifest FILE or --ops all|OP,OP,..."), std::string::npos) << r.output;
  r = test::run_command(cli + " --ops silu --manifest m.toml");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("excludes"), std::string::npos) << r.output;
}
