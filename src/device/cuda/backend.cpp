// The GPU: the CUDA Driver API (libcuda.so.1, opened on first use by
// driver.cpp). Each call on an object first makes the object's context
// current; what this thread made current is remembered (current_device()),
// so that a launch asks the driver nothing more.
#include "device/backend.hpp"

#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "device/cuda/driver.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace {

CUcontext as_context(void* c) noexcept { return static_cast<CUcontext>(c); }

// Makes `context` current on this thread for an object that lives in it
// (the thread's own choice of device for new objects stays as it was).
void use_context(void* context) {
  CurrentDevice& current = current_device();
  if (current.context == context) return;
  MOJO_CU(cuCtxSetCurrent(as_context(context)));
  current.context = context;
}
// The same for a destructor: never throws.
void use_context_noexcept(void* context) noexcept {
  CurrentDevice& current = current_device();
  if (current.context == context) return;
  if (driver::api().cuCtxSetCurrent(as_context(context)) == CUDA_SUCCESS) current.context = context;
}

// This thread in the relaxed stream-capture mode for the guard's scope, then back in the caller's mode.
class RelaxedCaptureMode {
 public:
  // Not counted as a driver call: the CPU device's allocation counts one, as the cuMemAlloc alone.
  RelaxedCaptureMode() {
    driver::check(driver::api().cuThreadExchangeStreamCaptureMode(&mode_), "cuThreadExchangeStreamCaptureMode");
  }
  ~RelaxedCaptureMode() { driver::api().cuThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

CUfunction_attribute driver_attribute(FunctionAttribute a) {
  switch (a) {
    case FunctionAttribute::registers:
      return CU_FUNC_ATTRIBUTE_NUM_REGS;
    case FunctionAttribute::static_shared_bytes:
      return CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES;
    case FunctionAttribute::local_bytes:
      return CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES;
    case FunctionAttribute::max_threads_per_block:
      break;
  }
  return CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
}

class CudaBackend final : public Backend {
 public:
  bool is_cpu() const noexcept override { return false; }

  void make_current(void* context, const Target& target) const override {
    MOJO_CU(cuCtxSetCurrent(as_context(context)));
    current_device() = CurrentDevice{this, context, target};
  }
  void synchronize() const override { MOJO_CU(cuCtxSynchronize()); }

  StreamHandle create_stream() const override {
    StreamHandle stream = nullptr;
    MOJO_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    return stream;
  }
  void destroy_stream(void* context, StreamHandle stream) const noexcept override {
    use_context_noexcept(context);
    driver::api().cuStreamDestroy(stream);
  }
  void synchronize_stream(void* context, StreamHandle stream) const override {
    use_context(context);
    MOJO_CU(cuStreamSynchronize(stream));
  }

  void* create_event() const override {
    CUevent event = nullptr;
    MOJO_CU(cuEventCreate(&event, CU_EVENT_DEFAULT));
    return event;
  }
  void destroy_event(void* context, void* event) const noexcept override {
    use_context_noexcept(context);
    driver::api().cuEventDestroy(static_cast<CUevent>(event));
  }
  void record_event(void* context, void* event, StreamHandle stream) const override {
    use_context(context);
    MOJO_CU(cuEventRecord(static_cast<CUevent>(event), stream));
  }
  void synchronize_event(void* context, void* event) const override {
    use_context(context);
    MOJO_CU(cuEventSynchronize(static_cast<CUevent>(event)));
  }
  float elapsed_ms(void* start, void* end) const override {
    float ms = 0;
    MOJO_CU(cuEventElapsedTime(&ms, static_cast<CUevent>(start), static_cast<CUevent>(end)));
    return ms;
  }

  DevicePtr allocate(std::size_t bytes) const override {
    // In this thread's relaxed capture mode for the call: an op's workspace is first needed by the launch a
    // CUDA graph captures when the graph is the shape's first launch, and the global and thread-local modes
    // refuse cuMemAlloc then (the H200 run of 2026-11-27: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). The memory
    // is no stream's and outlives the graph (WorkspaceArena keeps it), as PyTorch's allocator does it.
    const RelaxedCaptureMode relaxed;
    DevicePtr p = 0;
    MOJO_CU(cuMemAlloc(&p, bytes));
    return p;
  }
  void release(void* context, DevicePtr p) const noexcept override {
    use_context_noexcept(context);
    driver::api().cuMemFree(p);
  }
  void copy_from_host(void* context, DevicePtr dst, const void* src, std::size_t bytes) const override {
    use_context(context);
    MOJO_CU(cuMemcpyHtoD(dst, src, bytes));
    // From pageable memory the call returns once the bytes are staged, not landed, and our streams do not
    // wait for the legacy stream the copy went to (they are non-blocking): without this wait a launch right
    // after a "synchronous" copy could read the old bytes (the H100 run of 2026-11-26 saw it under load).
    MOJO_CU(cuStreamSynchronize(CU_STREAM_LEGACY));
  }
  void copy_to_host(void* context, void* dst, DevicePtr src, std::size_t bytes) const override {
    use_context(context);
    MOJO_CU(cuMemcpyDtoH(dst, src, bytes));
  }
  void fill_bytes(void* context, DevicePtr dst, std::uint8_t value, std::size_t bytes) const override {
    use_context(context);
    MOJO_CU(cuMemsetD8(dst, value, bytes));
    MOJO_CU(cuStreamSynchronize(CU_STREAM_LEGACY));  // a memset of device memory is asynchronous to the host
  }
  void fill_async(DevicePtr dst, std::uint8_t value, std::size_t bytes, StreamHandle stream) const override {
    MOJO_CU(cuMemsetD8Async(dst, value, bytes, stream));
  }
  void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) const override {
    MOJO_CU(cuMemcpyDtoDAsync(dst, src, bytes, stream));
  }
  void copy_to_host_after(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) const override {
    MOJO_CU(cuStreamSynchronize(stream));
    MOJO_CU(cuMemcpyDtoH(dst, src, bytes));
  }

  void* load_module(std::string_view image) const override {
    CUmodule module = nullptr;
    MOJO_CU(cuModuleLoadData(&module, image.data()));
    return module;
  }
  void unload_module(void* context, void* module) const noexcept override {
    use_context_noexcept(context);
    driver::api().cuModuleUnload(static_cast<CUmodule>(module));
  }
  void* function(void* module, const std::string& name) const override {
    CUfunction f = nullptr;
    const CUresult r = driver::api().cuModuleGetFunction(&f, static_cast<CUmodule>(module), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND)
      throw DeviceError(fmt::format("the loaded module has no kernel named '{}'", name), int(r));
    driver::check(r, "cuModuleGetFunction");
    return f;
  }
  int attribute(void* function, FunctionAttribute a) const override {
    int v = 0;
    MOJO_CU(cuFuncGetAttribute(&v, driver_attribute(a), static_cast<CUfunction>(function)));
    return v;
  }
  void set_max_dynamic_shared(void* function, int bytes) const override {
    MOJO_CU(
        cuFuncSetAttribute(static_cast<CUfunction>(function), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
  }
  void launch(void* function, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream, void** args,
              LaunchOptions options) const override {
    if (!options.overlap_previous && !options.cooperative) {
      MOJO_CU(cuLaunchKernel(static_cast<CUfunction>(function), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                             dynamic_smem, stream, args, nullptr));
      return;
    }
    CUlaunchAttribute attrs[2]{};
    unsigned n = 0;
    if (options.overlap_previous) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (options.cooperative) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n++].value.cooperative = 1;
    }
    CUlaunchConfig config{};
    config.gridDimX = grid.x, config.gridDimY = grid.y, config.gridDimZ = grid.z;
    config.blockDimX = block.x, config.blockDimY = block.y, config.blockDimZ = block.z;
    config.sharedMemBytes = dynamic_smem;
    config.hStream = stream;
    config.attrs = attrs;
    config.numAttrs = n;
    device_hooks::count_driver_call();
    const CUresult r = driver::api().cuLaunchKernelEx(&config, static_cast<CUfunction>(function), args, nullptr);
    if (r == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)  // said so that a user can act on it
      throw DeviceError(fmt::format("a cooperative launch of {} blocks of {} threads does not fit on this GPU at once "
                                    "(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: fewer SMs, or more registers, than "
                                    "its plan assumed)",
                                    std::uint64_t(grid.x) * grid.y * grid.z, block.x * block.y * block.z),
                        int(r));
    driver::check(r, "cuLaunchKernelEx");
  }

  TensorMap encode_tensor_map(DType dtype, DevicePtr base, const std::uint64_t (&dims)[3],
                              const std::uint64_t (&strides)[2], const std::uint32_t (&box)[3]) const override {
    static_assert(sizeof(TensorMap) == sizeof(CUtensorMap));
    const cuuint64_t driver_dims[3] = {dims[0], dims[1], dims[2]}, driver_strides[2] = {strides[0], strides[1]};
    const cuuint32_t driver_box[3] = {box[0], box[1], box[2]}, element_strides[3] = {1, 1, 1};
    CUtensorMap encoded{};
    MOJO_CU(cuTensorMapEncodeTiled(
        &encoded, dtype == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
        reinterpret_cast<void*>(base), driver_dims, driver_strides, driver_box, element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    TensorMap map;
    std::memcpy(&map, &encoded, sizeof map);
    return map;
  }

  bool is_capturing(StreamHandle stream) const override {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult r = driver::api().cuStreamIsCapturing(stream, &status);
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;  // the legacy stream while a blocking stream captures
    driver::check(r, "cuStreamIsCapturing");
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  void begin_capture(StreamHandle stream) const override {
    MOJO_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  }
  void abandon_capture(StreamHandle stream) const noexcept override {
    CUgraph graph = nullptr;
    if (driver::api().cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph) driver::api().cuGraphDestroy(graph);
  }
  void* end_capture(StreamHandle stream) const override {
    CUgraph graph = nullptr;
    MOJO_CU(cuStreamEndCapture(stream, &graph));
    CUgraphExec exec = nullptr;
    const CUresult r = driver::api().cuGraphInstantiateWithFlags(&exec, graph, 0);
    driver::api().cuGraphDestroy(graph);
    driver::check(r, "cuGraphInstantiateWithFlags");
    return exec;
  }
  void destroy_graph(void* graph) const noexcept override {
    driver::api().cuGraphExecDestroy(static_cast<CUgraphExec>(graph));
  }
  void launch_graph(void* graph, StreamHandle stream) const override {
    MOJO_CU(cuGraphLaunch(static_cast<CUgraphExec>(graph), stream));
  }
};

}  // namespace

namespace {
constinit const CudaBackend g_cuda_backend;  // no state: constant-initialised, no guard on each use
}  // namespace
const Backend& cuda_backend() { return g_cuda_backend; }

int Device::count() {
  int n = 0;
  MOJO_CU(cuDeviceGetCount(&n));
  return n;
}

Device Device::open(int ordinal) {
  const int n = count();
  if (n == 0) throw NoDeviceError("no GPU: the CUDA driver reports 0 devices");
  if (ordinal < 0 || ordinal >= n)
    throw NoDeviceError(fmt::format("no GPU {}: the driver reports {} device(s)", ordinal, n));

  CUdevice dev = 0;
  MOJO_CU(cuDeviceGet(&dev, ordinal));
  CUcontext context = nullptr;
  MOJO_CU(cuDevicePrimaryCtxRetain(&context, dev));
  Device d;
  d.backend_ = &cuda_backend();
  d.primary_context_ = std::shared_ptr<void>(context, [dev](void*) { driver::api().cuDevicePrimaryCtxRelease(dev); });
  d.context_ = context;
  d.ordinal_ = ordinal;

  char name[256] = {};
  MOJO_CU(cuDeviceGetName(name, sizeof name, dev));
  d.name_ = name;
  auto attribute = [dev](CUdevice_attribute a) {
    int v = 0;
    MOJO_CU(cuDeviceGetAttribute(&v, a, dev));
    return v;
  };
  const int major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  const int minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  // Kernels are built for this exact GPU, so a Hopper gets its arch-specific
  // features (sm_90a: wgmma, setmaxnreg); other GPUs their portable target.
  d.target_ = Target{major * 10 + minor, major * 10 + minor == 90};
  d.sm_count_ = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  d.max_smem_block_ = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  d.max_smem_optin_ = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  d.max_smem_sm_ = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  MOJO_CU(cuDeviceTotalMem(&d.total_memory_, dev));
  d.make_current();
  return d;
}

// A context the application made current through the driver, or null.
void* driver_current_context() {
  CUcontext current = nullptr;
  MOJO_CU(cuCtxGetCurrent(&current));
  return current;
}

}  // namespace mojo
