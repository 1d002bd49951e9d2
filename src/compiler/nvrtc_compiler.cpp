#include "compiler/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <memory>

#include "compiler/diagnostics.hpp"
#include "compiler/identity.hpp"
#include "mojo/error.hpp"

namespace mojo {

namespace {

void check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) throw Error(fmt::format("{} failed: {}", call, nvrtcGetErrorString(r)));
}

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

}  // namespace

NvrtcCompiler::NvrtcCompiler() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  int count = 0;
  check(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  supported_sms_.resize(std::size_t(count));
  check(nvrtcGetSupportedArchs(supported_sms_.data()), "nvrtcGetSupportedArchs");

  options_ = compiler_identity::nvrtc_options(major, minor);
  identity_ = compiler_identity::nvrtc(major, minor);
}

CompileResult NvrtcCompiler::compile(const CompileRequest& request) const {
  if (!can_emit(request.emit))
    throw InvalidArgumentError(fmt::format("NVRTC cannot emit '{}' (it emits ptx and cubin); use --compiler=llvm",
                                           emit_name(request.emit)));
  const int sm = request.target.sm;
  if (std::find(supported_sms_.begin(), supported_sms_.end(), sm) == supported_sms_.end()) {
    std::vector<std::string> names;
    for (int s : supported_sms_) names.push_back(fmt::format("sm_{}", s));
    throw ArchError(fmt::format("{}: NVRTC ({}) cannot compile for {}; it supports {}", request.description,
                                identity_, request.target.sm_name(), fmt::join(names, ", ")));
  }

  std::string source(request.source);
  std::string program_name(request.program_name);
  nvrtcProgram raw = nullptr;
  check(nvrtcCreateProgram(&raw, source.c_str(), program_name.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  Program program(raw);

  std::string arch = fmt::format(
      "-arch={}", request.emit == Emit::cubin ? request.target.sm_name() : request.target.compute_name());
  std::vector<const char*> options;
  for (const std::string& o : options_) options.push_back(o.c_str());
  options.push_back(arch.c_str());
  // A module of many kernels: NVRTC optimises and generates code on several threads.
  const std::string split = fmt::format("--split-compile={}", request.jobs);
  if (request.jobs > 1) options.push_back(split.c_str());

  nvrtcResult result = nvrtcCompileProgram(raw, int(options.size()), options.data());
  std::size_t log_size = 0;
  check(nvrtcGetProgramLogSize(raw, &log_size), "nvrtcGetProgramLogSize");
  std::string log(log_size, '\0');
  check(nvrtcGetProgramLog(raw, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && log.back() == '\0') log.pop_back();

  if (result != NVRTC_SUCCESS) {
    throw CompileError(fmt::format("{}: NVRTC failed for {}: {}", request.description, request.target.sm_name(),
                                   diagnostics::first_error(log)),
                       diagnostics::annotate(log, request.source));
  }

  CompileResult out;
  out.log = std::move(log);
  auto ptx = [&] {
    std::size_t size = 0;
    check(nvrtcGetPTXSize(raw, &size), "nvrtcGetPTXSize");
    std::string text(size, '\0');
    check(nvrtcGetPTX(raw, text.data()), "nvrtcGetPTX");
    while (!text.empty() && text.back() == '\0') text.pop_back();  // the size counts the NUL
    return text;
  };
  if (request.emit == Emit::cubin) {
    std::size_t size = 0;
    check(nvrtcGetCUBINSize(raw, &size), "nvrtcGetCUBINSize");
    out.binary.resize(size);
    check(nvrtcGetCUBIN(raw, out.binary.data()), "nvrtcGetCUBIN");
    if (request.keep_stages) out.stages.emplace_back(Emit::ptx, ptx());  // the PTX the cubin was made from
  } else {
    out.binary = ptx();
  }
  return out;
}

std::string NvrtcCompiler::repro_command(const CompileRequest& request, std::string_view source_path) const {
  // nvcc runs the same front end (NVRTC is its device half); --minimal has no nvcc spelling and changes nothing.
  const std::string stem(source_path.substr(0, source_path.rfind('.')));
  if (request.emit == Emit::cubin)
    return fmt::format("nvcc -std=c++17 -arch={} -cubin -o {}.cubin {}", request.target.sm_name(), stem, source_path);
  return fmt::format("nvcc -std=c++17 -arch={} -ptx -o {}.ptx {}", request.target.compute_name(), stem, source_path);
}

}  // namespace mojo

// The plugin's entry point (libmojo_jit_nvrtc.so, loaded by compiler/on_demand.cpp).
extern "C" __attribute__((visibility("default"))) mojo::Compiler* mojo_jit_make_compiler() {
  return new mojo::NvrtcCompiler();
}
