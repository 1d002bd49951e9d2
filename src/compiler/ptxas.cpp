#include "compiler/ptxas.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <filesystem>
#include <mutex>

#include "compiler/diagnostics.hpp"
#include "compiler/subprocess.hpp"
#include "core/config.hpp"
#include "mojo/error.hpp"

#ifndef MOJO_JIT_TOOLKIT_PTXAS
#define MOJO_JIT_TOOLKIT_PTXAS "ptxas"
#endif

namespace mojo::ptxas {
namespace {

// "13.0" from ptxas --version's "Cuda compilation tools, release 13.0, V13.0.88"; "" when it is not there.
std::string release_of(const std::string& version_text) {
  const std::size_t at = version_text.find("release ");
  if (at == std::string::npos) return "";
  const std::size_t start = at + 8, end = version_text.find(',', start);
  return version_text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Once per process: an error message when `ptxas` cannot serve `toolkit_release`, else "".
std::string check_once(const std::string& ptxas, std::string_view toolkit_release) {
  static std::once_flag once;
  static std::string problem;
  std::call_once(once, [&] {
    subprocess::ScratchDir dir("ptxas");
    const int status = subprocess::run({ptxas, "--version"}, dir.path / "version.txt");
    const std::string release = release_of(subprocess::read_file(dir.path / "version.txt"));
    if (status == -ENOENT)
      problem = fmt::format("no ptxas found at '{}': the LLVM compiler needs the CUDA toolkit's ptxas to make a cubin "
                            "(set MOJO_JIT_PTXAS, or emit ptx)",
                            ptxas);
    else if (status != 0)
      problem = fmt::format("ptxas '{}' does not run ('--version' exited {})", ptxas, status);
    else if (release != toolkit_release)
      problem = fmt::format("ptxas '{}' is CUDA release {}, but this build's compiler identity (and its cache keys) "
                            "name release {}: point MOJO_JIT_PTXAS at a {} ptxas",
                            ptxas, release.empty() ? "unknown" : release, toolkit_release, toolkit_release);
  });
  return problem;
}

}  // namespace

std::string program() {
  if (auto set = config::text("MOJO_JIT_PTXAS")) return *set;
  std::error_code ec;
  if (std::filesystem::is_regular_file(MOJO_JIT_TOOLKIT_PTXAS, ec)) return MOJO_JIT_TOOLKIT_PTXAS;
  return "ptxas";
}

Cubin ptx_to_cubin(std::string_view ptx, const Target& target, unsigned jobs, std::string_view toolkit_release,
                   std::string_view description) {
  const std::string ptxas = program();
  if (std::string problem = check_once(ptxas, toolkit_release); !problem.empty())
    throw CompileError(fmt::format("{}: {}", description, problem), "");
  subprocess::ScratchDir dir("ptxas");
  const std::filesystem::path input = dir.path / "module.ptx", output = dir.path / "module.cubin",
                              log = dir.path / "log.txt";
  if (!subprocess::write_file(input, ptx))
    throw CompileError(fmt::format("{}: cannot write {}", description, input.string()), "");
  std::vector<std::string> argv{ptxas, fmt::format("-arch={}", target.sm_name()), "-O3", input.string(), "-o",
                                output.string()};
  if (jobs > 1) argv.push_back(fmt::format("--split-compile={}", jobs));
  const int status = subprocess::run(argv, log);
  Cubin out{subprocess::read_file(output), subprocess::read_file(log)};
  if (status != 0 || out.binary.empty())
    throw CompileError(fmt::format("{}: ptxas failed to turn PTX into a {} cubin (exit {}): {}", description,
                                   target.sm_name(), status, diagnostics::first_error(out.log)),
                       out.log);
  return out;
}

}  // namespace mojo::ptxas
