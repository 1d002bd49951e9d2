#include "compiler/nvjitlink.hpp"

#include <fmt/format.h>
#include <nvJitLink.h>

#include <vector>

#include "mojo/error.hpp"

namespace mojo::nvjitlink {

std::string version() {
  unsigned major = 0, minor = 0;
  return nvJitLinkVersion(&major, &minor) == NVJITLINK_SUCCESS ? fmt::format("{}.{}", major, minor) : "unknown";
}

std::string ptx_to_cubin(std::span<const std::string> ptx, const Target& target, unsigned jobs,
                         std::string_view description) {
  const std::string arch = fmt::format("-arch={}", target.sm_name()),
                    split = fmt::format("-Xptxas=--split-compile={}", jobs);
  std::vector<const char*> options{arch.c_str(), "-O3"};
  if (jobs > 1) options.push_back(split.c_str());
  nvJitLinkHandle handle = nullptr;
  if (nvJitLinkCreate(&handle, std::uint32_t(options.size()), options.data()) != NVJITLINK_SUCCESS)
    throw CompileError(fmt::format("{}: nvJitLink cannot target {}", description, target.sm_name()), "");
  auto log_of = [&] {
    std::size_t n = 0;
    std::string log;
    if (nvJitLinkGetErrorLogSize(handle, &n) == NVJITLINK_SUCCESS && n > 0) {
      log.resize(n);
      nvJitLinkGetErrorLog(handle, log.data());
      while (!log.empty() && log.back() == '\0') log.pop_back();
    }
    return log;
  };
  std::string cubin;
  nvJitLinkResult r = NVJITLINK_SUCCESS;
  for (std::size_t i = 0; i < ptx.size() && r == NVJITLINK_SUCCESS; ++i) {
    std::string name = fmt::format("part{}.ptx", i);
    r = nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, ptx[i].data(), ptx[i].size(), name.c_str());
  }
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(handle);
  std::size_t size = 0;
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkGetLinkedCubinSize(handle, &size);
  if (r == NVJITLINK_SUCCESS) {
    cubin.resize(size);
    r = nvJitLinkGetLinkedCubin(handle, cubin.data());
  }
  std::string log = r == NVJITLINK_SUCCESS ? "" : log_of();
  nvJitLinkDestroy(&handle);
  if (r != NVJITLINK_SUCCESS)
    throw CompileError(fmt::format("{}: nvJitLink failed to turn PTX into a {} cubin (error {})", description,
                                   target.sm_name(), int(r)),
                       log);
  return cubin;
}

}  // namespace mojo::nvjitlink
