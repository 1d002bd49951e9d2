// The compiler factory.
#include <fmt/format.h>

#include "compiler/host_compiler.hpp"
#include "compiler/nvrtc_compiler.hpp"
#if MOJO_JIT_WITH_LLVM
#include "compiler/llvm_compiler.hpp"
#endif
#include "mojo/compiler.hpp"
#include "mojo/error.hpp"

namespace mojo {

std::unique_ptr<Compiler> make_compiler(std::string_view name) {
  if (name == "nvrtc") return std::make_unique<NvrtcCompiler>();
  if (name == "llvm") {
#if MOJO_JIT_WITH_LLVM
    return std::make_unique<LlvmCompiler>();
#else
    throw InvalidArgumentError(
        "compiler 'llvm' is not part of this build (configured with MOJO_JIT_WITH_LLVM=OFF); use --compiler=nvrtc");
#endif
  }
  throw InvalidArgumentError(fmt::format("unknown compiler '{}': expected nvrtc or llvm", name));
}

std::unique_ptr<Compiler> make_host_compiler() { return std::make_unique<HostCompiler>(); }

}  // namespace mojo
