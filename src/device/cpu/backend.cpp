// The cpu device: host memory between guard zones, kernel libraries built for
// the host, and launches run by the emulator in stream order (each completes
// before it returns, unless its stream is being captured into a graph). The
// calls that would reach the driver on a GPU are counted (device_hooks), so
// the host benchmark measures the same work on both devices.
#include "device/backend.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "device/cpu/executor.hpp"
#include "device/cpu/library.hpp"
#include "device/cpu/memory.hpp"
#include "device/hooks.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace cpu {
namespace {

// What the GPU this thread's cpu device emulates allows (set when it is made current).
thread_local Limits t_limits;

// The launches a stream records while it is captured: a graph.
struct Recording {
  std::vector<std::function<void()>> work;
};

// The captures this thread began and has not ended (Graph::capture begins and ends one on the same thread). It
// uses CUDA's thread-local capture mode, in which a GPU refuses a capturing thread's synchronous calls; the cpu
// device refuses the same ones, so that a test on it finds the call a graph's first launch would fail on (the
// sampler's workspace allocation did on an H200, 2026-11-27, before the GPU allocated in the relaxed mode).
thread_local int t_captures = 0;
constexpr int kCaptureUnsupported = 900;  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
[[noreturn]] void refuse_in_capture(const char* call) {
  throw DeviceError(fmt::format("{} failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (operation not permitted when "
                                "stream is capturing: the cpu device refuses, as a GPU does, this synchronous call "
                                "while the thread captures a stream into a graph)",
                                call),
                    kCaptureUnsupported);
}
void refuse_while_capturing(const char* call) {
  if (t_captures > 0) refuse_in_capture(call);
}
// An event recorded on a stream being captured: a GPU refuses to wait on it or time it, even after the capture.
constexpr std::int64_t kRecordedInCapture = INT64_MIN;

// A stream: launches run as they are enqueued, unless the stream is being captured.
struct Stream {
  Recording* capture = nullptr;
};
Stream* stream_of(StreamHandle h) { return reinterpret_cast<Stream*>(h); }
// Where `stream`'s work goes while it is captured, else null (run it now).
Recording* capture_of(StreamHandle stream) { return stream != nullptr ? stream_of(stream)->capture : nullptr; }
// Runs `work` now, or records it where `stream` is being captured.
void in_stream_order(StreamHandle stream, std::function<void()> work) {
  if (Recording* r = capture_of(stream))
    r->work.push_back(std::move(work));
  else
    work();
}

// One launch, its arguments copied (as a CUDA graph captures them by value).
std::function<void()> recorded_launch(const Kernel& k, Dim3 grid, Dim3 block, unsigned smem, void** args,
                                      bool cooperative, const Limits& limits, const Schedule& schedule) {
  struct Copy {
    std::vector<std::unique_ptr<unsigned char[], void (*)(void*)>> values;
    std::vector<void*> pointers;
  };
  auto copy = std::make_shared<Copy>();
  for (unsigned i = 0; i < k.params[0]; ++i) {
    const unsigned bytes = k.params[1 + i];
    auto* p = static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    std::memcpy(p, args[i], bytes);
    copy->values.emplace_back(p, &std::free);
    copy->pointers.push_back(p);
  }
  const Kernel* kernel = &k;
  return [=] {
    run(Launch{kernel, grid, block, smem, copy->pointers.data(), cooperative}, limits, schedule);
    check_guards(kernel->name);
  };
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class CpuBackend final : public Backend {
 public:
  bool is_cpu() const noexcept override { return true; }

  void make_current(void*, const Target& target) const override {
    device_hooks::count_driver_call();  // cuCtxSetCurrent on a GPU
    t_limits = Limits::of(target);
    current_device() = CurrentDevice{this, nullptr, target};
  }
  void synchronize() const override { refuse_while_capturing("cuCtxSynchronize"); }  // every launch has completed

  StreamHandle create_stream() const override { return reinterpret_cast<StreamHandle>(new Stream()); }
  void destroy_stream(void*, StreamHandle stream) const noexcept override { delete stream_of(stream); }
  void synchronize_stream(void*, StreamHandle stream) const override {
    if (capture_of(stream) != nullptr) refuse_in_capture("cuStreamSynchronize");
  }

  // An event is the time it was recorded: work before the record has completed when it is recorded.
  void* create_event() const override { return new std::int64_t(0); }
  void destroy_event(void*, void* event) const noexcept override { delete static_cast<std::int64_t*>(event); }
  void record_event(void*, void* event, StreamHandle stream) const override {
    *static_cast<std::int64_t*>(event) = capture_of(stream) != nullptr ? kRecordedInCapture : now_ns();
  }
  void synchronize_event(void*, void* event) const override {
    if (*static_cast<std::int64_t*>(event) == kRecordedInCapture) refuse_in_capture("cuEventSynchronize");
  }
  float elapsed_ms(void* start, void* end) const override {
    const std::int64_t from = *static_cast<std::int64_t*>(start), to = *static_cast<std::int64_t*>(end);
    if (from == kRecordedInCapture || to == kRecordedInCapture) refuse_in_capture("cuEventElapsedTime");
    return float(double(to - from) * 1e-6);
  }

  DevicePtr allocate(std::size_t bytes) const override {
    device_hooks::count_driver_call();  // cuMemAlloc on a GPU
    return reinterpret_cast<DevicePtr>(cpu::allocate(bytes));
  }
  void release(void*, DevicePtr p) const noexcept override { cpu::release(reinterpret_cast<void*>(p)); }
  void copy_from_host(void*, DevicePtr dst, const void* src, std::size_t bytes) const override {
    refuse_while_capturing("cuMemcpyHtoD");
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  }
  void copy_to_host(void*, void* dst, DevicePtr src, std::size_t bytes) const override {
    refuse_while_capturing("cuMemcpyDtoH");
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  }
  void fill_bytes(void*, DevicePtr dst, std::uint8_t value, std::size_t bytes) const override {
    refuse_while_capturing("cuMemsetD8");
    std::memset(reinterpret_cast<void*>(dst), value, bytes);
  }
  void fill_async(DevicePtr dst, std::uint8_t value, std::size_t bytes, StreamHandle stream) const override {
    in_stream_order(stream, [=] { std::memset(reinterpret_cast<void*>(dst), value, bytes); });
  }
  void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) const override {
    in_stream_order(stream,
                    [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes); });
  }
  void copy_to_host_after(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) const override {
    if (capture_of(stream) != nullptr) refuse_in_capture("cuStreamSynchronize");
    refuse_while_capturing("cuMemcpyDtoH");
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  }

  void* load_module(std::string_view image) const override {
    device_hooks::count_driver_call();  // cuModuleLoadData on a GPU
    return Library::load(image).release();
  }
  void unload_module(void*, void* module) const noexcept override { delete static_cast<Library*>(module); }
  void* function(void* module, const std::string& name) const override {
    return static_cast<Library*>(module)->kernel(name);
  }
  // A cpu kernel has no registers, no static shared memory the driver knows of and no stack limit.
  int attribute(void*, FunctionAttribute a) const override {
    return a == FunctionAttribute::max_threads_per_block ? 1024 : 0;
  }
  void set_max_dynamic_shared(void* function, int bytes) const override {
    device_hooks::count_driver_call();  // cuFuncSetAttribute on a GPU
    if (bytes < 0 || bytes > int(t_limits.max_smem_optin))
      throw DeviceError(fmt::format("cpu device: {} bytes of dynamic shared memory; {} allows at most {}", bytes,
                                    t_limits.target.sm_name(), t_limits.max_smem_optin));
    static_cast<Kernel*>(function)->max_dynamic_smem = unsigned(bytes);
  }
  // overlap_previous changes nothing here: the launches of a stream run one after another.
  void launch(void* function, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream, void** args,
              LaunchOptions options) const override {
    const Kernel& k = *static_cast<const Kernel*>(function);
    const Schedule schedule = Schedule::from_env();
    if (Recording* r = capture_of(stream)) {
      r->work.push_back(recorded_launch(k, grid, block, dynamic_smem, args, options.cooperative, t_limits, schedule));
      return;
    }
    run(Launch{&k, grid, block, dynamic_smem, args, options.cooperative}, t_limits, schedule);
    check_guards(k.name);
  }

  TensorMap encode_tensor_map(DType, DevicePtr base, const std::uint64_t (&dims)[3], const std::uint64_t (&strides)[2],
                              const std::uint32_t (&box)[3]) const override {
    device_hooks::count_driver_call();  // cuTensorMapEncodeTiled on a GPU
    return cpu::encode_tensor_map(base, dims, strides, box, 2);
  }

  bool is_capturing(StreamHandle stream) const override { return capture_of(stream) != nullptr; }
  void begin_capture(StreamHandle stream) const override {
    if (capture_of(stream) != nullptr)
      throw InvalidArgumentError("Graph::capture: the stream is already being captured");
    stream_of(stream)->capture = new Recording();
    ++t_captures;
  }
  void abandon_capture(StreamHandle stream) const noexcept override {
    --t_captures;
    delete std::exchange(stream_of(stream)->capture, nullptr);
  }
  void* end_capture(StreamHandle stream) const override {
    --t_captures;
    return std::exchange(stream_of(stream)->capture, nullptr);
  }
  void destroy_graph(void* graph) const noexcept override { delete static_cast<Recording*>(graph); }
  void launch_graph(void* graph, StreamHandle) const override {
    for (const auto& work : static_cast<Recording*>(graph)->work) work();
  }
};

}  // namespace
}  // namespace cpu

namespace {
constinit const cpu::CpuBackend g_cpu_backend;  // no state: constant-initialised, no guard on each use
}  // namespace
const Backend& cpu_backend() { return g_cpu_backend; }

Device Device::cpu(const Target& target, int sms) {
  Device d;
  d.backend_ = &cpu_backend();
  d.target_ = target;
  const cpu::Limits limits = cpu::Limits::of(target);
  d.sm_count_ = sms > 0 ? sms : limits.sm_count;
  d.name_ = "cpu (emulating " + target.sm_name() + (sms > 0 ? fmt::format(" with {} SMs", sms) : "") + ")";
  d.max_smem_block_ = 48 * 1024;
  d.max_smem_optin_ = int(limits.max_smem_optin);
  d.max_smem_sm_ = int(limits.max_smem_optin) + 1024;
  d.total_memory_ = 0;
  d.make_current();
  return d;
}

}  // namespace mojo
