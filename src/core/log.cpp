#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/config.hpp"

namespace mojo::log {

namespace {
// MOJO_JIT_LOG now: InvalidArgumentError for a value that is not a level.
Level configured() {
  const std::string v = config::choice("MOJO_JIT_LOG", {"error", "warn", "info", "debug"}).value_or("warn");
  if (v == "error") return Level::error;
  if (v == "info") return Level::info;
  if (v == "debug") return Level::debug;
  return Level::warn;
}
}  // namespace

Level level() noexcept {
  static const Level l = []() noexcept {
    try {
      return configured();
    } catch (...) {  // reported by check_config(); a log line is no place to throw
      return Level::warn;
    }
  }();
  return l;
}

void check_config() { (void)configured(); }

void write(Level l, std::string_view message) {
  if (!enabled(l)) return;
  static constexpr const char* kNames[] = {"error", "warning", "info", "debug"};
  static std::mutex m;  // whole lines, even from many threads
  std::lock_guard lock(m);
  std::fprintf(stderr, "mojo-jit: %s: %.*s\n", kNames[int(l)], int(message.size()), message.data());
}

}  // namespace mojo::log
