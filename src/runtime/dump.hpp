// Compiling with MOJO_JIT_DUMP: what a compile saw and made, kept on disk.
#pragma once

#include <filesystem>
#include <string>

#include "mojo/compiler.hpp"

namespace mojo {

// Compiles `request`. With a `dump_dir` (MOJO_JIT_DUMP=DIR), writes
// DIR/<stem>.cu (the translation unit), .txt (`meta`: what it is), and a file
// per stage it passed through (.llvm, .llvm-opt, .ptx) and for the result
// (.ptx, .cubin, ...); a failed compile writes .cu and .log, and its error
// names them with a command that reproduces the compile outside mojo-jit.
CompileResult compile_dumped(const Compiler& compiler, CompileRequest request, const std::filesystem::path& dump_dir,
                             const std::string& stem, const std::string& meta);

}  // namespace mojo
