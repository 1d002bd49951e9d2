// Two devices behind one thin RAII API (each object holds the backend that
// made it, src/device/backend.hpp):
//  - cuda: the CUDA Driver API. libcuda.so.1 is opened with dlopen on first
//    use, so programs linking mojo-jit start on machines with no driver;
//    asking for a GPU there throws NoDeviceError. Every failing driver call
//    throws DeviceError naming the call and the driver's error.
//  - cpu: host memory, kernels built for the host and run by an emulator of
//    a chosen GPU target (src/device/cpu/), in stream order (each launch
//    completes before it returns). For checking kernels where no GPU is.
// Like a CUDA context, the device made current on a thread (Device::open,
// make_current) decides where the Streams, Events, buffers and modules that
// thread creates next live; each object remembers its device and makes its
// context current on whichever thread uses it. On a thread where nothing is
// current, the first such object makes the default device current (as the
// CUDA runtime does lazily): a context the application made current through
// the driver if there is one, else the device of the last Runtime made
// (Device::set_default), else GPU 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "mojo/target.hpp"
#include "mojo/tensor.hpp"

// The driver's opaque handle types (identical to cuda.h's typedefs).
struct CUstream_st;
struct CUfunc_st;

namespace mojo {

class Backend;  // the device an object lives on: cuda or cpu (src/device/backend.hpp)

using StreamHandle = CUstream_st*;  // nullptr is the legacy default stream

namespace detail {
// A device object's handle and where it lives: the backend that made it and its CUDA context (null on the cpu
// device). Moving one leaves the source without a handle, so the destructor of the object it came from releases
// nothing; assigning swaps, so the old handle goes with the source.
template <class H>
struct DeviceHandle {
  H handle{};
  const Backend* backend = nullptr;
  void* context = nullptr;

  DeviceHandle() = default;
  DeviceHandle(H h, const Backend* b, void* c) noexcept : handle(h), backend(b), context(c) {}
  DeviceHandle(DeviceHandle&& o) noexcept
      : handle(std::exchange(o.handle, H{})), backend(o.backend), context(o.context) {}
  DeviceHandle& operator=(DeviceHandle&& o) noexcept {
    std::swap(handle, o.handle);
    std::swap(backend, o.backend);
    std::swap(context, o.context);
    return *this;
  }
};
}  // namespace detail

// True when libcuda.so.1 loads and reports at least one GPU. Never throws.
bool device_available() noexcept;

class Device {
 public:
  static int count();  // GPUs; 0 when there is no driver
  // Opens GPU `ordinal` and makes its primary context current on this thread.
  static Device open(int ordinal = 0);
  // "cuda" (GPU 0), "cuda:N", "cpu" (emulating sm_80), "cpu:ARCH" (e.g.
  // cpu:sm_90a) or "cpu:ARCH,sms=N"; made current on this thread. Throws
  // InvalidArgumentError for anything else.
  static Device open(std::string_view spec);
  // The CPU device emulating `target`, made current on this thread, with
  // `sms` SMs (0: as many as the target's reference GPU: 132 for sm_90).
  // Fewer make a persistent kernel's blocks loop over several tiles at
  // shapes the emulator affords.
  static Device cpu(const Target& target, int sms = 0);
  // The device (a spec as open() takes) that objects made on a thread with
  // nothing current go to; a Runtime sets its own. Opened on first need.
  static void set_default(std::string_view spec);

  bool is_cpu() const noexcept;
  int ordinal() const noexcept { return ordinal_; }
  const std::string& name() const noexcept { return name_; }
  Target target() const noexcept { return target_; }  // from the compute capability
  int sm_count() const noexcept { return sm_count_; }
  int max_shared_per_block() const noexcept { return max_smem_block_; }
  int max_shared_per_block_optin() const noexcept { return max_smem_optin_; }
  int max_shared_per_sm() const noexcept { return max_smem_sm_; }
  std::size_t total_memory() const noexcept { return total_memory_; }

  // Makes this device's primary context current on the calling thread.
  void make_current() const;
  // make_current() only if another context (or none) is current: a
  // thread-local read in the driver, cheap enough for every launch.
  void ensure_current() const;
  void synchronize() const;

 private:
  const Backend* backend_ = nullptr;
  std::shared_ptr<void> primary_context_;  // a GPU's, retained while a Device of it lives
  void* context_ = nullptr;                // its CUcontext (null on the cpu device)
  int ordinal_ = 0;
  std::string name_;
  Target target_;
  int sm_count_ = 0, max_smem_block_ = 0, max_smem_optin_ = 0, max_smem_sm_ = 0;
  std::size_t total_memory_ = 0;
};

class Stream {
 public:
  Stream();  // a non-blocking stream in the current context
  ~Stream();
  Stream(Stream&& other) noexcept = default;
  Stream& operator=(Stream&& other) noexcept = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamHandle handle() const noexcept { return stream_.handle; }
  operator StreamHandle() const noexcept { return stream_.handle; }
  void synchronize() const;

 private:
  detail::DeviceHandle<StreamHandle> stream_;
};

class Event {
 public:
  Event();
  ~Event();
  Event(Event&& other) noexcept = default;
  Event& operator=(Event&& other) noexcept = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(StreamHandle stream = nullptr);
  void synchronize() const;
  // Milliseconds between two recorded events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  detail::DeviceHandle<void*> event_;
};

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  DevicePtr ptr() const noexcept { return ptr_.handle; }
  std::size_t size() const noexcept { return size_; }
  // A tensor view of this buffer (throws ShapeError if spec does not fit).
  Tensor as(const TensorSpec& spec, std::size_t byte_offset = 0) const;

  // Synchronous copies; `bytes` must fit in the buffer.
  void copy_from_host(const void* src, std::size_t bytes, std::size_t offset = 0);
  void copy_to_host(void* dst, std::size_t bytes, std::size_t offset = 0) const;
  void fill_bytes(std::uint8_t value);

 private:
  detail::DeviceHandle<DevicePtr> ptr_;
  std::size_t size_ = 0;
};

class Function;

// A loaded PTX or cubin image; unloaded on destruction.
class Module {
 public:
  // PTX must be NUL-terminated text; cubin is an ELF image; for the cpu
  // device, a host shared object (Emit::host).
  static Module load(std::string_view image);
  ~Module();
  Module(Module&& other) noexcept = default;
  Module& operator=(Module&& other) noexcept = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Function function(const std::string& name) const;

 private:
  Module() = default;
  detail::DeviceHandle<void*> module_;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// How a kernel is launched besides its geometry.
struct LaunchOptions {
  // Programmatic dependent launch (sm_90+): the kernel may start before the one before it in the stream has
  // finished, so it must wait for it itself (every template's kernel does: mojo::after_previous_kernels); no
  // effect on the cpu device.
  bool overlap_previous = false;
  // Every block of the grid is resident at once (CU_LAUNCH_ATTRIBUTE_COOPERATIVE), so blocks may wait for
  // each other (mojo::sync_blocks). The launch fails where the grid cannot all be resident; the cpu device
  // then runs each block on an OS thread of its own, and fails a wait for another block in any other launch.
  bool cooperative = false;
};

// A kernel inside a loaded Module (valid while the Module lives).
class Function {
 public:
  Function() = default;

  int num_registers() const;
  int static_shared_bytes() const;
  int local_bytes() const;
  int max_threads_per_block() const;
  // Raises the dynamic shared memory limit (needed above 48 KiB).
  void set_max_dynamic_shared(int bytes) const;

  // The driver's CUfunction, for a raw cuLaunchKernel; null on the cpu device.
  CUfunc_st* handle() const noexcept;
  explicit operator bool() const noexcept { return function_ != nullptr; }

 private:
  friend class Module;
  friend void launch(const Function&, Dim3, Dim3, unsigned, StreamHandle, void**, LaunchOptions);
  Function(const Backend& backend, void* function) : backend_(&backend), function_(function) {}
  const Backend* backend_ = nullptr;
  void* function_ = nullptr;
};

// cuLaunchKernel (cuLaunchKernelEx with options): `args` points at one pointer per kernel parameter.
void launch(const Function& f, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream, void** args,
            LaunchOptions options = {});

// A TMA descriptor (the driver's CUtensorMap): kernels take it by value and
// read it where it lies in param space (MOJO_PARAM_ADDRESS in
// kernel_templates/mojo_wgmma.cuh).
struct alignas(64) TensorMap {
  std::uint64_t opaque[16];
};
// The descriptor of a row-major [batches, rows, cols] tensor of 16-bit
// elements (f16, bf16) at `base`, strides in elements, read in boxes of
// box_rows x box_cols (box_cols * 2 = 128 bytes) with 128-byte swizzling;
// boxes past the edges read zeros. Needs the driver (cuTensorMapEncodeTiled)
// but no GPU work. Throws DeviceError if the driver rejects the layout.
TensorMap tile_tensor_map(DevicePtr base, DType dtype, std::int64_t cols, std::int64_t rows, std::int64_t batches,
                          std::int64_t row_stride, std::int64_t batch_stride, unsigned box_cols, unsigned box_rows);

// Asynchronous device-to-device copy.
void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream);
// Asynchronous fill: `bytes` bytes at `dst` set to `value`, in stream order (a CUDA graph captures it).
void fill_async(DevicePtr dst, std::uint8_t value, std::size_t bytes, StreamHandle stream);
// Waits for `stream`, then copies device memory to the host.
void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream);

// Whether `stream` is being captured into a CUDA graph, by Graph::capture or
// by anyone else through the driver (torch.cuda.graph, say).
bool is_capturing(StreamHandle stream);

// A CUDA graph recorded from the work `record` enqueues on `stream` (which
// must not be the legacy default stream), replayed with one launch. While it
// records, the calling thread may launch and allocate, but not copy to or from
// the host nor wait on the stream (CUDA's thread-local capture mode).
class Graph {
 public:
  template <class F>
  static Graph capture(StreamHandle stream, F&& record) {
    begin_capture(stream);
    try {
      record();
    } catch (...) {
      abandon_capture(stream);
      throw;
    }
    return end_capture(stream);
  }
  ~Graph();
  Graph(Graph&& other) noexcept = default;
  Graph& operator=(Graph&& other) noexcept = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void launch(StreamHandle stream) const;

 private:
  Graph() = default;
  static void begin_capture(StreamHandle stream);
  static void abandon_capture(StreamHandle stream) noexcept;
  static Graph end_capture(StreamHandle stream);
  detail::DeviceHandle<void*> exec_;  // a CUgraphExec, or the launches a cpu stream recorded
};

}  // namespace mojo
