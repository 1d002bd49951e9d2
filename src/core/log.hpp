// One line to stderr, prefixed "mojo-jit: ". Used for the few events a user
// must hear about without an exception: a corrupt cache entry, a cache
// directory that cannot be written.
#pragma once

#include <cstdio>
#include <string>

namespace mojo::log {

inline void warn(const std::string& message) { std::fprintf(stderr, "mojo-jit: warning: %s\n", message.c_str()); }

}  // namespace mojo::log
