#include "core/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "mojo/error.hpp"
#include "mojo/target.hpp"

extern char** environ;

namespace mojo::config {
namespace {

// `digits` as a whole number in [min, max]; none for anything else (a sign, a space, a number too large).
std::optional<std::uint64_t> whole_number(std::string_view digits, std::uint64_t min, std::uint64_t max) {
  std::uint64_t n = 0;
  const char* const end = digits.data() + digits.size();
  const auto [stop, error] = std::from_chars(digits.data(), end, n);
  if (digits.empty() || error != std::errc() || stop != end || n < min || n > max) return std::nullopt;
  return n;
}

}  // namespace

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
  const std::optional<std::uint64_t> n = whole_number(*v, min, max);
  if (!n)
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
  DeviceSpec d;
  if (spec == "cuda") return d;
  if (spec.starts_with("cuda:")) {
    if (const auto ordinal = whole_number(spec.substr(5), 0, 999999999)) {
      d.ordinal = int(*ordinal);
      return d;
    }
  }
  d.cpu = true;
  if (spec == "cpu") return d;
  if (spec.starts_with("cpu:")) {
    const std::string_view rest = spec.substr(4);
    const std::size_t comma = rest.find(',');
    if (comma != std::string_view::npos && rest.substr(comma + 1).starts_with("sms="))
      d.sms = int(whole_number(rest.substr(comma + 5), 1, 1024).value_or(0));
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
