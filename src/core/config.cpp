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

std::optional<std::string> device(const char* name) {
  const std::optional<std::string> v = text(name);
  if (!v) return v;
  const std::string_view s = *v;
  const auto ordinal = [](std::string_view n) {
    return !n.empty() && n.size() <= 9 && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (s == "cuda" || s == "cpu" || (s.starts_with("cuda:") && ordinal(s.substr(5)))) return v;
  if (s.starts_with("cpu:")) {
    try {
      (void)Target::parse(s.substr(4));
      return v;
    } catch (const InvalidArgumentError& e) {
      throw InvalidArgumentError(fmt::format("{}='{}': {}", name, s, e.what()));
    }
  }
  throw InvalidArgumentError(
      fmt::format("{}='{}': expected cuda, cuda:N, cpu or cpu:ARCH (e.g. cpu:sm_90a)", name, s));
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
