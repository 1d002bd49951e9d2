// The GPU a kernel is compiled for: "sm_80", "sm_90", "sm_90a", ... given
// explicitly (no GPU needed) or read from a device.
#pragma once

#include <string>
#include <string_view>

namespace mojo {

struct Target {
  int sm = 90;           // compute capability as major*10 + minor
  bool arch_specific = false;  // the "a" suffix: sm_90a features, no forward compatibility

  // Accepts "sm_90", "sm_90a", "compute_90", "90". Throws ArchError on anything else.
  static Target parse(std::string_view arch);

  std::string sm_name() const;       // "sm_90a"
  std::string compute_name() const;  // "compute_90a"
  friend bool operator==(const Target&, const Target&) = default;
};

}  // namespace mojo
