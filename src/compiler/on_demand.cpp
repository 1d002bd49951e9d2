#include "compiler/on_demand.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "mojo/error.hpp"

namespace mojo {
namespace fs = std::filesystem;

namespace {

// libmojo_jit_<name>.so in the directory of the library this code is in (the build tree, or the install's lib).
fs::path plugin_path(std::string_view name) {
  Dl_info info{};
  static const int anchor = 0;
  const fs::path self = dladdr(&anchor, &info) && info.dli_fname ? fs::path(info.dli_fname) : fs::path();
  return self.parent_path() / fmt::format("libmojo_jit_{}.so", name);
}

}  // namespace

OnDemandCompiler::OnDemandCompiler(std::string name, std::string identity, std::vector<Emit> emits)
    : name_(std::move(name)), identity_(std::move(identity)), emits_(std::move(emits)) {}

bool OnDemandCompiler::can_emit(Emit emit) const {
  return std::find(emits_.begin(), emits_.end(), emit) != emits_.end();
}

const Compiler& OnDemandCompiler::loaded(const CompileRequest& request) const {
  std::call_once(once_, [&] {
    const fs::path path = plugin_path(name_);
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      error_ = fmt::format("this build has no {} compiler ({} is not installed; built with MOJO_JIT_SERVE_ONLY?)",
                           name_, path.string());
      return;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      error_ = fmt::format("cannot load the {} compiler: {}", name_, dlerror());
      return;
    }
    using Make = Compiler* (*)();
    auto make = reinterpret_cast<Make>(dlsym(handle, "mojo_jit_make_compiler"));
    if (make == nullptr) {
      error_ = fmt::format("{} has no mojo_jit_make_compiler", path.string());
      return;
    }
    try {
      compiler_.reset(make());
    } catch (const std::exception& e) {
      error_ = fmt::format("the {} compiler failed to start: {}", name_, e.what());
      return;
    }
    if (compiler_->identity() != identity_) {
      error_ = fmt::format(
          "the {} compiler loaded is '{}' but this build keys its cache by '{}'; rebuild mojo-jit "
          "against the toolkit it runs with",
          name_, compiler_->identity(), identity_);
      compiler_.reset();
    }
  });
  if (compiler_) return *compiler_;
  if (error_.starts_with("this build has no"))
    throw CacheMissError(
        fmt::format("{}: not in any cache layer, and {}; prewarm it with `mojo-jit prewarm` where "
                    "a compiler is",
                    request.description, error_));
  throw CompileError(fmt::format("{}: {}", request.description, error_), error_);
}

// The load is part of the first compile's time (the shared library mapped, LLVM's targets registered): timed
// as its own stage, so that a first compile's stages still add up to it.
CompileResult OnDemandCompiler::compile(const CompileRequest& request) const {
  const auto start = std::chrono::steady_clock::now();
  const Compiler& compiler = loaded(request);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  CompileResult result = compiler.compile(request);
  result.stage_ms[int(CompileStage::load)] += load_ms;
  return result;
}

std::string OnDemandCompiler::repro_command(const CompileRequest& request, std::string_view source_path) const {
  return loaded(request).repro_command(request, source_path);
}

}  // namespace mojo
