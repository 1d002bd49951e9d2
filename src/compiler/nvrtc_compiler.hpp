// NVRTC: CUDA C++ -> PTX (compute_XX) or cubin (sm_XX), in process.
#pragma once

#include <string>
#include <vector>

#include "mojo/compiler.hpp"

namespace mojo {

class NvrtcCompiler final : public Compiler {
 public:
  NvrtcCompiler();
  std::string_view name() const override { return "nvrtc"; }
  const std::string& identity() const override { return identity_; }
  bool can_emit(Emit emit) const override { return emit == Emit::ptx || emit == Emit::cubin; }
  CompileResult compile(const CompileRequest& request) const override;
  std::string repro_command(const CompileRequest& request, std::string_view source_path) const override;

 private:
  std::vector<std::string> options_;  // fixed options, before the arch (the identity's and --no-cache)
  std::vector<int> supported_sms_;
  std::string identity_;
};

}  // namespace mojo
