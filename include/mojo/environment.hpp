// The MOJO_JIT_* variables a tool reads beside a Runtime, read as the Runtime
// reads them (README "Environment"): a value a variable does not take is an
// InvalidArgumentError that names the variable; unset or empty is nullopt.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mojo::environment {

// MOJO_JIT_DEVICE: cuda, cuda:N, cpu or cpu:ARCH.
std::optional<std::string> device();
// MOJO_JIT_CACHE_READONLY_DIRS, ':'-separated.
std::vector<std::filesystem::path> readonly_cache_dirs();
// MOJO_JIT_CACHE_MAX_BYTES.
std::optional<std::uint64_t> cache_max_bytes();
// MOJO_JIT_REMOTE, a URL this build can serve (redis://HOST:PORT[/DB]).
std::optional<std::string> remote_cache();
// MOJO_JIT_LOG: throws for a level it does not name.
void check_log();

}  // namespace mojo::environment
