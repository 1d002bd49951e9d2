// mojo/environment.hpp on top of core/config (the one reader of the
// variables); the remote tier's URL is parsed here, so that a bad one names
// the variable it came from.
#include "mojo/environment.hpp"

#include <fmt/format.h>

#include "cache/remote.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "mojo/error.hpp"

namespace mojo::environment {

std::optional<std::string> device() { return config::device("MOJO_JIT_DEVICE"); }

std::vector<std::filesystem::path> readonly_cache_dirs() { return config::paths("MOJO_JIT_CACHE_READONLY_DIRS"); }

std::optional<std::uint64_t> cache_max_bytes() {
  return config::number("MOJO_JIT_CACHE_MAX_BYTES", 1, UINT64_MAX, "a positive number of bytes");
}

std::optional<std::string> remote_cache() {
  std::optional<std::string> url = config::text("MOJO_JIT_REMOTE");
  if (url) {
    try {  // parsed now (it connects on first use)
      RemoteCache parsed(*url);
    } catch (const InvalidArgumentError& e) {
      throw InvalidArgumentError(fmt::format("MOJO_JIT_REMOTE='{}': {}", *url, e.what()));
    }
  }
  return url;
}

void check_log() { log::check_config(); }

}  // namespace mojo::environment
