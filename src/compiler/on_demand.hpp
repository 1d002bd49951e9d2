// A compiler loaded the first time something must be compiled, never on a
// cache hit: NVRTC and clang + LLVM live in plugins (libmojo_jit_nvrtc.so,
// libmojo_jit_llvm.so, beside libmojo_jit.so) that map their toolkits only
// when loaded. Its identity comes from the build, so keys are known without
// it; the plugin loaded must report the same one.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mojo/compiler.hpp"

namespace mojo {

class OnDemandCompiler final : public Compiler {
 public:
  OnDemandCompiler(std::string name, std::string identity, std::vector<Emit> emits);
  std::string_view name() const override { return name_; }
  const std::string& identity() const override { return identity_; }
  bool can_emit(Emit emit) const override;
  CompileResult compile(const CompileRequest& request) const override;
  std::string repro_command(const CompileRequest& request, std::string_view source_path) const override;

 private:
  // The plugin's compiler, loaded once. A build without the plugin (MOJO_JIT_SERVE_ONLY) serves from its cache
  // alone: a miss there is a CacheMissError naming `request`.
  const Compiler& loaded(const CompileRequest& request) const;

  std::string name_, identity_;
  std::vector<Emit> emits_;
  mutable std::once_flag once_;
  mutable std::unique_ptr<Compiler> compiler_;
  mutable std::string error_;  // why loading failed, said again on every compile
};

}  // namespace mojo
