// Many processes, one cache: racing cold starts, locks whose holder dies or
// stalls, a disk that fills up, a directory this user cannot write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>

#include "mojo/cache.hpp"
#include "test_util.hpp"

using namespace mojo;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {
const KernelKey kKey = compute_key(KeyInputs{"lock test", "k", "p", "sm_90", "c", Emit::cubin});
const std::string kSpec = "rms_norm --dtype bf16 --shape x=4x3072 --arch sm_90";

// A child process that takes the key's lock, writes a byte to `ready`, then
// sleeps `hold_ms` (or until killed) and exits.
pid_t hold_lock_in_child(const fs::path& dir, int hold_ms, int ready[2]) {
  pid_t pid = ::fork();
  if (pid == 0) {
    KeyLock lock = DiskCache(dir).lock(kKey, Emit::cubin, 1s);
    char c = lock.held() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::usleep(useconds_t(hold_ms) * 1000);
    ::_exit(0);
  }
  char c = 0;
  EXPECT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  return pid;
}
}  // namespace

TEST(CacheProcesses, RacingColdStartsCompileEachKeyOnce) {
  test::TempDir dir;
  const int n = 6;
  std::string cmd = "for i in $(seq " + std::to_string(n) + "); do " + std::string(MOJO_TEST_CLI) + " --emit=cubin " +
                    kSpec + " -o /dev/null --stats --cache-dir " + dir.str() + " & done; wait";
  auto r = test::run_command(cmd);
  std::regex stats_re(R"(cache: .*: (\d+) disk hits, \d+ remote hits, (\d+) compiles)");
  int compiles = 0, hits = 0, lines = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), stats_re), end; it != end; ++it) {
    hits += std::stoi((*it)[1]);
    compiles += std::stoi((*it)[2]);
    ++lines;
  }
  EXPECT_EQ(lines, n) << r.output;
  EXPECT_EQ(compiles, 1) << r.output;
  EXPECT_EQ(hits, n - 1) << r.output;
  std::vector<std::string> problems;
  EXPECT_EQ(DiskCache(dir.path()).list(&problems).size(), 1u);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(DiskCache(dir.path()).usage().stale_files, 0u) << "no lock or temp file left behind";
}

TEST(CacheProcesses, LockHeldByAnotherProcessIsWaitedFor) {
  test::TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = hold_lock_in_child(dir.path(), 300, ready);
  auto start = std::chrono::steady_clock::now();
  KeyLock lock = DiskCache(dir.path()).lock(kKey, Emit::cubin, 10s);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(lock.held());
  EXPECT_TRUE(lock.waited());
  EXPECT_GE(waited, 200ms);
  ::waitpid(child, nullptr, 0);
}

TEST(CacheProcesses, LockOfAKilledHolderIsRecoveredAtOnce) {
  test::TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = hold_lock_in_child(dir.path(), 60000, ready);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  auto start = std::chrono::steady_clock::now();
  KeyLock lock = DiskCache(dir.path()).lock(kKey, Emit::cubin, 10s);
  EXPECT_TRUE(lock.held());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "the kernel released the dead holder's flock";
}

TEST(CacheProcesses, StalledHolderTimesOutWithAReason) {
  test::TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = hold_lock_in_child(dir.path(), 60000, ready);
  KeyLock lock = DiskCache(dir.path()).lock(kKey, Emit::cubin, 150ms);
  EXPECT_EQ(lock.status(), KeyLock::Status::timed_out);
  EXPECT_NE(lock.problem().find("gave up waiting 150 ms"), std::string::npos) << lock.problem();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(CacheProcesses, DiskFullWhileWritingKeepsTheKernelAndWarnsOnce) {
  // ulimit -f makes every write past 8 KiB fail (EFBIG), as a full disk fails
  // with ENOSPC: the same write error path. PTX goes to a pipe, unaffected.
  test::TempDir dir;
  auto r = test::run_command("trap '' XFSZ; ulimit -f 8; " + std::string(MOJO_TEST_CLI) + " --emit=ptx " + kSpec +
                             " --cache-dir " + dir.str() + " --stats");
  EXPECT_EQ(r.exit_code, 0) << r.output.substr(0, 500);
  EXPECT_NE(r.output.find(".visible .entry rms_norm_bf16_hidden_3072"), std::string::npos) << "the PTX still comes out";
  std::regex warn_re("mojo-jit: warning: cannot write cache entry .*: File too large; the disk cache is off");
  EXPECT_TRUE(std::regex_search(r.output, warn_re)) << r.output.substr(r.output.size() - 600);
  EXPECT_EQ(r.output.find("mojo-jit: warning:"), r.output.rfind("mojo-jit: warning:")) << "said once";
  EXPECT_EQ(DiskCache(dir.path()).usage().entries, 0u);
  EXPECT_EQ(DiskCache(dir.path()).usage().stale_files, 0u) << "the temp file was removed";
}

TEST(CacheProcesses, ReadOnlyDirectoryFallsBackToMemoryOnce) {
  test::TempDir dir;
  fs::path cache = dir.path() / "cache";
  fs::create_directories(cache);
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(cache, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                             fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  // As root, permissions do not bind: run the CLI as an unprivileged user.
  std::string as_user = ::geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
  // Whether that user can run the CLI at all: not when a directory above the build is private to its owner
  // (the binary, or the library it loads, is out of reach), whatever the error says.
  const auto probe = test::run_command(as_user + std::string(MOJO_TEST_CLI) + " --help");
  if (probe.exit_code != 0)
    GTEST_SKIP() << "the unprivileged user cannot run the test binaries here: " << probe.output.substr(0, 300);
  auto r = test::run_command(as_user + std::string(MOJO_TEST_CLI) + " --emit=ptx " + kSpec + " --cache-dir " +
                             cache.string() + " --stats");
  EXPECT_EQ(r.exit_code, 0) << r.output.substr(0, 800);
  EXPECT_NE(r.output.find(".visible .entry"), std::string::npos);
  std::regex warn_re("mojo-jit: warning: .*Permission denied; the disk cache is off for this process");
  EXPECT_TRUE(std::regex_search(r.output, warn_re)) << r.output.substr(r.output.size() > 800 ? r.output.size() - 800 : 0);
  std::size_t warnings = 0;
  for (std::size_t at = 0; (at = r.output.find("mojo-jit: warning:", at)) != std::string::npos; ++at) ++warnings;
  EXPECT_EQ(warnings, 1u) << "said once";
}

// The compilers are plugins loaded on a miss: a new process served by the disk cache maps none of them (nor
// NVRTC, LLVM, clang); the first, which compiles, loads NVRTC's. The dynamic loader lists what
// each process loads (LD_DEBUG=files).
TEST(CacheProcesses, AProcessServedByTheCacheLoadsNoCompiler) {
  test::TempDir dir;
  const std::string cli = std::string(MOJO_TEST_CLI) + " --emit=ptx " + kSpec + " --cache-dir " + dir.str();
  auto loaded = [&] { return test::run_command("LD_DEBUG=files " + cli + " --stats 2>&1 >/dev/null").output; };
  const std::string cold = loaded(), warm = loaded();
  EXPECT_NE(cold.find("libmojo_jit_nvrtc.so"), std::string::npos) << "the compile loads NVRTC's plugin";
  EXPECT_NE(cold.find("libnvrtc"), std::string::npos);
  EXPECT_NE(warm.find("1 disk hits, 0 remote hits, 0 compiles"), std::string::npos) << warm.substr(warm.size() > 600 ? warm.size() - 600 : 0);
  for (const char* library : {"mojo_jit_nvrtc", "mojo_jit_llvm", "libnvrtc", "libLLVM", "libclang-cpp"})
    EXPECT_EQ(warm.find(library), std::string::npos) << library << " is loaded by a process that compiles nothing";
}

TEST(CacheProcesses, RacingPrewarmsCompileEachKeyOnceBetweenThem) {
  test::TempDir dir;
  test::write_file(dir.path() / "m.toml", "targets = [\"sm_90\"]\n[[kernel]]\nop = \"rms_norm\"\ndtypes = [\"f32\"]\n"
                                          "shapes = [{ x = [1, 64] }, { x = [1, 128] }, { x = [1, 192] }, { x = [1, 256] }]\n");
  std::string cmd;
  for (int p = 0; p < 4; ++p)
    cmd += std::string(MOJO_TEST_CLI) + " prewarm -j 1 --manifest " + (dir.path() / "m.toml").string() +
           " --emit ptx --cache-dir " + (dir.path() / "cache").string() + " 2>/dev/null & ";
  auto r = test::run_command(cmd + "wait");
  std::regex summary_re(R"(4 specializations: (\d+) compiled, (\d+) already cached, 0 failed)");
  int compiled = 0, summaries = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), summary_re), end; it != end; ++it) {
    compiled += std::stoi((*it)[1]);
    ++summaries;
  }
  EXPECT_EQ(summaries, 4) << r.output;
  EXPECT_EQ(compiled, 4) << "each key compiled by exactly one process\n" << r.output;
}
