#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/config.hpp"
#include "mojo/error.hpp"
#include "mojo/templates.hpp"
#include "templates/embedded.hpp"

namespace mojo {
namespace fs = std::filesystem;

namespace {

// A template name is a plain file name: no directories, so a name can never
// reach outside the search path and keys never see paths.
bool valid_name(std::string_view name) {
  return !name.empty() && name.find('/') == std::string_view::npos && name != "." && name != "..";
}

}  // namespace

TemplateRegistry::TemplateRegistry(std::vector<fs::path> search_path) : search_path_(std::move(search_path)) {
  for (fs::path& dir : config::paths("MOJO_JIT_TEMPLATE_PATH")) search_path_.push_back(std::move(dir));
}

void TemplateRegistry::add_search_path(fs::path dir) { search_path_.insert(search_path_.begin(), std::move(dir)); }

bool TemplateRegistry::contains(std::string_view file) const {
  if (!valid_name(file)) return false;
  for (const fs::path& dir : search_path_) {
    std::error_code ec;
    if (fs::is_regular_file(dir / file, ec)) return true;
  }
  auto all = embedded::templates();
  return std::any_of(all.begin(), all.end(), [&](const embedded::Template& t) { return t.name == file; });
}

std::string TemplateRegistry::load(std::string_view file) const {
  if (!valid_name(file))
    throw TemplateNotFoundError(fmt::format("bad template name '{}': expected a file name such as rms_norm.cu", file));
  for (const fs::path& dir : search_path_) {
    fs::path path = dir / file;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw TemplateNotFoundError(fmt::format("cannot read template {}", path.string()));
    return text.str();
  }
  for (const embedded::Template& t : embedded::templates())
    if (t.name == file) return std::string(t.text);
  std::vector<std::string> dirs;
  for (const fs::path& dir : search_path_) dirs.push_back(dir.string());
  throw TemplateNotFoundError(fmt::format(
      "no template '{}': not embedded and not in the template path ({}); set MOJO_JIT_TEMPLATE_PATH "
      "or add a search path",
      file, dirs.empty() ? "empty" : fmt::format("{}", fmt::join(dirs, ":"))));
}

std::string TemplateRegistry::expand(std::string_view file) const { return expand(std::vector<std::string>{std::string(file)}); }

std::string TemplateRegistry::expand(const std::vector<std::string>& files) const {
  static const std::regex include_re(R"re(^\s*#\s*include\s*"([^"]+)"\s*(//.*)?$)re");
  static const std::regex pragma_once_re(R"re(^\s*#\s*pragma\s+once\s*$)re");
  std::set<std::string, std::less<>> included;
  std::string out;

  // Depth-first inlining, each file at most once: every template is
  // include-once, so a cycle simply stops where a file was already begun.
  auto inline_file = [&](auto& self, std::string_view name) -> void {
    if (!included.emplace(name).second) return;
    std::stringstream text(load(name));
    out += fmt::format("#line 1 \"{}\"\n", name);
    int line_no = 0;
    for (std::string line; std::getline(text, line);) {
      ++line_no;
      std::smatch m;
      if (std::regex_match(line, m, include_re)) {
        std::string target = m[1];
        if (!contains(target))
          throw TemplateNotFoundError(fmt::format("{}:{}: includes \"{}\", which is neither embedded nor on the "
                                                  "template path",
                                                  name, line_no, target));
        self(self, target);
        out += fmt::format("#line {} \"{}\"\n", line_no + 1, name);
      } else if (std::regex_match(line, pragma_once_re)) {
        out += '\n';
      } else {
        out += line;
        out += '\n';
      }
    }
  };
  for (const std::string& file : files) inline_file(inline_file, file);
  return out;
}

std::vector<std::string> TemplateRegistry::list() const {
  std::set<std::string> names;
  for (const embedded::Template& t : embedded::templates()) names.emplace(t.name);
  for (const fs::path& dir : search_path_) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file(ec)) names.insert(e.path().filename().string());
  }
  return {names.begin(), names.end()};
}

}  // namespace mojo
