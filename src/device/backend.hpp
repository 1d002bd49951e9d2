// One interface over the two devices: src/device/cuda/ (the CUDA Driver API)
// and src/device/cpu/ (the emulator). The public RAII types of mojo/device.hpp
// (device.cpp) hold the backend that made them and call it; none of them asks
// which device it is on.
//
// Handles are the device's own, opaque here: on the GPU a CUstream, CUevent,
// CUmodule, CUfunction and CUgraphExec, and a context (CUcontext) that each
// object remembers and makes current before it is used; on the cpu device the
// emulator's objects, and no context (null).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mojo/device.hpp"

namespace mojo {

enum class FunctionAttribute { registers, static_shared_bytes, local_bytes, max_threads_per_block };

class Backend {
 public:
  virtual bool is_cpu() const noexcept = 0;

  // Makes the device with this context (cpu: emulating `target`) current on the calling thread: current_device()
  // then says {this, context, target}.
  virtual void make_current(void* context, const Target& target) const = 0;
  virtual void synchronize() const = 0;  // the current device's work, all of it

  // Streams and events, made in the thread's current context.
  virtual StreamHandle create_stream() const = 0;
  virtual void destroy_stream(void* context, StreamHandle stream) const noexcept = 0;
  virtual void synchronize_stream(void* context, StreamHandle stream) const = 0;
  virtual void* create_event() const = 0;
  virtual void destroy_event(void* context, void* event) const noexcept = 0;
  virtual void record_event(void* context, void* event, StreamHandle stream) const = 0;
  virtual void synchronize_event(void* context, void* event) const = 0;
  virtual float elapsed_ms(void* start, void* end) const = 0;

  // Memory. fill_async, copy_async and copy_to_host_after run in stream order on the thread's current device.
  virtual DevicePtr allocate(std::size_t bytes) const = 0;
  virtual void release(void* context, DevicePtr p) const noexcept = 0;
  virtual void copy_from_host(void* context, DevicePtr dst, const void* src, std::size_t bytes) const = 0;
  virtual void copy_to_host(void* context, void* dst, DevicePtr src, std::size_t bytes) const = 0;
  virtual void fill_bytes(void* context, DevicePtr dst, std::uint8_t value, std::size_t bytes) const = 0;
  virtual void fill_async(DevicePtr dst, std::uint8_t value, std::size_t bytes, StreamHandle stream) const = 0;
  virtual void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) const = 0;
  virtual void copy_to_host_after(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) const = 0;

  // Modules and their kernels; a function lives as long as its module.
  virtual void* load_module(std::string_view image) const = 0;
  virtual void unload_module(void* context, void* module) const noexcept = 0;
  virtual void* function(void* module, const std::string& name) const = 0;
  virtual int attribute(void* function, FunctionAttribute a) const = 0;
  virtual void set_max_dynamic_shared(void* function, int bytes) const = 0;
  // launch() in mojo/device.hpp.
  virtual void launch(void* function, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream, void** args,
                      LaunchOptions options) const = 0;

  // tile_tensor_map's descriptor (a 16-bit element type; dims innermost first, byte strides of dims 1 and 2).
  virtual TensorMap encode_tensor_map(DType dtype, DevicePtr base, const std::uint64_t (&dims)[3],
                                      const std::uint64_t (&strides)[2], const std::uint32_t (&box)[3]) const = 0;

  // Graphs: the work a stream records between begin and end, replayed by launch_graph. While a thread
  // captures, it may not make the synchronous calls above (copies to and from the host, fills, waits on a
  // captured stream or event): the GPU refuses them (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), and so does the
  // cpu device, so that CI finds such a call. `allocate` is allowed (in the relaxed mode on the GPU).
  virtual bool is_capturing(StreamHandle stream) const = 0;
  virtual void begin_capture(StreamHandle stream) const = 0;
  virtual void abandon_capture(StreamHandle stream) const noexcept = 0;
  virtual void* end_capture(StreamHandle stream) const = 0;
  virtual void destroy_graph(void* graph) const noexcept = 0;
  virtual void launch_graph(void* graph, StreamHandle stream) const = 0;

 protected:
  ~Backend() = default;
};

// Internal to the library: calls to them within it are direct.
[[gnu::visibility("hidden")]] const Backend& cuda_backend();
[[gnu::visibility("hidden")]] const Backend& cpu_backend();

// The device current on this thread, as a CUDA context is: where the streams,
// events, buffers and modules it creates next go. `context`: the CUDA context
// this thread made current (null on the cpu device); `target`: what it emulates.
// Compared on every launch (Device::ensure_current), so it is plain data.
struct CurrentDevice {
  const Backend* backend = nullptr;  // null: none yet
  void* context = nullptr;
  Target target;
};
// Constant-initialised and internal to the library, so that reading it is a plain thread-local access.
extern constinit thread_local CurrentDevice t_current_device __attribute__((visibility("hidden")));
inline CurrentDevice& current_device() noexcept { return t_current_device; }
// A context the application made current through the driver (cuCtxGetCurrent), or null.
void* driver_current_context();
// The current device's backend, or the GPU's when none is current (what the driver would use).
inline const Backend& current_backend() noexcept {
  const Backend* b = current_device().backend;
  return b != nullptr ? *b : cuda_backend();
}

}  // namespace mojo
