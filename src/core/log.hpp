// One line per event to stderr, prefixed "mojo-jit: <level>: ".
// MOJO_JIT_LOG=error|warn|info|debug picks how much (default warn):
//   warn   faults the user must hear about (corrupt entry, unusable cache dir)
//   info   each compile with its cause, evictions, prewarm progress
//   debug  disk hits, lock waits
#pragma once

#include <string>
#include <string_view>

namespace mojo::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

// MOJO_JIT_LOG's level, read once. Never throws (logging happens on paths
// that must not): a value that names no level logs as warn here, and is an
// error from check_config().
Level level() noexcept;
// Throws InvalidArgumentError naming MOJO_JIT_LOG and the levels it takes
// when its value is none of them. The Runtime's constructor and the CLI call
// it first, so that a bad value reaches the caller as that error.
void check_config();
inline bool enabled(Level l) noexcept { return l <= level(); }
void write(Level l, std::string_view message);

inline void error(std::string_view m) { write(Level::error, m); }
inline void warn(std::string_view m) { write(Level::warn, m); }
inline void info(std::string_view m) { write(Level::info, m); }
inline void debug(std::string_view m) { write(Level::debug, m); }

}  // namespace mojo::log
