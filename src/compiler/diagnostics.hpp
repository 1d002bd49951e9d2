// Turns a compiler log into something a template author can act on: each
// "file(line): error" gets the source lines around it, found through the
// #line markers TemplateRegistry::expand leaves in the translation unit.
#pragma once

#include <string>
#include <string_view>

namespace mojo::diagnostics {

// Lines [line - context, line + context] of `file` as they appear in
// `source`, numbered, the error line marked with '>'; empty if not found.
std::string excerpt(std::string_view source, std::string_view file, int line, int context = 2);

// `log` followed by an excerpt for each distinct error location it names.
// Recognizes NVRTC/EDG's "file(12): error" and clang's "file:12:5: error".
std::string annotate(std::string_view log, std::string_view source);

// The first error message line of `log` (for a one-line summary).
std::string first_error(std::string_view log);

}  // namespace mojo::diagnostics
