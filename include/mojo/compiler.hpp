// A compiler is a pure function (source, target, stage) -> artifact. It knows
// nothing of caching or loading (tinygrad's seam). The stages: mojo/stage.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mojo/stage.hpp"
#include "mojo/target.hpp"

namespace mojo {

struct CompileRequest {
  std::string_view program_name;  // the template file, as it appears in diagnostics
  std::string_view source;        // the whole translation unit (templates::expand + entry lines)
  Target target;
  Emit emit = Emit::cubin;
  std::string_view description;   // "rms_norm {dtype=bf16 hidden=4096 ...} for sm_90", for errors
  // Back-end threads for a module with several kernels (LLVM splits the
  // optimised module and generates code for the parts in parallel). 1: none.
  unsigned jobs = 1;
  // Keep the stages on the way to `emit` in CompileResult::stages (MOJO_JIT_DUMP).
  bool keep_stages = false;
  // Time each stage (CompileResult::stage_ms). LLVM times its stages always (a clock read each); NVRTC only
  // when asked, since it reports its phases through a file (--time).
  bool time_stages = false;
};

struct CompileResult {
  std::string binary;  // PTX text, cubin bytes (no trailing NUL) or a host shared object
  std::string log;     // warnings, if any
  // With keep_stages: what the compile passed through before `binary`, in
  // pipeline order (llvm, llvm-opt and ptx from LLVM; ptx from NVRTC).
  std::vector<std::pair<Emit, std::string>> stages;
  // Milliseconds in each CompileStage (mojo/stage.hpp; by its index): what the compiler measured, zeros
  // where it did not.
  std::array<double, kCompileStages> stage_ms{};
};

class Compiler {
 public:
  virtual ~Compiler() = default;
  virtual std::string_view name() const = 0;  // "nvrtc"
  // Everything about this compiler that changes its output (name, version,
  // fixed options); part of every KernelKey.
  virtual const std::string& identity() const = 0;
  virtual bool can_emit(Emit emit) const = 0;
  // Throws CompileError (summary line + log with source excerpts).
  virtual CompileResult compile(const CompileRequest& request) const = 0;
  // A shell command that redoes `request` outside mojo-jit on the translation
  // unit saved at `source_path`, with the toolkit's own tools: a repro to
  // attach to a compiler bug.
  virtual std::string repro_command(const CompileRequest& request, std::string_view source_path) const = 0;
};

// What a kernel of a cubin uses, read from the ELF (no GPU needed): what
// ptxas -v reports. stack_bytes > 0 means local memory (spills or arrays).
struct KernelResources {
  int registers = 0;
  std::uint64_t static_shared_bytes = 0;
  std::uint64_t stack_bytes = 0;
};
// Throws InvalidArgumentError when `cubin` is not a CUDA ELF or lacks `kernel`.
KernelResources kernel_resources(std::string_view cubin, std::string_view kernel);

// "nvrtc" (the default) or "llvm". Throws InvalidArgumentError for unknown names.
std::unique_ptr<Compiler> make_compiler(std::string_view name);
// The cpu device's: the system C++ compiler ($MOJO_JIT_HOST_CXX, else the
// one mojo-jit was built with), emitting Emit::host.
std::unique_ptr<Compiler> make_host_compiler();

}  // namespace mojo
