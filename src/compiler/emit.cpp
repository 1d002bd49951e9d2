// The names of the pipeline's stages (--emit=...) and of the stages compiles are timed in.
#include <fmt/format.h>

#include <utility>

#include "mojo/stage.hpp"
#include "mojo/error.hpp"

namespace mojo {

namespace {
constexpr std::pair<Emit, std::string_view> kEmitNames[] = {
    {Emit::llvm, "llvm"}, {Emit::llvm_opt, "llvm-opt"}, {Emit::ptx, "ptx"}, {Emit::cubin, "cubin"},
    {Emit::host, "host"}};
}

std::string_view emit_name(Emit emit) noexcept {
  for (auto [e, name] : kEmitNames)
    if (e == emit) return name;
  return "?";
}

Emit parse_emit(std::string_view name) {
  for (auto [e, n] : kEmitNames)
    if (n == name) return e;
  throw InvalidArgumentError(fmt::format("unknown emission '{}': expected llvm, llvm-opt, ptx, cubin, host (or sass from the CLI)", name));
}

std::string_view compile_stage_name(CompileStage stage) noexcept {
  switch (stage) {
    case CompileStage::load: return "load";
    case CompileStage::front_end: return "front end";
    case CompileStage::optimize: return "optimize";
    case CompileStage::codegen: return "codegen";
    case CompileStage::ptxas: return "ptxas";
    case CompileStage::other: return "other";
  }
  return "?";
}

}  // namespace mojo
