// Helpers shared by the tests: temporary directories, running a command, reading files.
#pragma once

#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "mojo/tensor.hpp"

namespace mojo {
// Readable test names: "f16" rather than "1-byte object <01>".
inline void PrintTo(DType d, std::ostream* os) { *os << dtype_name(d); }
}  // namespace mojo

namespace mojo::test {

// A path relative to the directory of the running test binary.
inline std::string beside_exe(const char* relative) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / relative).lexically_normal().string();
}

#define MOJO_TEST_CLI (::mojo::test::beside_exe(MOJO_TEST_CLI_REL))
#define MOJO_TEST_QUICKSTART (::mojo::test::beside_exe(MOJO_TEST_QUICKSTART_REL))
#define MOJO_TEST_TEMPLATE_DIR (::mojo::test::beside_exe(MOJO_TEST_TEMPLATE_DIR_REL))

// The compilers of this build, and how test names spell them ("Llvm": the
// sanitizer presets leave out tests whose names say so, LLVM being uninstrumented).
inline std::vector<std::string> compilers() {
  std::vector<std::string> c = {"nvrtc"};
  if (MOJO_TEST_WITH_LLVM) c.push_back("llvm");
  return c;
}
inline std::string compiler_test_name(const std::string& compiler) { return compiler == "llvm" ? "Llvm" : "Nvrtc"; }

// A fresh directory, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("mojo-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  FILE* pipe = popen(("(" + command + ") 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// nvdisasm from PATH, the CUDA toolkit or the .venv tools/setup.sh makes; empty if none.
inline std::string find_nvdisasm() {
  std::vector<std::string> dirs = {beside_exe(MOJO_TEST_VENV_BIN_REL), "/usr/local/cuda/bin"};
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string d; std::getline(ss, d, ':');) dirs.push_back(d);
  }
  for (const std::string& d : dirs)
    if (::access((std::filesystem::path(d) / "nvdisasm").c_str(), X_OK) == 0) return d + "/nvdisasm";
  return {};
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::filesystem::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// A shipped template with every `from` replaced by `to`, written to `dir`
// (searched before the embedded templates): how tests plant a bug. Returns
// how many places were replaced.
inline int write_template_variant(const std::filesystem::path& dir, const std::string& file, const std::string& from,
                                  const std::string& to) {
  std::string text = read_file(std::filesystem::path(MOJO_TEST_TEMPLATE_DIR) / file);
  int replaced = 0;
  for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size(), ++replaced)
    text.replace(at, from.size(), to);
  std::filesystem::create_directories(dir);
  write_file(dir / file, text);
  return replaced;
}

// Runs `f` and returns the message of the exception of type E it throws (fails otherwise).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

}  // namespace mojo::test
