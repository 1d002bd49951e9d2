// The layered cache through the Runtime: threads, read-only layers, offline
// mode, trust, the size cap, and each fault ending in the right kernel.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "cache/entry.hpp"
#include "mojo/error.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;
namespace fs = std::filesystem;

namespace {
const Target kSm90 = Target::parse("sm_90");
std::vector<Tensor> rms(DType d, std::int64_t hidden) {
  TensorSpec x(d, {2, hidden}), w(d, {hidden});
  return {{x}, {x}, {w}};
}
RuntimeOptions at(const fs::path& dir) {
  RuntimeOptions o;
  o.cache_dir = dir;
  return o;
}
std::size_t files_in(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    n += it->is_regular_file() ? 1 : 0;
  return n;
}
}  // namespace

TEST(CacheLayers, ThreadsShareOneCompilePerKey) {
  test::TempDir dir;
  Runtime rt(at(dir.path()));
  std::vector<std::shared_ptr<const std::string>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { got[t] = rt.compile("rms_norm", rms(DType::bf16, 2048), {}, kSm90, Emit::cubin).binary; });
  for (auto& t : threads) t.join();
  EXPECT_EQ(rt.stats().compiles, 1u);
  for (auto& g : got) EXPECT_EQ(g, got[0]) << "every thread gets the one shared artifact";
}

TEST(CacheLayers, ReadOnlyLayerServesAndIsNeverWritten) {
  test::TempDir baked, writable;
  Runtime(at(baked.path())).compile("rms_norm", rms(DType::f16, 512), {}, kSm90, Emit::cubin);
  const std::size_t baked_files = files_in(baked.path());
  RuntimeOptions o = at(writable.path());
  o.readonly_cache_dirs = {baked.path()};
  Runtime rt(o);
  Artifact a = rt.compile("rms_norm", rms(DType::f16, 512), {}, kSm90, Emit::cubin);
  EXPECT_FALSE(a.compiled);
  EXPECT_EQ(rt.stats().readonly_hits, 1u);
  Artifact b = rt.compile("rms_norm", rms(DType::f16, 1024), {}, kSm90, Emit::cubin);  // not baked
  EXPECT_TRUE(b.compiled);
  EXPECT_EQ(files_in(baked.path()), baked_files) << "the read-only layer is never written";
  EXPECT_TRUE(fs::exists(DiskCache(writable.path()).entry_path(b.key, Emit::cubin)));
}

TEST(CacheLayers, ReadOnlyLayerFromTheEnvironment) {
  test::TempDir baked, writable;
  Runtime(at(baked.path())).compile("rms_norm", rms(DType::f32, 256), {}, kSm90, Emit::ptx);
  test::ScopedEnv env("MOJO_JIT_CACHE_READONLY_DIRS", ("/nonexistent:" + baked.str()).c_str());
  Runtime rt(at(writable.path()));
  EXPECT_FALSE(rt.compile("rms_norm", rms(DType::f32, 256), {}, kSm90, Emit::ptx).compiled);
}

TEST(CacheLayers, BadEntryInReadOnlyLayerIsSkippedNotRemoved) {
  test::TempDir baked, writable;
  Artifact a = Runtime(at(baked.path())).compile("rms_norm", rms(DType::f32, 256), {}, kSm90, Emit::ptx);
  fs::path entry = DiskCache(baked.path()).entry_path(a.key, Emit::ptx);
  fs::resize_file(entry, 10);
  RuntimeOptions o = at(writable.path());
  o.readonly_cache_dirs = {baked.path()};
  Runtime rt(o);
  testing::internal::CaptureStderr();
  Artifact b = rt.compile("rms_norm", rms(DType::f32, 256), {}, kSm90, Emit::ptx);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(b.compiled);
  EXPECT_EQ(*b.binary, *a.binary);
  EXPECT_TRUE(fs::exists(entry)) << "a read-only layer is never modified";
  EXPECT_NE(err.find("unusable entry in read-only cache"), std::string::npos) << err;
}

TEST(CacheLayers, OfflineMissIsACacheMissErrorNamingTheSpecialization) {
  test::TempDir dir;
  RuntimeOptions o = at(dir.path());
  o.offline = true;
  Runtime rt(o);
  std::string msg = test::error_of<CacheMissError>([&] { rt.compile("rms_norm", rms(DType::bf16, 4096), {}, kSm90, Emit::cubin); });
  EXPECT_NE(msg.find("rms_norm {dtype=bf16 hidden=4096 vec=8 threads=256 rows=1} for sm_90 (cubin)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mojo-jit prewarm"), std::string::npos) << msg;
  EXPECT_EQ(rt.stats().compiles, 0u);
  Runtime(at(dir.path())).compile("rms_norm", rms(DType::bf16, 4096), {}, kSm90, Emit::cubin);
  EXPECT_FALSE(rt.compile("rms_norm", rms(DType::bf16, 4096), {}, kSm90, Emit::cubin).compiled)
      << "after a compile elsewhere, offline mode finds it";
}

TEST(CacheLayers, OfflineFromTheEnvironment) {
  test::TempDir dir;
  test::ScopedEnv env("MOJO_JIT_OFFLINE", "1");
  Runtime rt(at(dir.path()));
  EXPECT_THROW(rt.compile("rms_norm", rms(DType::f32, 64), {}, kSm90, Emit::ptx), CacheMissError);
}

TEST(CacheLayers, DirectoryWritableByOthersIsRefused) {
  test::TempDir parent;
  fs::path dir = parent.path() / "shared";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::all);  // 0777
  testing::internal::CaptureStderr();
  Runtime rt(at(dir));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(rt.cache_dir().empty()) << "memory only";
  EXPECT_NE(err.find("refusing the cache directory"), std::string::npos) << err;
  EXPECT_NE(err.find("writable by everyone"), std::string::npos) << err;
  EXPECT_TRUE(rt.compile("rms_norm", rms(DType::f32, 64), {}, kSm90, Emit::ptx).compiled);
  EXPECT_EQ(files_in(dir), 0u);

  RuntimeOptions trusting = at(dir);
  trusting.trust_cache_dir = true;
  EXPECT_EQ(Runtime(trusting).cache_dir(), dir) << "an explicit opt-in uses it";
}

TEST(CacheLayers, DirectoryOwnedBySomeoneElseIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  test::TempDir parent;
  fs::path dir = parent.path() / "theirs";
  fs::create_directories(dir);
  ASSERT_EQ(::chown(dir.c_str(), 12345, 12345), 0);
  testing::internal::CaptureStderr();
  Runtime rt(at(dir));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(rt.cache_dir().empty());
  EXPECT_NE(err.find("owned by uid 12345"), std::string::npos) << err;
}

TEST(CacheLayers, NewCacheDirectoryIsCreatedPrivate) {
  test::TempDir parent;
  fs::path dir = parent.path() / "a" / "b" / "cache";
  Runtime rt(at(dir));
  rt.compile("rms_norm", rms(DType::f32, 64), {}, kSm90, Emit::ptx);
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(parent.path() / "a").permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST(CacheLayers, SizeCapEvictsLeastRecentlyUsed) {
  test::TempDir dir;
  // Three entries, oldest first; the oldest is then used, so the middle one is the LRU.
  std::vector<KernelKey> keys;
  for (std::int64_t hidden : {64, 128, 256})
    keys.push_back(Runtime(at(dir.path())).compile("rms_norm", rms(DType::f32, hidden), {}, kSm90, Emit::ptx).key);
  DiskCache disk(dir.path());
  auto set_mtime = [&](const KernelKey& k, std::time_t t) {
    struct timespec times[2] = {{t, 0}, {t, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, disk.entry_path(k, Emit::ptx).c_str(), times, 0), 0);
  };
  set_mtime(keys[0], 1000);
  set_mtime(keys[1], 2000);
  set_mtime(keys[2], 3000);
  EXPECT_FALSE(Runtime(at(dir.path())).compile("rms_norm", rms(DType::f32, 64), {}, kSm90, Emit::ptx).compiled);
  // The hit above stamped keys[0] as just used.
  const std::uint64_t total = disk.usage().bytes;
  const std::uint64_t one = fs::file_size(disk.entry_path(keys[2], Emit::ptx));
  EXPECT_EQ(disk.prune(total - one / 2), 1u);
  EXPECT_TRUE(fs::exists(disk.entry_path(keys[0], Emit::ptx)));
  EXPECT_FALSE(fs::exists(disk.entry_path(keys[1], Emit::ptx))) << "least recently used goes first";
  EXPECT_TRUE(fs::exists(disk.entry_path(keys[2], Emit::ptx)));
}

TEST(CacheLayers, RuntimeKeepsTheCacheUnderItsCap) {
  test::TempDir dir;
  RuntimeOptions o = at(dir.path());
  o.cache_max_bytes = 60000;  // about two PTX entries of ~23 KB
  Runtime rt(o);
  for (std::int64_t hidden : {1024, 2048, 3072, 4096, 5120})
    rt.compile("rms_norm", rms(DType::bf16, hidden), {}, kSm90, Emit::ptx);
  EXPECT_LE(DiskCache(dir.path()).usage().bytes, 60000u);
  EXPECT_GE(rt.stats().evicted, 2u);
}

TEST(CacheLayers, OlderFormatVersionIsIgnoredNeverMisread) {
  test::TempDir dir;
  Artifact a = Runtime(at(dir.path())).compile("rms_norm", rms(DType::f32, 64), {}, kSm90, Emit::ptx);
  fs::path path = DiskCache(dir.path()).entry_path(a.key, Emit::ptx);
  // The same entry, as a build with format version 0 would have written it (valid checksums).
  std::string bytes = test::read_file(path);
  entry::Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  h.format_version = 0;
  entry::seal(h);
  std::memcpy(bytes.data(), &h, sizeof h);
  test::write_file(path, bytes);
  Runtime rt(at(dir.path()));
  testing::internal::CaptureStderr();
  Artifact again = rt.compile("rms_norm", rms(DType::f32, 64), {}, kSm90, Emit::ptx);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(again.compiled);
  EXPECT_EQ(*again.binary, *a.binary);
  EXPECT_NE(err.find("format version 0 (this build reads 1)"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(CacheLayers, StaleLockAndTempFilesArePruned) {
  test::TempDir dir;
  Artifact a = Runtime(at(dir.path())).compile("rms_norm", rms(DType::f32, 64), {}, kSm90, Emit::ptx);
  DiskCache disk(dir.path());
  fs::path entry = disk.entry_path(a.key, Emit::ptx);
  fs::path lock = entry.string() + ".lock", temp = entry.parent_path() / ".x.ptx.tmp.1.2.3";
  test::write_file(lock, "");
  test::write_file(temp, "partial");
  struct timespec old[2] = {{1000, 0}, {1000, 0}};
  ::utimensat(AT_FDCWD, lock.c_str(), old, 0);
  ::utimensat(AT_FDCWD, temp.c_str(), old, 0);
  EXPECT_EQ(disk.usage().stale_files, 2u);
  disk.prune(1u << 30);
  EXPECT_FALSE(fs::exists(lock));
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_TRUE(fs::exists(entry));
}

TEST(CacheLayers, DumpWritesSourceMetaAndOutput) {
  test::TempDir dir, dump;
  RuntimeOptions o = at(dir.path());
  o.dump_dir = dump.path();
  Artifact a = Runtime(o).compile("rms_norm", rms(DType::f16, 128), {}, kSm90, Emit::ptx);
  std::string stem = (dump.path() / (a.kernel_name + ".sm_90." + a.key.hex().substr(0, 8))).string();
  EXPECT_NE(test::read_file(stem + ".cu").find("MOJO_KERNEL_rms_norm(" + a.kernel_name), std::string::npos);
  EXPECT_NE(test::read_file(stem + ".txt").find("key=" + a.key.hex()), std::string::npos);
  EXPECT_EQ(test::read_file(stem + ".ptx"), *a.binary);
}

// A cubin through LLVM leaves every stage (named Llvm: the sanitizer runs leave LLVM out): the IR as clang made it, optimised,
// the PTX ptxas took, and the cubin (the same bytes the cache holds).
TEST(CacheLayers, LlvmDumpWritesEveryStage) {
  if (!MOJO_TEST_WITH_LLVM) GTEST_SKIP() << "built without LLVM";
  test::TempDir dir, dump;
  RuntimeOptions o = at(dir.path());
  o.dump_dir = dump.path();
  o.compiler = "llvm";
  Artifact a = Runtime(o).compile("rms_norm", rms(DType::f16, 128), {}, kSm90, Emit::cubin);
  std::string stem = (dump.path() / (a.kernel_name + ".sm_90." + a.key.hex().substr(0, 8))).string();
  EXPECT_NE(test::read_file(stem + ".llvm").find("define"), std::string::npos);
  EXPECT_NE(test::read_file(stem + ".llvm-opt").find("define"), std::string::npos);
  EXPECT_NE(test::read_file(stem + ".llvm-opt"), test::read_file(stem + ".llvm")) << "optimised";
  EXPECT_NE(test::read_file(stem + ".ptx").find(".entry " + a.kernel_name), std::string::npos);
  EXPECT_EQ(test::read_file(stem + ".cubin"), *a.binary);
}

// A failed compile with MOJO_JIT_DUMP names the files it left and says how to
// redo it with the toolkit's own compiler.
TEST(CacheLayers, AFailedCompileNamesItsDumpAndARepro) {
  test::TempDir dir, dump, templates;
  std::string text = test::read_file(MOJO_TEST_TEMPLATE_DIR + "/rms_norm.cu");
  text.insert(text.find("  const float scale"), "  undefined_helper(sum_sq);\n");
  test::write_file(templates.path() / "rms_norm.cu", text);
  RuntimeOptions o = at(dir.path());
  o.dump_dir = dump.path();
  o.template_paths = {templates.path()};
  Runtime rt(o);
  try {
    rt.compile("rms_norm", rms(DType::f16, 128), {}, kSm90, Emit::cubin);
    FAIL() << "compiled a broken template";
  } catch (const CompileError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "what() is one line: " << what;
    const std::size_t at = what.find("[dumped: ");
    ASSERT_NE(at, std::string::npos) << what;
    const std::string source = what.substr(at + 9, what.find(".cu,", at) + 3 - at - 9);
    EXPECT_NE(test::read_file(source).find("undefined_helper(sum_sq);"), std::string::npos) << source;
    const std::string log = source.substr(0, source.size() - 3) + ".log";
    EXPECT_EQ(test::read_file(log), e.log());
    EXPECT_NE(e.log().find("reproduce outside mojo-jit:\n  nvcc -std=c++17 -arch=sm_90 -cubin -o "), std::string::npos)
        << e.log();
    EXPECT_NE(e.log().find(source), std::string::npos) << e.log();
  }
}
