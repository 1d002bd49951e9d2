// Each compiler's identity (its part of every KernelKey), from its version:
// computed by the compiler itself once loaded, and by this build from the
// versions CMake found (compiler.cpp), so that a cache hit needs no compiler.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace mojo::compiler_identity {

// NVRTC's fixed options. The prelude needs no SDK header, so NVRTC may skip
// its implicit ones (--minimal, NVRTC >= 12.4): faster compiles, same code.
inline std::vector<std::string> nvrtc_options(int major, int minor) {
  std::vector<std::string> options{"-std=c++17"};
  if (major > 12 || (major == 12 && minor >= 4)) options.push_back("--minimal");
  return options;
}
inline std::string nvrtc(int major, int minor) {
  return fmt::format("nvrtc-{}.{} {}", major, minor, fmt::join(nvrtc_options(major, minor), " "));
}

// The newest PTX ISA LLVM 19 emits.
inline constexpr const char* kLlvmPtxFeature = "+ptx85";
// `toolkit_release`: the CUDA release ("13.0") whose ptxas makes the cubins.
inline std::string llvm(std::string_view llvm_version, std::string_view toolkit_release) {
  return fmt::format("llvm-{} clang-cuda -O3 -ffp-contract=fast -fcuda-short-ptr {} ptxas-{}", llvm_version,
                     kLlvmPtxFeature, toolkit_release);
}

}  // namespace mojo::compiler_identity
