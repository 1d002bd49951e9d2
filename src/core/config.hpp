// Every MOJO_JIT_* environment variable is read here and nowhere else, with
// one strict parser: a value a variable does not accept is an
// InvalidArgumentError that names the variable and what it accepts, never a
// silent default. An unset or empty variable is absent. The library and the
// CLI both read through these; README "Environment" lists them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/target.hpp"

namespace mojo::config {

// The variables, as README documents them (a MOJO_JIT_* variable not in this
// list is reported once, so that a misspelt one is not silently ignored).
inline constexpr std::string_view kVariables[] = {
    "MOJO_JIT_AUTOTUNE",      "MOJO_JIT_BACKEND" /* read by the Python package */, "MOJO_JIT_CACHE_DIR",        "MOJO_JIT_CACHE_MAX_BYTES",   "MOJO_JIT_CACHE_READONLY_DIRS",
    "MOJO_JIT_CACHE_TRUST",   "MOJO_JIT_COMPILER",         "MOJO_JIT_CPU_POISON",        "MOJO_JIT_CPU_SCHEDULE",      "MOJO_JIT_CPU_THREADS",
    "MOJO_JIT_DEBUG_CHECKS",  "MOJO_JIT_DEVICE",           "MOJO_JIT_DISABLE_DISK_CACHE", "MOJO_JIT_DUMP",
    "MOJO_JIT_HOST_CXX",      "MOJO_JIT_LOCK_TIMEOUT_MS",  "MOJO_JIT_LOG",               "MOJO_JIT_OFFLINE",     "MOJO_JIT_PDL",     "MOJO_JIT_PTXAS",
    "MOJO_JIT_REMOTE",        "MOJO_JIT_SETUP_TORCH" /* read by tools/setup.sh */, "MOJO_JIT_TEMPLATE_PATH",
    "MOJO_JIT_TEST_DEVICE",
};

// The value, when set and not empty.
std::optional<std::string> text(const char* name);
// 1/true/yes/on or 0/false/no/off; unset: false.
bool flag(const char* name);
// A whole number in [min, max].
std::optional<std::uint64_t> number(const char* name, std::uint64_t min, std::uint64_t max, std::string_view what);
// ':'-separated directories (empty items skipped).
std::vector<std::filesystem::path> paths(const char* name);
// One of `choices`.
std::optional<std::string> choice(const char* name, std::initializer_list<std::string_view> choices);

// A device as a string names it (MOJO_JIT_DEVICE, RuntimeOptions::device,
// Device::open): "cuda" (GPU 0), "cuda:N", "cpu" (emulating sm_80),
// "cpu:ARCH" (a target such as sm_90a) or "cpu:ARCH,sms=N" (N SMs, 1 to
// 1024; 0 here: the target's reference GPU's).
struct DeviceSpec {
  bool cpu = false;
  int ordinal = 0;
  Target target{80, false};
  int sms = 0;
};
// A malformed spec is an InvalidArgumentError, "WHAT: expected ...", an
// unknown ARCH the target's ArchError.
DeviceSpec parse_device(std::string_view spec, std::string_view what);
// The variable's device, checked when read, so that a bad value is an error
// naming the variable before any device is opened.
std::optional<std::string> device(const char* name);

// The MOJO_JIT_* variables set in this environment that kVariables lacks.
std::vector<std::string> unknown_variables();

}  // namespace mojo::config
