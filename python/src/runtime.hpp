// mojo_jit._C.Runtime: a mojo::Runtime with Python's arguments, and a launch of array views (host arrays staged).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "mojo/mojo.hpp"

namespace mojo::python {

class PyRuntime {
 public:
  explicit PyRuntime(mojo::RuntimeOptions options) : rt_(std::move(options)) {}

  // One launch of arrays in the op's tensor order (any array type: view_of), scalars by name.
  void launch(const std::string& op_name, nb::sequence tensor_objs, nb::dict scalar_dict, std::uintptr_t stream);
  // One launch of views in the op's tensor order; called with the GIL held, released around the launch. Host arrays
  // are staged: copied into device memory (on the CPU device: poisoned, guarded allocations, so a store past a
  // buffer is caught), the kernel launched, the tensors it writes copied back. Device arrays are launched in place,
  // asynchronously on `stream`.
  void launch_views(const mojo::OpDef& op, const std::vector<ArrayView>& views,
                    const std::vector<mojo::ScalarArg>& scalars, std::uintptr_t stream);

  // What one specialization compiles to: PTX or LLVM IR as text, a cubin or the CPU device's shared object as bytes.
  nb::object emit(const std::string& op_name, nb::dict shapes, const std::string& dtype, nb::dict scalar_dict,
                  const std::string& arch, const std::string& emit);
  nb::object describe(const std::string& op_name, nb::dict shapes, const std::string& dtype, nb::dict scalar_dict,
                      const std::string& arch, int sms);
  // Compiles specializations into the cache: a TOML manifest's, or every dtype of `ops` at their example shapes.
  nb::dict prewarm(const std::string& manifest_path, const std::vector<std::string>& ops,
                   const std::vector<std::string>& arch, const std::string& emit, int jobs);
  nb::dict stats() const;
  nb::dict device_info();
  std::string cache_dir() const { return rt_.cache_dir().string(); }
  std::string compiler() const { return rt_.compiler().identity(); }

 private:
  std::vector<mojo::Tensor> tensors_for(const mojo::OpDef& op, nb::dict shapes, const std::string& dtype,
                                        const std::vector<mojo::ScalarArg>& scalars);

  mojo::Runtime rt_;
};

// For benchmarks of the Python layers (tools/bench/python_overhead.py): while on, every launch stops at the device
// layer's sink (nothing runs) and host arrays are passed as they are, unstaged; off, launches run.
void stop_launches_at_sink(bool on);

}  // namespace mojo::python
