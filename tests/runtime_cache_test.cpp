// The runtime's use of the disk cache: hits across Runtime instances, bad
// entries recompiled, an unusable directory degrading to memory.
#include <gtest/gtest.h>

#include "mojo/error.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;
namespace fs = std::filesystem;

namespace {
std::vector<Tensor> rms_args() {
  TensorSpec x(DType::bf16, {4, 1024}), w(DType::bf16, {1024});
  return {{x}, {x}, {w}};
}
RuntimeOptions in(const fs::path& dir) {
  RuntimeOptions o;
  o.cache_dir = dir;
  return o;
}
const Target kSm90 = Target::parse("sm_90");
}  // namespace

TEST(RuntimeCache, SecondRuntimeHitsTheDiskAndGetsIdenticalBytes) {
  test::TempDir dir;
  Runtime first(in(dir.path()));
  Artifact a = first.compile("rms_norm", rms_args(), {}, kSm90, Emit::cubin);
  EXPECT_TRUE(a.compiled);
  EXPECT_EQ(first.stats().compiles, 1u);

  Runtime second(in(dir.path()));
  Artifact b = second.compile("rms_norm", rms_args(), {}, kSm90, Emit::cubin);
  EXPECT_FALSE(b.compiled);
  EXPECT_EQ(second.stats().compiles, 0u);
  EXPECT_EQ(second.stats().disk_hits, 1u);
  EXPECT_EQ(*a.binary, *b.binary);
  EXPECT_EQ(a.key, b.key);
}

TEST(RuntimeCache, CorruptEntryIsReportedRemovedAndRecompiled) {
  test::TempDir dir;
  Artifact good = Runtime(in(dir.path())).compile("rms_norm", rms_args(), {}, kSm90, Emit::cubin);
  fs::path entry = DiskCache(dir.path()).entry_path(good.key, Emit::cubin);
  std::string bytes = test::read_file(entry);
  bytes[bytes.size() / 2] ^= 0x5a;
  test::write_file(entry, bytes);

  Runtime rt(in(dir.path()));
  testing::internal::CaptureStderr();
  Artifact again = rt.compile("rms_norm", rms_args(), {}, kSm90, Emit::cubin);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(again.compiled);
  EXPECT_EQ(*again.binary, *good.binary) << "the recompiled kernel is the right one";
  EXPECT_EQ(rt.stats().bad_entries, 1u);
  EXPECT_NE(err.find("unusable cache entry for rms_norm"), std::string::npos) << err;
  EXPECT_NE(err.find("payload checksum mismatch"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
  EXPECT_EQ(test::read_file(entry).size(), bytes.size()) << "the entry was rewritten whole";
  EXPECT_EQ(DiskCache(dir.path()).load(good.key, Emit::cubin), *good.binary);
}

TEST(RuntimeCache, UnusableDirectoryFallsBackToMemoryWithOneWarning) {
  test::TempDir dir;
  test::write_file(dir.path() / "a-file", "x");
  Runtime rt(in(dir.path() / "a-file" / "cache"));
  testing::internal::CaptureStderr();
  Artifact a = rt.compile("rms_norm", rms_args(), {}, kSm90, Emit::ptx);
  Artifact b = rt.compile("rms_norm", rms_args(), {}, kSm90, Emit::cubin);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(a.compiled && b.compiled);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("kernels stay in memory"), std::string::npos) << err;
  EXPECT_TRUE(rt.cache_dir().empty());
  EXPECT_FALSE(rt.compile("rms_norm", rms_args(), {}, kSm90, Emit::ptx).compiled) << "memory still serves";
}

TEST(RuntimeCache, DiskCacheCanBeTurnedOffByEnvironment) {
  test::TempDir dir;
  test::ScopedEnv env("MOJO_JIT_DISABLE_DISK_CACHE", "1");
  Runtime rt(in(dir.path()));
  rt.compile("rms_norm", rms_args(), {}, kSm90, Emit::ptx);
  EXPECT_TRUE(rt.cache_dir().empty());
  EXPECT_FALSE(fs::exists(dir.path() / "v1"));
}

TEST(RuntimeCache, LaunchWithoutAGpuIsANoDeviceError) {
  if (device_available()) GTEST_SKIP() << "this machine has a GPU";
  RuntimeOptions o;
  o.disk_cache = false;
  Runtime rt(o);
  EXPECT_THROW(rt.launch("rms_norm", rms_args()), NoDeviceError);
  std::string msg = test::error_of<NoDeviceError>([] { Device::open(); });
  EXPECT_TRUE(msg.find("libcuda.so.1") != std::string::npos || msg.find("GPU") != std::string::npos) << msg;
}

TEST(RuntimeCache, AddingATemplatePathResolvesAgain) {
  test::TempDir dir, templates;
  RuntimeOptions o = in(dir.path());
  Runtime rt(o);
  Artifact before = rt.compile("rms_norm", rms_args(), {}, kSm90, Emit::ptx);
  test::write_file(templates.path() / "rms_norm.cu",
                   test::read_file(test::beside_exe(MOJO_TEST_TEMPLATE_DIR_REL) + "/rms_norm.cu") + "\n// tuned\n");
  rt.add_template_path(templates.path());
  Artifact after = rt.compile("rms_norm", rms_args(), {}, kSm90, Emit::ptx);
  EXPECT_NE(before.key, after.key);
  EXPECT_TRUE(after.compiled);
}
