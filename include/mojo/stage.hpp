// The stages of the pipeline, in order: llvm -> llvm-opt -> ptx -> cubin
// (`--emit=X` stops at X); `host` is the cpu device's artifact, the same
// templates built for the host by the system C++ compiler. And the stages a
// compile's time is reported in.
#pragma once

#include <string_view>

namespace mojo {

enum class Emit { llvm, llvm_opt, ptx, cubin, host };

std::string_view emit_name(Emit emit) noexcept;  // "llvm", "llvm-opt", "ptx", "cubin", "host"
Emit parse_emit(std::string_view name);          // throws InvalidArgumentError

// The stages a compile's time is reported in, common to both compilers (CompileResult::stage_ms,
// CacheStats::compile_stage_seconds).
enum class CompileStage {
  load,       // loading the compiler's plugin and starting it, on the process's first compile (and any that waited)
  front_end,  // parsing and IR generation: clang, or NVRTC's "CUDA C++ Frontend"
  optimize,   // LLVM's O3 pipeline, or NVRTC's "NVVM Optimizer" (which also writes the PTX)
  codegen,    // LLVM's NVPTX back end: IR to PTX
  ptxas,      // PTX to cubin: the ptxas subprocess, or NVRTC's "PTX Translation"
  other,      // the rest of the compiler's call (NVRTC: its total less its phases)
};
inline constexpr int kCompileStages = 6;
std::string_view compile_stage_name(CompileStage stage) noexcept;  // "load", "front end", "optimize", ...

}  // namespace mojo
