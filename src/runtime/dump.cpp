#include "runtime/dump.hpp"

#include <fmt/format.h>

#include <fstream>
#include <string_view>
#include <system_error>

#include "core/log.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace fs = std::filesystem;

CompileResult compile_dumped(const Compiler& compiler, CompileRequest request, const fs::path& dump_dir,
                             const std::string& stem, const std::string& meta) {
  if (dump_dir.empty()) {
    try {
      return compiler.compile(request);
    } catch (const CompileError& e) {
      throw CompileError(e.what(), e.log() +
                                       "\n(MOJO_JIT_DUMP=DIR keeps the translation unit and the log, and gives "
                                       "a command that reproduces this compile outside mojo-jit)\n");
    }
  }
  std::error_code ec;
  fs::create_directories(dump_dir, ec);
  const std::string base = (dump_dir / stem).string();
  auto write = [&](const std::string& suffix, std::string_view bytes) {
    std::ofstream out(base + suffix, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) log::warn(fmt::format("MOJO_JIT_DUMP: cannot write {}{}", base, suffix));
  };
  write(".cu", request.source);
  write(".txt", meta);
  request.keep_stages = true;
  CompileResult result;
  try {
    result = compiler.compile(request);
  } catch (const CompileError& e) {
    const std::string log =
        fmt::format("{}\nreproduce outside mojo-jit:\n  {}\n", e.log(), compiler.repro_command(request, base + ".cu"));
    write(".log", log);
    throw CompileError(fmt::format("{} [dumped: {}.cu, {}.log]", e.what(), base, base), log);
  }
  for (const auto& [stage, text] : result.stages) write(fmt::format(".{}", emit_name(stage)), text);
  write(fmt::format(".{}", emit_name(request.emit)), result.binary);
  result.stages.clear();
  return result;
}

}  // namespace mojo
