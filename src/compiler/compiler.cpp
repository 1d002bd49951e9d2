// Emission stages and the compiler factory.
#include <fmt/format.h>

#include "compiler/nvrtc_compiler.hpp"
#include "mojo/compiler.hpp"
#include "mojo/error.hpp"

namespace mojo {

namespace {
constexpr std::pair<Emit, std::string_view> kEmitNames[] = {
    {Emit::llvm, "llvm"}, {Emit::llvm_opt, "llvm-opt"}, {Emit::ptx, "ptx"}, {Emit::cubin, "cubin"}};
}

std::string_view emit_name(Emit emit) noexcept {
  for (auto [e, name] : kEmitNames)
    if (e == emit) return name;
  return "?";
}

Emit parse_emit(std::string_view name) {
  for (auto [e, n] : kEmitNames)
    if (n == name) return e;
  throw InvalidArgumentError(fmt::format("unknown emission '{}': expected llvm, llvm-opt, ptx or cubin", name));
}

std::unique_ptr<Compiler> make_compiler(std::string_view name) {
  if (name == "nvrtc") return std::make_unique<NvrtcCompiler>();
  if (name == "llvm")
    throw InvalidArgumentError(
        "compiler 'llvm' is not part of this build (clang + LLVM NVPTX is not built yet); use --compiler=nvrtc");
  throw InvalidArgumentError(fmt::format("unknown compiler '{}': expected nvrtc or llvm", name));
}

}  // namespace mojo
