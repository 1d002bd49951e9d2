#include "device/cpu/library.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <vector>

#include "device/cpu/fiber.hpp"
#include "device/cpu/primitives.hpp"
#include "mojo/error.hpp"

namespace mojo::cpu {

#if MOJO_ASAN || MOJO_TSAN
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

std::unique_ptr<Library> Library::load(std::string_view image) {
  if (image.size() < 20 ||
      std::memcmp(image.data(),
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      image[16] != 3 /* ET_DYN */)
    throw DeviceError("cpu device: the module is not a host shared object (PTX or cubin is for the cuda device)");
  // dlopen needs a file and tells libraries apart by path: a new name each
  // time (made unique by mkstemps, never by pid: a file a sanitized process
  // left behind would collide with a later process of the same pid),
  // unlinked as soon as it is mapped (in sanitized builds when it is
  // unloaded, so that a report can read the kernel's symbols and lines).
  std::string path = (std::filesystem::temp_directory_path() / "mojo-jit-kernels-XXXXXX.so").string();
  {
    const int fd = ::mkstemps(path.data(), 3);
    if (fd < 0) throw DeviceError(fmt::format("cpu device: cannot write {}: {}", path, std::strerror(errno)));
    ::fchmod(fd, 0700);
    std::size_t written = 0;
    while (written < image.size()) {
      const ssize_t n = ::write(fd, image.data() + written, image.size() - written);
      if (n <= 0) break;
      written += std::size_t(n);
    }
    ::close(fd);
    if (written < image.size()) {
      ::unlink(path.c_str());
      throw DeviceError(fmt::format("cpu device: cannot write {}: {}", path, std::strerror(errno)));
    }
  }
  std::unique_ptr<Library> lib(new Library());
  lib->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (kSanitized && lib->handle_ != nullptr) lib->path_ = path;
  else ::unlink(path.c_str());
  if (lib->handle_ == nullptr)
    throw DeviceError(fmt::format("cpu device: cannot load the kernel library: {}", dlerror()));
  void* handle = lib->handle_;
  auto** table = static_cast<const mojo_cpu_api**>(dlsym(handle, "mojo_cpu_api_table"));
  if (table == nullptr)
    throw DeviceError("cpu device: the library has no mojo_cpu_api_table (not built by mojo-jit's host compiler)");
  *table = &api_table();
  return lib;
}

Library::~Library() {
  if (handle_ != nullptr) dlclose(handle_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

Kernel* Library::kernel(const std::string& name) {
  for (auto& k : kernels_)
    if (k->name == name) return k.get();
  auto entry = reinterpret_cast<void (*)(void**)>(dlsym(handle_, (name + "_mojo_cpu").c_str()));
  auto* params = static_cast<const unsigned* const*>(dlsym(handle_, (name + "_mojo_cpu_params").c_str()));
  if (entry == nullptr || params == nullptr)
    throw DeviceError(fmt::format("the loaded module has no kernel named '{}'", name));
  auto touch = reinterpret_cast<void (*)()>(dlsym(handle_, "mojo_cpu_tls_touch"));
  kernels_.push_back(std::make_unique<Kernel>(Kernel{name, entry, *params, 48 * 1024, touch}));
  return kernels_.back().get();
}

TensorMap encode_tensor_map(DevicePtr base, const std::uint64_t (&dims)[3], const std::uint64_t (&strides)[2],
                            const std::uint32_t (&box)[3], unsigned element_bytes) {
  TensorMapRecord r{};
  r.magic = kTensorMapMagic;
  r.base = base;
  std::copy(std::begin(dims), std::end(dims), r.dims);
  std::copy(std::begin(strides), std::end(strides), r.strides);
  std::copy(std::begin(box), std::end(box), r.box);
  r.element_bytes = element_bytes;
  r.swizzle_bytes = 128;
  // cuTensorMapEncodeTiled's rules (cuda.h), as the driver would reject the map.
  auto reject = [&](std::string_view why) {
    throw DeviceError(fmt::format("cuTensorMapEncodeTiled (cpu device): {} (dims {}x{}x{}, byte strides {} and {}, "
                                  "box {}x{}x{})",
                                  why, dims[0], dims[1], dims[2], strides[0], strides[1], box[0], box[1], box[2]),
                      1);
  };
  if (base % 16 != 0) reject("the global address is not 16-byte aligned");
  for (std::uint64_t d : r.dims)
    if (d == 0 || d > (std::uint64_t(1) << 32)) reject("a dimension is 0 or above 2^32");
  for (std::uint64_t s : r.strides)
    if (s % 16 != 0 || s >= (std::uint64_t(1) << 40)) reject("a stride is not a multiple of 16 bytes below 2^40");
  for (unsigned b : r.box)
    if (b == 0 || b > 256) reject("a box dimension is 0 or above 256");
  if (r.box[0] * r.element_bytes % 16 != 0) reject("the box's inner dimension is not a multiple of 16 bytes");
  if (r.box[0] * r.element_bytes > r.swizzle_bytes)
    reject("the box's inner dimension exceeds the 128-byte swizzle span");
  TensorMap map{};
  static_assert(sizeof(TensorMapRecord) <= sizeof(TensorMap));
  std::memcpy(&map, &r, sizeof r);
  return map;
}

}  // namespace mojo::cpu
