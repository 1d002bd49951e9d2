// The compiler factory.
#include <fmt/format.h>

#include "compiler/nvrtc_compiler.hpp"
#include "mojo/compiler.hpp"
#include "mojo/error.hpp"

namespace mojo {

std::unique_ptr<Compiler> make_compiler(std::string_view name) {
  if (name == "nvrtc") return std::make_unique<NvrtcCompiler>();
  if (name == "llvm")
    throw InvalidArgumentError(
        "compiler 'llvm' is not part of this build (clang + LLVM NVPTX is not built yet); use --compiler=nvrtc");
  throw InvalidArgumentError(fmt::format("unknown compiler '{}': expected nvrtc or llvm", name));
}

}  // namespace mojo
