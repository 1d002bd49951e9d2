// Running a toolchain program (the host C++ compiler, ptxas) on files in a
// private scratch directory.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mojo::subprocess {

// Runs argv (argv[0] searched on PATH when it names no directory) with stdout and stderr into `log`: the exit
// status, 128 + the signal that ended it, or -errno when it could not start (-ENOENT: no such program).
int run(const std::vector<std::string>& argv, const std::filesystem::path& log);

// The whole file; empty when it cannot be read.
std::string read_file(const std::filesystem::path& path);
// Writes `bytes` to `path`; false when it cannot.
bool write_file(const std::filesystem::path& path, std::string_view bytes);

// A private directory under the system's temporary directory, removed with its contents. Throws CompileError
// naming `tool` when it cannot be made.
struct ScratchDir {
  explicit ScratchDir(std::string_view tool);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::filesystem::path path;
};

}  // namespace mojo::subprocess
