// The remote cache tier against a real redis-server (the Debian package) on a loopback port: processes with
// empty, separate cache directories served by it; a corrupt value detected, deleted and rewritten; a server
// that is gone costs one warning, never a failure.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include "cache/entry.hpp"
#include "cache/remote.hpp"
#include "mojo/error.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

namespace mojo {
namespace {

// A port nothing listens on now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A redis-server of its own for each test, with nothing saved to disk.
class RedisServer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::run_command("command -v redis-server && command -v redis-cli").exit_code != 0)
      GTEST_SKIP() << "no redis-server (tools/setup.sh installs the Debian package)";
    port = free_port();
    url = fmt::format("redis://127.0.0.1:{}", port);
    const auto r = test::run_command(fmt::format(
        "redis-server --port {} --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir {} --pidfile {}/pid "
        "--logfile {}/log",
        port, dir.str(), dir.str(), dir.str()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (int i = 0; i < 100 && !alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(alive()) << "redis-server did not start";
  }
  void TearDown() override { stop(); }
  bool alive() { return test::run_command(fmt::format("redis-cli -p {} ping", port)).output.find("PONG") == 0; }
  void stop() {
    if (port != 0) test::run_command(fmt::format("redis-cli -p {} shutdown nosave", port));
  }
  // mojo-jit compiling one specialization with the remote tier and a cache dir of its own; its output.
  std::string cli(const std::string& cache_dir, const std::string& remote = "") {
    return test::run_command(fmt::format("MOJO_JIT_REMOTE={} {} --emit=ptx rms_norm --dtype bf16 --shape x=1x4096 "
                                         "--arch sm_90 --stats --cache-dir {} >/dev/null",
                                         remote.empty() ? url : remote, MOJO_TEST_CLI,
                                         (dir.path() / cache_dir).string()))
        .output;
  }
  test::TempDir dir;
  int port = 0;
  std::string url;
};

TEST_F(RedisServer, ASecondProcessWithAnEmptyCacheDirIsServedByRedis) {
  const std::string first = cli("a"), second = cli("b");
  EXPECT_NE(first.find("0 remote hits, 1 compiles"), std::string::npos) << first;
  EXPECT_NE(second.find("1 remote hits, 0 compiles"), std::string::npos) << second;
  // ... and keeps it on its own disk: a third process there needs neither.
  const std::string third = cli("b");
  EXPECT_NE(third.find("1 disk hits, 0 remote hits, 0 compiles"), std::string::npos) << third;
}

TEST_F(RedisServer, AFlippedByteInAValueIsDetectedDeletedAndRewritten) {
  cli("a");
  RuntimeOptions o;
  o.disk_cache = false;
  Runtime rt(o);
  const std::vector<Tensor> t{
      {TensorSpec(DType::bf16, {1, 4096})}, {TensorSpec(DType::bf16, {1, 4096})}, {TensorSpec(DType::bf16, {4096})}};
  const KernelKey key = rt.key("rms_norm", t, {}, Target::parse("sm_90"), Emit::ptx);
  RemoteCache remote(url);
  std::optional<std::string> value = remote.get(key, Emit::ptx);
  ASSERT_TRUE(value.has_value()) << "the first process wrote " << RemoteCache::key_of(key, Emit::ptx);
  (*value)[value->size() / 2] ^= 0x10;
  remote.put(key, Emit::ptx, *value);
  const std::string second = cli("b");
  EXPECT_NE(second.find("unusable entry in the remote cache for rms_norm"), std::string::npos) << second;
  EXPECT_NE(second.find("0 remote hits, 1 compiles"), std::string::npos) << second;
  // Rewritten by the compile: whole and valid again.
  value = remote.get(key, Emit::ptx);
  ASSERT_TRUE(value.has_value());
  const EntryKind kind = Emit::ptx;
  entry::Header h{};
  EXPECT_EQ(entry::check(*value, &key, &kind, &h), "");
}

TEST_F(RedisServer, AServerGoneCostsOneWarningNeverAFailure) {
  // Nothing listening: the process compiles as if there were no remote tier, and says so once.
  const std::string refused = cli("a", fmt::format("redis://127.0.0.1:{}", free_port()));
  EXPECT_NE(refused.find("0 remote hits, 1 compiles"), std::string::npos) << refused;
  EXPECT_EQ(std::regex_search(refused, std::regex("mojo-jit: warning: remote cache redis://127.0.0.1:\\d+: .*; going "
                                                  "on without it in this process")),
            true)
      << refused;
  // The server killed between two compiles of one process: both compile, one warning.
  RuntimeOptions o;
  o.disk_cache = false;
  o.remote_cache = url;
  Runtime rt(o);
  auto spec = [](std::int64_t hidden) {
    return std::vector<Tensor>{{TensorSpec(DType::f32, {1, hidden})},
                               {TensorSpec(DType::f32, {1, hidden})},
                               {TensorSpec(DType::f32, {hidden})}};
  };
  EXPECT_TRUE(rt.compile("rms_norm", spec(64), {}, Target::parse("sm_90"), Emit::ptx).compiled);
  stop();
  port = 0;
  EXPECT_TRUE(rt.compile("rms_norm", spec(128), {}, Target::parse("sm_90"), Emit::ptx).compiled);
  EXPECT_EQ(rt.stats().compiles, 2u);
}

// A fleet: eight processes on two machines (cache dirs) prewarming the same 50 keys at once. A process claims a
// key in Redis before compiling it, the others wait for its entry: each key is compiled once in the fleet, and
// no entry is corrupt.
TEST_F(RedisServer, EightProcessesOnTwoMachinesRacingOnFiftyKeys) {
  std::string manifest = "targets = [\"sm_90\"]\n[[kernel]]\nop = \"rms_norm\"\ndtypes = [\"f32\"]\nshapes = [";
  for (int i = 1; i <= 50; ++i) manifest += fmt::format("{}{{ x = [1, {}] }}", i > 1 ? ", " : "", 64 * i);
  test::write_file(dir.path() / "m.toml", manifest + "]\n");
  std::string cmd;
  for (int p = 0; p < 8; ++p)
    cmd += fmt::format("MOJO_JIT_REMOTE={} {} prewarm -j 1 --manifest {} --emit ptx --cache-dir {} 2>/dev/null & ", url,
                       MOJO_TEST_CLI, (dir.path() / "m.toml").string(), (dir.path() / (p % 2 ? "m1" : "m2")).string());
  const auto r = test::run_command(cmd + "wait");
  std::regex summary_re(R"(50 specializations: (\d+) compiled, (\d+) already cached, 0 failed)");
  int compiled = 0, summaries = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), summary_re), end; it != end; ++it) {
    compiled += std::stoi((*it)[1]);
    ++summaries;
  }
  EXPECT_EQ(summaries, 8) << r.output;
  EXPECT_EQ(compiled, 50) << "each key once in the fleet\n" << r.output;
  for (const char* machine : {"m1", "m2"}) {
    const auto v = test::run_command(
        fmt::format("{} cache verify --cache-dir {}", MOJO_TEST_CLI, (dir.path() / machine).string()));
    EXPECT_NE(v.output.find(": 50 good entries, 0 bad"), std::string::npos) << v.output;
  }
  // The remote tier holds all 50, whole: pulled into a new machine, each is valid.
  const auto pulled = test::run_command(
      fmt::format("{} cache pull --remote {} --cache-dir {}", MOJO_TEST_CLI, url, (dir.path() / "m3").string()));
  EXPECT_NE(pulled.output.find("pulled 50 entries into"), std::string::npos) << pulled.output;
  EXPECT_NE(pulled.output.find("(0 skipped"), std::string::npos) << pulled.output;
}

// A claim whose holder died before compiling: the others wait at most the lock timeout, then compile.
TEST_F(RedisServer, AClaimLeftByADeadHolderDelaysOthersAtMostTheLockTimeout) {
  const auto described = test::run_command(fmt::format(
      "{} describe rms_norm --dtype bf16 --shape x=1x4096 --arch sm_90 --emit ptx --no-cache", MOJO_TEST_CLI));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(described.output, m, std::regex("key: +([0-9a-f]{32})"))) << described.output;
  test::run_command(fmt::format("redis-cli -p {} set mojo-jit:v1:{}.ptx.claim 1 px 60000", port, m[1].str()));
  const auto start = std::chrono::steady_clock::now();
  const std::string out =
      test::run_command(
          fmt::format(
              "MOJO_JIT_LOCK_TIMEOUT_MS=300 MOJO_JIT_REMOTE={} {} --emit=ptx rms_norm --dtype bf16 --shape x=1x4096 "
              "--arch sm_90 --stats --cache-dir {} >/dev/null",
              url, MOJO_TEST_CLI, (dir.path() / "a").string()))
          .output;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(out.find("0 remote hits, 1 compiles"), std::string::npos) << out;
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 5.0);
}

// cache push fills the remote tier from a directory (CI prewarms a directory, then pushes it); a machine
// with an empty cache is then served with no compile.
TEST_F(RedisServer, PushFillsTheRemoteTierFromADirectory) {
  const auto prewarm = test::run_command(fmt::format("{} prewarm --ops rms_norm --arch sm_90 --emit ptx --cache-dir {}",
                                                     MOJO_TEST_CLI, (dir.path() / "ci").string()));
  ASSERT_EQ(prewarm.exit_code, 0) << prewarm.output;
  const auto pushed = test::run_command(
      fmt::format("{} cache push --remote {} --cache-dir {}", MOJO_TEST_CLI, url, (dir.path() / "ci").string()));
  EXPECT_EQ(pushed.exit_code, 0) << pushed.output;
  EXPECT_NE(pushed.output.find("pushed 3 entries from"), std::string::npos) << pushed.output;
  const std::string served =
      test::run_command(
          fmt::format("MOJO_JIT_REMOTE={} {} --emit=ptx rms_norm --dtype f32 --shape x=32x4096 --arch sm_90 --stats "
                      "--cache-dir {} >/dev/null",
                      url, MOJO_TEST_CLI, (dir.path() / "fresh").string()))
          .output;
  EXPECT_NE(served.find("1 remote hits, 0 compiles"), std::string::npos) << served;
  // A remote tier that is not there: push fails with one line.
  const auto down = test::run_command(fmt::format("{} cache push --remote redis://127.0.0.1:{} --cache-dir {}",
                                                  MOJO_TEST_CLI, free_port(), (dir.path() / "ci").string()));
  EXPECT_EQ(down.exit_code, 1) << down.output;
  EXPECT_NE(down.output.find("mojo-jit: error: cache push: the remote tier"), std::string::npos) << down.output;
}

// compile-all's one module reaches the fleet: each kernel's alias goes to the remote tier beside the
// bundle, and a machine with an empty disk is served the kernel through it (then keeps both on its disk).
TEST_F(RedisServer, AKernelOfABundleIsServedThroughItsAlias) {
  test::write_file(dir.path() / "m.toml", R"([[kernel]]
op = "rms_norm"
dtypes = ["bf16", "f32"]
shapes = [{ x = [1, 4096] }, { x = [1, 1000] }]
)");
  const auto all = test::run_command(fmt::format(
      "MOJO_JIT_REMOTE={} {} compile-all --manifest {} --arch sm_90 --emit ptx --cache-dir {} -o {}", url,
      MOJO_TEST_CLI, (dir.path() / "m.toml").string(), (dir.path() / "a").string(), (dir.path() / "all.ptx").string()));
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const std::string served = cli("b");  // rms_norm bf16 x=1x4096: one of the bundle's kernels
  EXPECT_NE(served.find("1 remote hits, 0 compiles"), std::string::npos) << served;
  const std::string again = cli("b");
  EXPECT_NE(again.find("1 disk hits, 0 remote hits, 0 compiles"), std::string::npos) << again;
  std::size_t aliases = 0, bundles = 0;
  for (const DiskEntryInfo& e : DiskCache(dir.path() / "b").list()) (e.alias ? aliases : bundles) += 1;
  EXPECT_EQ(aliases, 1u);
  EXPECT_EQ(bundles, 1u) << "the bundle, kept beside the alias";

  // push and pull copy aliases and bundles alike: a pulled directory serves offline.
  test::run_command(fmt::format("redis-cli -p {} flushall", port));
  const auto pushed = test::run_command(
      fmt::format("{} cache push --remote {} --cache-dir {}", MOJO_TEST_CLI, url, (dir.path() / "a").string()));
  EXPECT_NE(pushed.output.find("pushed 5 entries from"), std::string::npos) << pushed.output;  // 4 aliases + 1
  const auto pulled = test::run_command(
      fmt::format("{} cache pull --remote {} --cache-dir {}", MOJO_TEST_CLI, url, (dir.path() / "c").string()));
  EXPECT_NE(pulled.output.find("pulled 5 entries into"), std::string::npos) << pulled.output;
  const std::string offline =
      test::run_command(
          fmt::format("MOJO_JIT_OFFLINE=1 {} --emit=ptx rms_norm --dtype f32 --shape x=1x1000 --arch sm_90 --stats "
                      "--cache-dir {} >/dev/null",
                      MOJO_TEST_CLI, (dir.path() / "c").string()))
          .output;
  EXPECT_NE(offline.find("1 disk hits, 0 remote hits, 0 compiles"), std::string::npos) << offline;
}

TEST(RemoteCacheUrl, AMalformedUrlIsAnErrorNamingIt) {
  EXPECT_EQ(test::error_of<InvalidArgumentError>([] { RemoteCache("http://x:1"); }),
            "remote cache 'http://x:1': not a redis:// URL; expected redis://HOST:PORT[/DB]");
  EXPECT_EQ(test::error_of<InvalidArgumentError>([] { RemoteCache("redis://host:port"); }),
            "remote cache 'redis://host:port': bad port; expected redis://HOST:PORT[/DB]");
  EXPECT_EQ(RemoteCache("redis://cache.internal:6380/2").url(), "redis://cache.internal:6380/2");
}

}  // namespace
}  // namespace mojo
