// The stages of the pipeline, in order: llvm -> llvm-opt -> ptx -> cubin
// (`--emit=X` stops at X); `host` is the cpu device's artifact, the same
// templates built for the host by the system C++ compiler.
#pragma once

#include <string_view>

namespace mojo {

enum class Emit { llvm, llvm_opt, ptx, cubin, host };

std::string_view emit_name(Emit emit) noexcept;  // "llvm", "llvm-opt", "ptx", "cubin", "host"
Emit parse_emit(std::string_view name);          // throws InvalidArgumentError

}  // namespace mojo
