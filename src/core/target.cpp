#include "mojo/target.hpp"

#include <fmt/format.h>

#include <charconv>

#include "mojo/error.hpp"

namespace mojo {

Target Target::parse(std::string_view arch) {
  std::string_view rest = arch;
  for (std::string_view prefix : {"sm_", "compute_"}) {
    if (rest.starts_with(prefix)) {
      rest.remove_prefix(prefix.size());
      break;
    }
  }
  Target t;
  if (rest.ends_with('a')) {
    t.arch_specific = true;
    rest.remove_suffix(1);
  }
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), t.sm);
  if (ec != std::errc() || end != rest.data() + rest.size() || rest.size() < 2 || rest.size() > 3 ||
      t.sm < 10)
    throw ArchError(fmt::format(
        "bad arch '{}': expected sm_XY or sm_XYa with compute capability X.Y (e.g. sm_80, sm_90, sm_90a)",
        arch));
  return t;
}

std::string Target::sm_name() const { return fmt::format("sm_{}{}", sm, arch_specific ? "a" : ""); }
std::string Target::compute_name() const {
  return fmt::format("compute_{}{}", sm, arch_specific ? "a" : "");
}

}  // namespace mojo
