// A kernel library built for the host (a shared object the host compiler
// made from the same templates), loaded from its bytes with dlopen.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "device/cpu/executor.hpp"
#include "mojo/device.hpp"

namespace mojo::cpu {

class Library {
 public:
  // Throws DeviceError when the image is not a kernel library of this ABI.
  static std::unique_ptr<Library> load(std::string_view image);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // Throws DeviceError naming the kernel when the library lacks it. The
  // Kernel lives as long as the library.
  Kernel* kernel(const std::string& name);

 private:
  Library() = default;
  void* handle_ = nullptr;
  std::string path_;  // kept until unloaded (sanitized builds)
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

// The CPU device's TMA descriptor of the layout tile_tensor_map gives the
// driver (dims innermost first, byte strides of dims 1 and 2, box, 128-byte
// swizzle), checked by cuTensorMapEncodeTiled's rules (DeviceError naming
// the broken one).
TensorMap encode_tensor_map(DevicePtr base, const std::uint64_t (&dims)[3], const std::uint64_t (&strides)[2],
                            const std::uint32_t (&box)[3], unsigned element_bytes);

}  // namespace mojo::cpu
