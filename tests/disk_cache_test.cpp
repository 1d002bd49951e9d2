#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "cache/entry.hpp"
#include "mojo/cache.hpp"
#include "mojo/error.hpp"
#include "test_util.hpp"

using namespace mojo;
namespace fs = std::filesystem;

namespace {
const KernelKey kKey = compute_key(KeyInputs{"src", "k", "p", "sm_90", "c", Emit::cubin});
const std::string kPayload = std::string("\x7f" "ELF fake cubin payload\0with a NUL", 34);

struct DiskCacheTest : ::testing::Test {
  test::TempDir dir;
  DiskCache cache{dir.path() / "cache"};
  fs::path stored() {
    cache.store(kKey, Emit::cubin, "op=test\n", kPayload);
    return cache.entry_path(kKey, Emit::cubin);
  }
  // Loads and expects a rejected entry whose problem mentions `why`, then the file gone.
  void expect_rejected(const std::string& why) {
    std::string problem;
    EXPECT_FALSE(cache.load(kKey, Emit::cubin, &problem).has_value());
    EXPECT_NE(problem.find(why), std::string::npos) << problem;
    EXPECT_NE(problem.find("removed"), std::string::npos) << problem;
    EXPECT_FALSE(fs::exists(cache.entry_path(kKey, Emit::cubin)));
  }
};
}  // namespace

TEST_F(DiskCacheTest, RoundTripsBytesExactly) {
  fs::path path = stored();
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(path.filename().string(), kKey.hex() + ".cubin");
  EXPECT_EQ(path.parent_path().filename().string(), kKey.hex().substr(0, 2));
  auto loaded = cache.load(kKey, Emit::cubin);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(*loaded, kPayload);
  EXPECT_EQ(fs::file_size(path), 64 + 8 + kPayload.size()) << "header + meta + payload";
}

TEST_F(DiskCacheTest, MissingEntryIsAMissNotAProblem) {
  std::string problem;
  EXPECT_FALSE(cache.load(kKey, Emit::ptx, &problem).has_value());
  EXPECT_TRUE(problem.empty()) << problem;
}

TEST_F(DiskCacheTest, DirectoriesArePrivate) {
  stored();
  EXPECT_EQ(fs::status(dir.path() / "cache").permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(cache.entry_path(kKey, Emit::cubin).parent_path()).permissions() & fs::perms::all,
            fs::perms::owner_all);
}

TEST_F(DiskCacheTest, FlippedPayloadByteIsDetected) {
  fs::path path = stored();
  std::string bytes = test::read_file(path);
  bytes[bytes.size() - 3] ^= 0x10;
  test::write_file(path, bytes);
  expect_rejected("payload checksum mismatch");
}

TEST_F(DiskCacheTest, FlippedHeaderByteIsDetected) {
  fs::path path = stored();
  std::string bytes = test::read_file(path);
  bytes[20] ^= 0x01;  // inside the key
  test::write_file(path, bytes);
  expect_rejected("header checksum mismatch");
}

TEST_F(DiskCacheTest, TruncatedEntryIsDetected) {
  fs::path path = stored();
  fs::resize_file(path, fs::file_size(path) - 5);
  expect_rejected("size mismatch");
}

TEST_F(DiskCacheTest, ZeroLengthFileIsDetected) {
  fs::path path = stored();
  fs::resize_file(path, 0);
  expect_rejected("truncated");
}

TEST_F(DiskCacheTest, EntryOfAnotherKeyIsDetected) {
  KernelKey other = compute_key(KeyInputs{"other", "k", "p", "sm_90", "c", Emit::cubin});
  cache.store(other, Emit::cubin, "", kPayload);
  fs::create_directories(cache.entry_path(kKey, Emit::cubin).parent_path());
  fs::rename(cache.entry_path(other, Emit::cubin), cache.entry_path(kKey, Emit::cubin));
  expect_rejected("names key " + other.hex());
}

TEST_F(DiskCacheTest, ForeignFileIsDetected) {
  fs::path path = stored();
  test::write_file(path, std::string(200, 'x'));
  expect_rejected("bad magic");
}

TEST_F(DiskCacheTest, KilledWritersTempFileIsIgnoredAndCleared) {
  fs::path path = stored();
  // What a writer killed before its rename leaves behind: a partial temp file.
  fs::path temp = path.parent_path() / ("." + path.filename().string() + ".tmp.4242.1.0");
  test::write_file(temp, test::read_file(path).substr(0, 30));
  EXPECT_EQ(cache.load(kKey, Emit::cubin), kPayload);
  std::vector<std::string> problems;
  EXPECT_EQ(cache.list(&problems).size(), 1u);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(cache.clear(), 2u);
  EXPECT_FALSE(fs::exists(temp));
}

TEST_F(DiskCacheTest, ListReportsMetaAndBadFiles) {
  stored();
  KernelKey other = compute_key(KeyInputs{"other", "k", "p", "sm_90", "c", Emit::ptx});
  cache.store(other, Emit::ptx, "op=other\n", "ptx text");
  test::write_file(cache.entry_path(other, Emit::ptx), "garbage");
  std::vector<std::string> problems;
  auto entries = cache.list(&problems);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].key, kKey);
  EXPECT_EQ(entries[0].meta, "op=test\n");
  EXPECT_EQ(entries[0].payload_bytes, kPayload.size());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("truncated"), std::string::npos) << problems[0];
}

TEST_F(DiskCacheTest, UnwritableDirectoryThrowsAndLeavesNothing) {
  if (::geteuid() == 0) {
    // root ignores permissions: use a path under a regular file instead.
    test::write_file(dir.path() / "file", "x");
    DiskCache bad(dir.path() / "file" / "cache");
    EXPECT_THROW(bad.store(kKey, Emit::cubin, "", kPayload), Error);
    return;
  }
  fs::create_directories(dir.path() / "ro");
  fs::permissions(dir.path() / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  DiskCache bad(dir.path() / "ro" / "cache");
  EXPECT_THROW(bad.store(kKey, Emit::cubin, "", kPayload), Error);
}

TEST(DiskCacheDefaultDir, FollowsTheEnvironment) {
  {
    test::ScopedEnv dir("MOJO_JIT_CACHE_DIR", "/tmp/explicit");
    EXPECT_EQ(DiskCache::default_dir(), fs::path("/tmp/explicit"));
  }
  test::ScopedEnv no_dir("MOJO_JIT_CACHE_DIR", nullptr);
  {
    test::ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(DiskCache::default_dir(), fs::path("/tmp/xdg/mojo-jit"));
  }
  test::ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  test::ScopedEnv home("HOME", "/tmp/home");
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/tmp/home/.cache/mojo-jit"));
}

TEST(DiskCacheKill, WriterKilledAtAnyMomentLeavesAWholeEntryOrNone) {
  // A child stores a large entry; the parent SIGKILLs it after a varying delay.
  // Whatever the moment, a reader gets nothing or exactly the payload.
  const std::string payload(64 << 20, 'p');
  for (int delay_us : {0, 2000, 10000, 40000}) {
    test::TempDir dir;
    DiskCache cache(dir.path());
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        cache.store(kKey, Emit::cubin, "", payload);
      } catch (...) {
      }
      ::_exit(0);
    }
    ::usleep(useconds_t(delay_us));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    std::string problem;
    auto loaded = cache.load(kKey, Emit::cubin, &problem);
    if (loaded) EXPECT_EQ(loaded->size(), payload.size()) << "delay " << delay_us;
    EXPECT_TRUE(problem.empty()) << problem;
    if (loaded) EXPECT_TRUE(*loaded == payload);
  }
}

TEST(EntryFormat, SizesThatDoNotAddUpAreRejectedWithoutOverflow) {
  // A header with a valid checksum whose meta size runs past the file, and a
  // payload size chosen so that an unchecked subtraction would wrap around.
  const std::string meta = "m", payload = "payload";
  entry::Header h = entry::make_header(kKey, Emit::cubin, meta, payload);
  std::string file(reinterpret_cast<const char*>(&h), sizeof h);
  file += meta + payload;
  ASSERT_EQ(entry::check(file, &kKey, nullptr, nullptr), "");
  h.meta_size = file.size() - 10;  // more than the 8 body bytes, less than the file
  h.payload_size = std::uint64_t(0) - (h.meta_size - 8);
  entry::seal(h);
  std::memcpy(file.data(), &h, sizeof h);
  EXPECT_NE(entry::check(file, &kKey, nullptr, nullptr).find("size mismatch"), std::string::npos);
}

TEST(EntryFormat, UnknownPayloadKindIsNeverListed) {
  test::TempDir dir;
  DiskCache cache(dir.path());
  cache.store(kKey, Emit::cubin, "", kPayload);
  std::string file = test::read_file(cache.entry_path(kKey, Emit::cubin));
  entry::Header h;
  std::memcpy(&h, file.data(), sizeof h);
  h.kind = 77;
  entry::seal(h);
  std::memcpy(file.data(), &h, sizeof h);
  test::write_file(cache.entry_path(kKey, Emit::cubin), file);
  std::vector<std::string> problems;
  EXPECT_TRUE(cache.list(&problems).empty());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("unknown payload kind 77"), std::string::npos) << problems[0];
  EXPECT_FALSE(cache.load(kKey, Emit::cubin).has_value());
}

// An autotuning record is its own kind of entry: its own file suffix, listed as
// "tuning", and never taken for a stage's artifact under the same key.
TEST(EntryFormat, TuningRecordsAreTheirOwnKind) {
  test::TempDir dir;
  DiskCache cache(dir.path());
  cache.store(kKey, EntryKind::tuning(), "autotune=gemm ...\n", "dtype=bf16 bm=128");
  EXPECT_EQ(cache.entry_path(kKey, EntryKind::tuning()).extension(), ".tuning");
  EXPECT_EQ(cache.load(kKey, EntryKind::tuning()), "dtype=bf16 bm=128");
  EXPECT_FALSE(cache.load(kKey, Emit::ptx).has_value());
  const std::vector<DiskEntryInfo> entries = cache.list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].kind, EntryKind::tuning());
  EXPECT_EQ(entries[0].kind.name(), "tuning");
  EXPECT_FALSE(EntryKind::from_code(5).has_value());
  EXPECT_EQ(EntryKind::from_code(EntryKind(Emit::cubin).code()), EntryKind(Emit::cubin));
}
