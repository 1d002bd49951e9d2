// The kernel templates: embedded into the library at build time, and
// overridable or extendable from directories on a search path
// (MOJO_JIT_TEMPLATE_PATH and TemplateRegistry::add_search_path), searched
// first, so users add templates without rebuilding.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mojo {

class TemplateRegistry {
 public:
  // Reads MOJO_JIT_TEMPLATE_PATH (':'-separated) after `search_path`.
  explicit TemplateRegistry(std::vector<std::filesystem::path> search_path = {});

  void add_search_path(std::filesystem::path dir);  // searched before the ones already there
  const std::vector<std::filesystem::path>& search_path() const noexcept { return search_path_; }

  // Text of a template file ("rms_norm.cu", "mojo_prelude.cuh"). Throws TemplateNotFoundError.
  std::string load(std::string_view file) const;
  bool contains(std::string_view file) const;
  // The translation unit for `file`: its text with every `#include "name"`
  // of a registry file inlined once, with #line markers so that diagnostics
  // name the original file and line. No absolute paths enter the result.
  std::string expand(std::string_view file) const;
  // One translation unit for several templates (a bundle): each file, and
  // everything they include, inlined once.
  std::string expand(const std::vector<std::string>& files) const;
  // Names of every template available (search path and embedded).
  std::vector<std::string> list() const;

 private:
  std::vector<std::filesystem::path> search_path_;
};

}  // namespace mojo
