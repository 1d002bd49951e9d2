#include "device/cuda/driver.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <mutex>
#include <string>

#include "mojo/error.hpp"

namespace mojo::driver {
namespace {

#define MOJO_STRINGIFY_EXPANDED(x) MOJO_STRINGIFY(x)
#define MOJO_STRINGIFY(x) #x

struct Loaded {
  Api api;
  std::string failure;  // empty when the driver is usable
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    out.failure = fmt::format(
        "no CUDA driver: dlopen(libcuda.so.1) failed ({}); install the NVIDIA driver, or use "
        "mojo-jit for compilation only (--emit, prewarm) on this machine",
        dlerror());
    return out;
  }
#define MOJO_DRIVER_RESOLVE(name)                                                         \
  out.api.name = reinterpret_cast<decltype(out.api.name)>(                                \
      dlsym(lib, MOJO_STRINGIFY_EXPANDED(name)));                                         \
  if (out.api.name == nullptr) {                                                          \
    out.failure = fmt::format("the CUDA driver is too old: libcuda.so.1 lacks {}; "       \
                              "install a driver for CUDA {}.{} or newer",                 \
                              MOJO_STRINGIFY_EXPANDED(name), CUDA_VERSION / 1000,         \
                              CUDA_VERSION % 1000 / 10);                                  \
    return out;                                                                           \
  }
  MOJO_DRIVER_FUNCTIONS(MOJO_DRIVER_RESOLVE)
#undef MOJO_DRIVER_RESOLVE

  CUresult r = out.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    out.api.cuGetErrorName(r, &name);
    out.failure = fmt::format("no usable GPU: cuInit failed with {}", name ? name : "an unknown error");
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();  // thread-safe, once per process
  return instance;
}

}  // namespace

const Api& api() {
  const Loaded& l = loaded();
  if (!l.failure.empty()) throw NoDeviceError(l.failure);
  return l.api;
}

void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const Api& a = loaded().api;
  if (a.cuGetErrorName) a.cuGetErrorName(r, &name);
  if (a.cuGetErrorString) a.cuGetErrorString(r, &text);
  std::string what = call;
  if (auto paren = what.find('('); paren != std::string::npos) what.resize(paren);
  throw DeviceError(fmt::format("{} failed: {} ({})", what, name ? name : "CUDA_ERROR_UNKNOWN",
                                text ? text : "no description"),
                    int(r));
}

}  // namespace mojo::driver
