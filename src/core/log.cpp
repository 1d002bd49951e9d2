#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace mojo::log {

Level level() noexcept {
  static const Level l = [] {
    const char* env = std::getenv("MOJO_JIT_LOG");
    std::string_view v = env ? env : "";
    if (v == "error") return Level::error;
    if (v == "info") return Level::info;
    if (v == "debug") return Level::debug;
    return Level::warn;
  }();
  return l;
}

void write(Level l, std::string_view message) {
  if (!enabled(l)) return;
  static constexpr const char* kNames[] = {"error", "warning", "info", "debug"};
  static std::mutex m;  // whole lines, even from many threads
  std::lock_guard lock(m);
  std::fprintf(stderr, "mojo-jit: %s: %.*s\n", kNames[int(l)], int(message.size()), message.data());
}

}  // namespace mojo::log
