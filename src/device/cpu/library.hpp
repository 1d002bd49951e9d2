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
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

// The CPU device's TMA descriptor of a [batches, rows, cols] tensor, checked
// by cuTensorMapEncodeTiled's rules (DeviceError naming the broken one).
TensorMap encode_tensor_map(DevicePtr base, DType dtype, std::int64_t cols, std::int64_t rows, std::int64_t batches,
                            std::int64_t row_stride, std::int64_t batch_stride, unsigned box_cols, unsigned box_rows);

}  // namespace mojo::cpu
