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

#include "inspect.hpp"
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

// nvdisasm where `mojo-jit --emit=sass` finds it, tools/setup.sh's .venv found beside this binary (a build tree
// copied elsewhere still finds it); empty if none.
inline std::string find_nvdisasm() { return inspect::find_nvdisasm(beside_exe(MOJO_TEST_VENV_BIN_REL)); }

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

// What a cubin's SASS (nvdisasm -c) says about its tensor-core code; nullopt when there is no nvdisasm.
struct SassFacts {
  int hgmma = 0;         // HGMMA: sm_90a's asynchronous warpgroup MMA
  int wgmma_waits = 0;   // WARPGROUP.DEPBAR: one after every HGMMA when ptxas serialized them (C7509)
  int setmaxnreg = 0;    // USETMAXREG: gone when ptxas ignored setmaxnreg (C7504)
  int hmma = 0;          // HMMA.16816: sm_80's mma.sync
  int tma_loads = 0;     // UTMALDG
  int local_memory = 0;  // LDL and STL: spills or a stack
  std::string sass;
};
inline std::optional<SassFacts> sass_facts(const std::string& cubin) {
  const std::string nvdisasm = find_nvdisasm();
  if (nvdisasm.empty()) return std::nullopt;
  SassFacts f;
  f.sass = inspect::disassemble(nvdisasm, cubin);
  auto count = [&](std::string_view what) {
    int n = 0;
    for (std::size_t at = f.sass.find(what); at != std::string::npos; at = f.sass.find(what, at + 1)) ++n;
    return n;
  };
  f.hgmma = count("HGMMA.");
  f.wgmma_waits = count("WARPGROUP.DEPBAR");
  f.setmaxnreg = count("USETMAXREG");
  f.hmma = count("HMMA.16816");
  f.tma_loads = count("UTMALDG");
  f.local_memory = count(" LDL") + count(" STL");
  return f;
}
// An sm_90a kernel as ptxas compiles one whole module: wgmma asynchronous (fewer waits than HGMMAs: a
// serialized kernel waits after each), setmaxnreg kept, no local memory.
inline void expect_whole_program_wgmma(const SassFacts& f) {
  EXPECT_GT(f.hgmma, 0) << "HGMMA in SASS";
  EXPECT_LT(f.wgmma_waits, f.hgmma) << "a WARPGROUP.DEPBAR after every HGMMA: ptxas serialized wgmma";
  EXPECT_GT(f.setmaxnreg, 0) << "no USETMAXREG: ptxas ignored setmaxnreg";
  EXPECT_EQ(f.local_memory, 0) << "LDL/STL in SASS";
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
