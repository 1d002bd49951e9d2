#include "compiler/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "compiler/diagnostics.hpp"
#include "compiler/identity.hpp"
#include "mojo/error.hpp"

namespace mojo {

namespace {

void check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) throw Error(fmt::format("{} failed: {}", call, nvrtcGetErrorString(r)));
}

// NVRTC's phase times (--time=FILE writes "file, phase, metric, unit" rows, in whole ms) added to `ms` by stage.
void read_phase_times(const std::filesystem::path& csv, std::array<double, kCompileStages>& ms) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    for (std::size_t at = 0; at <= line.size();) {
      const std::size_t comma = std::min(line.find(',', at), line.size());
      std::string cell = line.substr(at, comma - at);
      cell.erase(0, cell.find_first_not_of(' '));
      cells.push_back(std::move(cell));
      at = comma + 1;
    }
    if (cells.size() < 3) continue;
    const std::string& phase = cells[1];
    const CompileStage stage = phase == "CUDA C++ Frontend" ? CompileStage::front_end
                               : phase == "NVVM Optimizer"  ? CompileStage::optimize
                               : phase == "PTX Translation" ? CompileStage::ptxas
                                                            : CompileStage::other;
    ms[int(stage)] += std::atof(cells[2].c_str());
  }
}

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

// A text NVRTC hands out as a size and then the bytes (the log, the PTX), without the NUL the size counts.
template <class Size, class Get>
std::string program_text(nvrtcProgram program, Size size_of, Get get, const char* call) {
  std::size_t size = 0;
  check(size_of(program, &size), call);
  std::string text(size, '\0');
  check(get(program, text.data()), call);
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

}  // namespace

NvrtcCompiler::NvrtcCompiler() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  int count = 0;
  check(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  supported_sms_.resize(std::size_t(count));
  check(nvrtcGetSupportedArchs(supported_sms_.data()), "nvrtcGetSupportedArchs");

  options_ = compiler_identity::nvrtc_options(major, minor);
  // NVRTC 12.9+ also caches its PTX and cubins in the CUDA driver's compute cache (~/.nv/ComputeCache) wherever
  // it can load a driver: a second cache under the Runtime's, which turned a "cold" compile on a GPU machine
  // into a lookup (the H100 host's compile table of 2026-11-24: a cubin in less time than its PTX) and copies
  // every kernel into the user's driver cache. The Runtime's cache is the one cache. Not part of the identity:
  // the output is the same.
  if (major > 12 || (major == 12 && minor >= 9)) options_.push_back("--no-cache");
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

  // Its phases' times, when asked, through a file of this call's own.
  static std::atomic<unsigned> calls{0};
  const std::filesystem::path times =
      request.time_stages
          ? std::filesystem::temp_directory_path() / fmt::format("mojo-nvrtc-time-{}-{}.csv", ::getpid(), calls++)
          : std::filesystem::path();
  const std::string time_option = "--time=" + times.string();
  if (request.time_stages) options.push_back(time_option.c_str());

  const auto start = std::chrono::steady_clock::now();
  nvrtcResult result = nvrtcCompileProgram(raw, int(options.size()), options.data());
  const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::array<double, kCompileStages> stage_ms{};
  if (request.time_stages) {
    read_phase_times(times, stage_ms);
    std::error_code ignored;
    std::filesystem::remove(times, ignored);
  }
  std::string log = program_text(raw, nvrtcGetProgramLogSize, nvrtcGetProgramLog, "nvrtcGetProgramLog");
  if (result != NVRTC_SUCCESS) {
    throw CompileError(fmt::format("{}: NVRTC failed for {}: {}", request.description, request.target.sm_name(),
                                   diagnostics::first_error(log)),
                       diagnostics::annotate(log, request.source));
  }

  CompileResult out;
  out.log = std::move(log);
  out.stage_ms = stage_ms;
  double phases = 0;
  for (double ms : out.stage_ms) phases += ms;
  out.stage_ms[int(CompileStage::other)] += std::max(0.0, total_ms - phases);
  auto ptx = [&] { return program_text(raw, nvrtcGetPTXSize, nvrtcGetPTX, "nvrtcGetPTX"); };
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
