// The environment: every MOJO_JIT_* variable through one strict reader.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "core/config.hpp"
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

// The Runtime reads the same way: a bad value stops it with the variable's name.
TEST(Config, TheRuntimeRejectsABadValue) {
  ScopedEnv e("MOJO_JIT_CACHE_MAX_BYTES", "1GB");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { Runtime rt; }),
            "MOJO_JIT_CACHE_MAX_BYTES='1GB': expected a positive number of bytes, a whole number from 1 to "
            "18446744073709551615");
}
