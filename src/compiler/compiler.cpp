// The compiler factory.
#include <fmt/format.h>

#include "compiler/host_compiler.hpp"
#include "compiler/identity.hpp"
#include "compiler/on_demand.hpp"
#include "mojo/compiler.hpp"
#include "mojo/error.hpp"

namespace mojo {

// Both GPU compilers are plugins loaded on the first miss (compiler/on_demand.hpp); their identities come
// from the toolkit versions this build was configured with (CMake: MOJO_NVRTC_VERSION_*, MOJO_LLVM_VERSION).
std::unique_ptr<Compiler> make_compiler(std::string_view name) {
  if (name == "nvrtc")
    return std::make_unique<OnDemandCompiler>(
        "nvrtc", compiler_identity::nvrtc(MOJO_NVRTC_VERSION_MAJOR, MOJO_NVRTC_VERSION_MINOR),
        std::vector<Emit>{Emit::ptx, Emit::cubin});
  if (name == "llvm") {
#if MOJO_JIT_WITH_LLVM
    return std::make_unique<OnDemandCompiler>(
        "llvm", compiler_identity::llvm(MOJO_LLVM_VERSION, MOJO_CUDA_RELEASE),
        std::vector<Emit>{Emit::llvm, Emit::llvm_opt, Emit::ptx, Emit::cubin});
#else
    throw InvalidArgumentError(
        "compiler 'llvm' is not part of this build (configured with MOJO_JIT_WITH_LLVM=OFF); use --compiler=nvrtc");
#endif
  }
  throw InvalidArgumentError(fmt::format("unknown compiler '{}': expected nvrtc or llvm", name));
}

std::unique_ptr<Compiler> make_host_compiler() { return std::make_unique<HostCompiler>(); }

}  // namespace mojo
