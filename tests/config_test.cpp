// The environment: every MOJO_JIT_* variable through one strict reader.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "core/config.hpp"
#include "core/log.hpp"
#include "mojo/error.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;
using test::error_of;

namespace {
// Sets a variable for one test, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST(Config, FlagsAcceptTheUsualSpellingsAndRejectOthers) {
  for (const char* yes : {"1", "true", "yes", "on"}) {
    ScopedEnv e("MOJO_JIT_OFFLINE", yes);
    EXPECT_TRUE(config::flag("MOJO_JIT_OFFLINE")) << yes;
  }
  for (const char* no : {"0", "false", "no", "off", ""}) {
    ScopedEnv e("MOJO_JIT_OFFLINE", no);
    EXPECT_FALSE(config::flag("MOJO_JIT_OFFLINE")) << no;
  }
  ScopedEnv e("MOJO_JIT_OFFLINE", "maybe");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { config::flag("MOJO_JIT_OFFLINE"); }),
            "MOJO_JIT_OFFLINE='maybe': expected 1, true, yes or on, or 0, false, no or off");
}

TEST(Config, NumbersAreWholeAndInRange) {
  {
    ScopedEnv e("MOJO_JIT_CPU_THREADS", "4");
    EXPECT_EQ(config::number("MOJO_JIT_CPU_THREADS", 1, 256, "threads"), 4u);
  }
  for (const char* bad : {"0", "257", "4x", "-1", " 4", "99999999999999999999999"}) {
    ScopedEnv e("MOJO_JIT_CPU_THREADS", bad);
    EXPECT_EQ(error_of<InvalidArgumentError>([] { config::number("MOJO_JIT_CPU_THREADS", 1, 256, "threads"); }),
              fmt::format("MOJO_JIT_CPU_THREADS='{}': expected threads, a whole number from 1 to 256", bad));
  }
}

TEST(Config, ChoicesAndPaths) {
  {
    ScopedEnv e("MOJO_JIT_LOG", "loud");
    EXPECT_EQ(error_of<InvalidArgumentError>([] { config::choice("MOJO_JIT_LOG", {"warn", "info"}); }),
              "MOJO_JIT_LOG='loud': expected one of warn, info");
  }
  ScopedEnv e("MOJO_JIT_TEMPLATE_PATH", "/a::/b:");
  const auto paths = config::paths("MOJO_JIT_TEMPLATE_PATH");
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[1], "/b");
}

TEST(Config, AMisspeltVariableIsFound) {
  ScopedEnv e("MOJO_JIT_CACHEDIR", "/tmp/x");
  const auto unknown = config::unknown_variables();
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "MOJO_JIT_CACHEDIR"), unknown.end());
  EXPECT_EQ(std::find(unknown.begin(), unknown.end(), "MOJO_JIT_CACHE_DIR"), unknown.end());
}

// README's "Environment" table names every variable the library reads (and config::kVariables lists).
TEST(Config, TheReadmeDocumentsEveryVariable) {
  const std::string readme = test::read_file(std::filesystem::path(MOJO_TEST_TEMPLATE_DIR) / ".." / "README.md");
  for (std::string_view variable : config::kVariables)
    EXPECT_NE(readme.find("| `" + std::string(variable)), std::string::npos) << variable << " has no row in README";
}

// The Runtime reads the same way: a bad value stops it with the variable's name.
TEST(Config, TheRuntimeRejectsABadValue) {
  ScopedEnv e("MOJO_JIT_CACHE_MAX_BYTES", "1GB");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { Runtime rt; }),
            "MOJO_JIT_CACHE_MAX_BYTES='1GB': expected a positive number of bytes, a whole number from 1 to "
            "18446744073709551615");
}

// A bad MOJO_JIT_LOG is the Runtime's InvalidArgumentError, never a termination from a noexcept logging path;
// logging itself goes on (at warn) whatever the value.
TEST(Config, ABadLogLevelIsAnErrorFromTheRuntime) {
  ScopedEnv e("MOJO_JIT_LOG", "loud");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { mojo::log::check_config(); }),
            "MOJO_JIT_LOG='loud': expected one of error, warn, info, debug");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { Runtime rt; }),
            "MOJO_JIT_LOG='loud': expected one of error, warn, info, debug");
  (void)mojo::log::level();  // noexcept: returns
  mojo::log::debug("not shown");
}

// Every variable the Runtime reads names itself and what it accepts when its value is bad.
TEST(Config, EveryBadValueNamesTheVariableAndWhatItTakes) {
  const struct {
    const char *name, *value, *message;
  } cases[] = {
      {"MOJO_JIT_COMPILER", "gcc", "MOJO_JIT_COMPILER='gcc': expected one of nvrtc, llvm"},
      {"MOJO_JIT_DEVICE", "tpu",
       "MOJO_JIT_DEVICE='tpu': expected cuda, cuda:N, cpu, cpu:ARCH or cpu:ARCH,sms=N (e.g. cpu:sm_90a, "
       "cpu:sm_90a,sms=4)"},
      {"MOJO_JIT_DEVICE", "cuda:x",
       "MOJO_JIT_DEVICE='cuda:x': expected cuda, cuda:N, cpu, cpu:ARCH or cpu:ARCH,sms=N (e.g. cpu:sm_90a, "
       "cpu:sm_90a,sms=4)"},
      {"MOJO_JIT_DEVICE", "cpu:sm_90a,sms=0",
       "MOJO_JIT_DEVICE='cpu:sm_90a,sms=0': expected cuda, cuda:N, cpu, cpu:ARCH or cpu:ARCH,sms=N (e.g. "
       "cpu:sm_90a, cpu:sm_90a,sms=4)"},
      {"MOJO_JIT_DEVICE", "cpu:sm9",
       "MOJO_JIT_DEVICE='cpu:sm9': bad arch 'sm9': expected sm_XY or sm_XYa with compute capability X.Y (e.g. sm_80, "
       "sm_90, sm_90a)"},
      {"MOJO_JIT_REMOTE", "http://cache:6379",
       "MOJO_JIT_REMOTE='http://cache:6379': remote cache 'http://cache:6379': not a redis:// URL; expected "
       "redis://HOST:PORT[/DB]"},
      {"MOJO_JIT_LOCK_TIMEOUT_MS", "soon",
       "MOJO_JIT_LOCK_TIMEOUT_MS='soon': expected milliseconds, a whole number from 0 to 86400000"},
      {"MOJO_JIT_DISABLE_DISK_CACHE", "2",
       "MOJO_JIT_DISABLE_DISK_CACHE='2': expected 1, true, yes or on, or 0, false, no or off"},
      {"MOJO_JIT_DEBUG_CHECKS", "y", "MOJO_JIT_DEBUG_CHECKS='y': expected 1, true, yes or on, or 0, false, no or off"},
  };
  test::TempDir dir;
  for (const auto& c : cases) {
    ScopedEnv e(c.name, c.value);
    EXPECT_EQ(error_of<InvalidArgumentError>([&] {
                RuntimeOptions o;
                o.cache_dir = dir.path();
                Runtime rt(o);
              }),
              c.message)
        << c.name << "=" << c.value;
  }
  // The good values pass the same reader.
  for (const char* good : {"cuda", "cuda:1", "cpu", "cpu:sm_90a"}) {
    ScopedEnv e("MOJO_JIT_DEVICE", good);
    EXPECT_EQ(config::device("MOJO_JIT_DEVICE"), good);
  }
  // An option set in RuntimeOptions wins: the variable is not read.
  ScopedEnv e("MOJO_JIT_COMPILER", "gcc");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  o.compiler = "nvrtc";
  EXPECT_NO_THROW({ Runtime rt(o); });
}
