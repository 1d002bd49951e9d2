#include "core/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "mojo/error.hpp"
#include "mojo/target.hpp"

extern char** environ;

namespace mojo::config {

std::optional<std::string> text(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool flag(const char* name) {
  const std::optional<std::string> v = text(name);
  if (!v) return false;
  for (std::string_view yes : {"1", "true", "yes", "on"})
    if (*v == yes) return true;
  for (std::string_view no : {"0", "false", "no", "off"})
    if (*v == no) return false;
  throw InvalidArgumentError(fmt::format("{}='{}': expected 1, true, yes or on, or 0, false, no or off", name, *v));
}

std::optional<std::uint64_t> number(const char* name, std::uint64_t min, std::uint64_t max, std::string_view what) {
  const std::optional<std::string> v = text(name);
  if (!v) return std::nullopt;
  const bool digits = std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '9'; });
  errno = 0;
  const unsigned long long n = digits ? std::strtoull(v->c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || n < min || n > max)
    throw InvalidArgumentError(fmt::format("{}='{}': expected {}, a whole number from {} to {}", name, *v, what, min, max));
  return n;
}

std::vector<std::filesystem::path> paths(const char* name) {
  std::vector<std::filesystem::path> out;
  if (const std::optional<std::string> v = text(name)) {
    std::stringstream in(*v);
    for (std::string dir; std::getline(in, dir, ':');)
      if (!dir.empty()) out.emplace_back(dir);
  }
  return out;
}

std::optional<std::string> choice(const char* name, std::initializer_list<std::string_view> choices) {
  const std::optional<std::string> v = text(name);
  if (!v || std::find(choices.begin(), choices.end(), *v) != choices.end()) return v;
  throw InvalidArgumentError(fmt::format("{}='{}': expected one of {}", name, *v, fmt::join(choices, ", ")));
}

DeviceSpec parse_device(std::string_view spec, std::string_view what) {
  // A whole number in [low, high], else -1.
  const auto whole = [](std::string_view digits, int low, int high) {
    if (digits.empty() || digits.size() > 9) return -1;
    int n = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return -1;
      n = n * 10 + (c - '0');
    }
    return n >= low && n <= high ? n : -1;
  };
  DeviceSpec d;
  if (spec == "cuda") return d;
  if (spec.starts_with("cuda:")) {
    d.ordinal = whole(spec.substr(5), 0, 999999999);
    if (d.ordinal >= 0) return d;
  }
  d.cpu = true;
  if (spec == "cpu") return d;
  if (spec.starts_with("cpu:")) {
    const std::string_view rest = spec.substr(4);
    const std::size_t comma = rest.find(',');
    if (comma != std::string_view::npos && rest.substr(comma + 1).starts_with("sms="))
      d.sms = whole(rest.substr(comma + 5), 1, 1024);
    if (comma == std::string_view::npos || d.sms > 0) {
      d.target = Target::parse(rest.substr(0, comma));
      return d;
    }
  }
  throw InvalidArgumentError(fmt::format(
      "{}: expected cuda, cuda:N, cpu, cpu:ARCH or cpu:ARCH,sms=N (e.g. cpu:sm_90a, cpu:sm_90a,sms=4)", what));
}

std::optional<std::string> device(const char* name) {
  const std::optional<std::string> v = text(name);
  if (!v) return v;
  const std::string what = fmt::format("{}='{}'", name, *v);
  try {
    (void)parse_device(*v, what);
  } catch (const ArchError& e) {
    throw InvalidArgumentError(fmt::format("{}: {}", what, e.what()));
  }
  return v;
}

std::vector<std::string> unknown_variables() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("MOJO_JIT_")) continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    if (std::find(std::begin(kVariables), std::end(kVariables), name) == std::end(kVariables)) out.emplace_back(name);
  }
  return out;
}

}  // namespace mojo::config
