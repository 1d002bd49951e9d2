// clang's CUDA front end + LLVM's NVPTX back end, in process: the same
// templates as NVRTC, compiled without the CUDA SDK headers.
//
//   source (in-memory file system) -> clang -fcuda-is-device -> LLVM IR
//     -> O3 -> NVPTX TargetMachine -> PTX -> ptxas (a program) -> cubin
//
// With jobs > 1 the back end runs on several threads, each on whole kernels
// with copies of what they call; the parts' PTX is joined again into one
// module, so ptxas compiles whole-program code either way.
//
// Errors from clang and from LLVM (including the fatal ones LLVM would end
// the process with) become CompileError; the host process always survives.
#pragma once

#include <string>

#include "mojo/compiler.hpp"

namespace mojo {

class LlvmCompiler final : public Compiler {
 public:
  LlvmCompiler();
  std::string_view name() const override { return "llvm"; }
  const std::string& identity() const override { return identity_; }
  bool can_emit(Emit) const override { return true; }
  CompileResult compile(const CompileRequest& request) const override;
  std::string repro_command(const CompileRequest& request, std::string_view source_path) const override;

 private:
  std::string identity_;
};

}  // namespace mojo
