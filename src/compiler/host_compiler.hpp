// The cpu device's compiler: the system C++ compiler in a subprocess turns
// a translation unit (mojo_cpu.cuh, the templates, the entry lines) into a
// shared object. A library built with sanitizers passes its -fsanitize
// flags on, so kernel code is checked too (out-of-bounds reads, misaligned
// vector loads).
#pragma once

#include <string>
#include <vector>

#include "mojo/compiler.hpp"

namespace mojo {

class HostCompiler final : public Compiler {
 public:
  // $MOJO_JIT_HOST_CXX, else the compiler this library was built with.
  HostCompiler();
  std::string_view name() const override { return "host"; }
  const std::string& identity() const override { return identity_; }
  bool can_emit(Emit emit) const override { return emit == Emit::host; }
  CompileResult compile(const CompileRequest& request) const override;
  std::string repro_command(const CompileRequest& request, std::string_view source_path) const override;

 private:
  std::vector<std::string> command(const CompileRequest& request, std::string_view source,
                                   std::string_view library) const;
  std::string cxx_;
  std::vector<std::string> flags_;
  std::string identity_;
  std::string missing_;  // why the compiler cannot run, if it cannot
};

}  // namespace mojo
