#include "compiler/host_compiler.hpp"
#include "core/config.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "mojo_cpu_abi.h"
#include "compiler/diagnostics.hpp"
#include "compiler/subprocess.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace fs = std::filesystem;

#ifndef MOJO_JIT_HOST_CXX
#define MOJO_JIT_HOST_CXX "c++"
#endif
#ifndef MOJO_JIT_HOST_SANITIZE
#define MOJO_JIT_HOST_SANITIZE ""
#endif

using subprocess::read_file;
using subprocess::run;

HostCompiler::HostCompiler() {
  cxx_ = config::text("MOJO_JIT_HOST_CXX").value_or(MOJO_JIT_HOST_CXX);
  // -O1: the kernels run a few times in tests; compile time matters more. No strict aliasing:
  // templates move bits through reinterpret_cast as GPU code may.
  flags_ = {"-std=c++17",
            "-O1",
            "-fPIC",
            "-shared",
            "-fno-strict-aliasing",
            "-fno-math-errno",
            "-fno-gnu-unique" /* or dlclose could not unload it */,
            "-w",
            "-DMOJO_CPU=1"};
  std::istringstream sanitize(MOJO_JIT_HOST_SANITIZE);
  for (std::string f; sanitize >> f;) flags_.push_back(f);
  // A sanitizer's report (a race, an overflow) names the template's lines.
  if (std::string_view(MOJO_JIT_HOST_SANITIZE).find("sanitize=") != std::string_view::npos) flags_.push_back("-g1");
  subprocess::ScratchDir dir("host compiler");
  std::string version;
  const int status = run({cxx_, "--version"}, dir.path / "version.txt");
  if (status != 0) {
    missing_ = status == -ENOENT
                   ? fmt::format(
                         "no host C++ compiler '{}' found: install g++ (apt-get install g++) or "
                         "set MOJO_JIT_HOST_CXX to one",
                         cxx_)
                   : fmt::format("the host C++ compiler '{}' does not run ('--version' exited {})", cxx_, status);
  } else {
    version = read_file(dir.path / "version.txt");
    version = version.substr(0, version.find('\n'));
  }
  identity_ = fmt::format("host {} [{}] {} abi {}", fs::path(cxx_).filename().string(), version, fmt::join(flags_, " "),
                          MOJO_CPU_ABI_VERSION);
}

CompileResult HostCompiler::compile(const CompileRequest& request) const {
  if (!can_emit(request.emit))
    throw InvalidArgumentError(fmt::format(
        "the host compiler emits 'host' (a shared object for the cpu device), not '{}'", emit_name(request.emit)));
  if (!missing_.empty()) throw CompileError(fmt::format("{}: {}", request.description, missing_), "");
  subprocess::ScratchDir dir("host compiler");
  const fs::path source = dir.path / "kernels.cpp", library = dir.path / "kernels.so", log = dir.path / "log.txt";
  if (!subprocess::write_file(source, request.source))
    throw CompileError(fmt::format("{}: cannot write {}", request.description, source.string()), "");
  const int status = run(command(request, source.string(), library.string()), log);
  std::string text = read_file(log);
  if (status == -ENOENT) throw CompileError(fmt::format("{}: {}", request.description, missing_), "");
  if (status != 0) {
    throw CompileError(fmt::format("{}: the host compiler failed for the cpu device ({}): {}", request.description,
                                   request.target.sm_name(), diagnostics::first_error(text)),
                       diagnostics::annotate(text, request.source));
  }
  CompileResult out;
  out.binary = read_file(library);
  out.log = std::move(text);
  if (out.binary.empty())
    throw CompileError(fmt::format("{}: the host compiler wrote no library", request.description), "");
  return out;
}

std::vector<std::string> HostCompiler::command(const CompileRequest& request, std::string_view source,
                                               std::string_view library) const {
  std::vector<std::string> argv{cxx_};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  argv.push_back(fmt::format("-D__CUDA_ARCH__={}", request.target.sm * 10));
  argv.insert(argv.end(), {"-o", std::string(library), "-x", "c++", std::string(source)});  // a .cu dump is C++ too
  return argv;
}

std::string HostCompiler::repro_command(const CompileRequest& request, std::string_view source_path) const {
  const std::string stem(source_path.substr(0, source_path.rfind('.')));
  return fmt::format("{}", fmt::join(command(request, source_path, stem + ".so"), " "));
}

}  // namespace mojo
