#include "compiler/diagnostics.hpp"

#include <fmt/format.h>

#include <regex>
#include <set>
#include <sstream>
#include <vector>

namespace mojo::diagnostics {

std::string excerpt(std::string_view source, std::string_view file, int line, int context) {
  static const std::regex line_marker(R"re(^#line (\d+) "([^"]*)"$)re");
  std::stringstream in{std::string(source)};
  std::string current_file;
  int current_line = 0;
  std::string out;
  for (std::string text; std::getline(in, text);) {
    std::smatch m;
    if (std::regex_match(text, m, line_marker)) {
      current_line = std::stoi(m[1]);
      current_file = m[2];
      continue;
    }
    if (current_file == file && current_line >= line - context && current_line <= line + context)
      out += fmt::format("{} {:5} | {}\n", current_line == line ? '>' : ' ', current_line, text);
    ++current_line;
  }
  return out;
}

namespace {
struct Location {
  std::string file;
  int line;
  bool operator<(const Location& o) const { return std::tie(file, line) < std::tie(o.file, o.line); }
};

std::vector<Location> error_locations(std::string_view log) {
  static const std::regex nvrtc_re(R"re(^([^\s(]+)\((\d+)\): (?:catastrophic )?error)re");
  static const std::regex clang_re(R"re(^([^\s:]+):(\d+):\d+: (?:fatal )?error)re");
  std::vector<Location> out;
  std::set<Location> seen;
  std::stringstream in{std::string(log)};
  for (std::string text; std::getline(in, text);) {
    std::smatch m;
    if (std::regex_search(text, m, nvrtc_re) || std::regex_search(text, m, clang_re)) {
      Location loc{m[1], std::stoi(m[2])};
      if (seen.insert(loc).second) out.push_back(loc);
    }
  }
  return out;
}
}  // namespace

std::string annotate(std::string_view log, std::string_view source) {
  std::string out(log);
  if (!out.empty() && out.back() != '\n') out += '\n';
  for (const Location& loc : error_locations(log)) {
    std::string lines = excerpt(source, loc.file, loc.line);
    if (!lines.empty()) out += fmt::format("\n{}:{}:\n{}", loc.file, loc.line, lines);
  }
  return out;
}

std::string first_error(std::string_view log) {
  std::stringstream in{std::string(log)};
  for (std::string text; std::getline(in, text);)
    if (text.find("error") != std::string::npos) return text;
  return "no error message in the log";
}

}  // namespace mojo::diagnostics
