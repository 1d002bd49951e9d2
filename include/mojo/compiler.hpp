// A compiler is a pure function (source, target, stage) -> artifact. It knows
// nothing of caching or loading (tinygrad's seam). The stages are the names of
// the pipeline: llvm -> llvm-opt -> ptx -> cubin; `--emit=X` stops at X.
// `host` is the cpu device's artifact: the same templates built for the
// host by the system C++ compiler into a shared object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mojo/target.hpp"

namespace mojo {

enum class Emit { llvm, llvm_opt, ptx, cubin, host };

std::string_view emit_name(Emit emit) noexcept;  // "llvm", "llvm-opt", "ptx", "cubin", "host"
Emit parse_emit(std::string_view name);          // throws InvalidArgumentError

struct CompileRequest {
  std::string_view program_name;  // the template file, as it appears in diagnostics
  std::string_view source;        // the whole translation unit (templates::expand + entry lines)
  Target target;
  Emit emit = Emit::cubin;
  std::string_view description;   // "rms_norm {dtype=bf16 hidden=4096 ...} for sm_90", for errors
  // Back-end threads for a module with several kernels (LLVM splits the
  // optimised module and generates code for the parts in parallel). 1: none.
  unsigned jobs = 1;
};

struct CompileResult {
  std::string binary;  // PTX text, cubin bytes (no trailing NUL) or a host shared object
  std::string log;     // warnings, if any
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
