#include "mojo/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "device/driver.hpp"
#include "mojo/error.hpp"

namespace mojo {

bool device_available() noexcept {
  try {
    return Device::count() > 0;
  } catch (...) {
    return false;
  }
}

// ---- Device ---------------------------------------------------------------

struct Device::PrimaryContext {
  CUdevice device = 0;
  CUcontext context = nullptr;
  ~PrimaryContext() {
    if (context != nullptr) driver::api().cuDevicePrimaryCtxRelease(device);
  }
};

int Device::count() {
  int n = 0;
  MOJO_CU(cuDeviceGetCount(&n));
  return n;
}

Device Device::open(int ordinal) {
  int n = count();
  if (n == 0) throw NoDeviceError("no GPU: the CUDA driver reports 0 devices");
  if (ordinal < 0 || ordinal >= n)
    throw NoDeviceError(fmt::format("no GPU {}: the driver reports {} device(s)", ordinal, n));

  Device d;
  d.ordinal_ = ordinal;
  d.context_ = std::make_shared<PrimaryContext>();
  MOJO_CU(cuDeviceGet(&d.context_->device, ordinal));
  CUdevice dev = d.context_->device;
  MOJO_CU(cuDevicePrimaryCtxRetain(&d.context_->context, dev));

  char name[256] = {};
  MOJO_CU(cuDeviceGetName(name, sizeof name, dev));
  d.name_ = name;
  auto attribute = [dev](CUdevice_attribute a) {
    int v = 0;
    MOJO_CU(cuDeviceGetAttribute(&v, a, dev));
    return v;
  };
  int major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  int minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
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

void Device::make_current() const { MOJO_CU(cuCtxSetCurrent(context_->context)); }

void Device::ensure_current() const {
  CUcontext current = nullptr;
  MOJO_CU(cuCtxGetCurrent(&current));
  if (current != context_->context) make_current();
}

void Device::synchronize() const {
  make_current();
  MOJO_CU(cuCtxSynchronize());
}

// ---- Stream / Event -------------------------------------------------------

Stream::Stream() { MOJO_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }
Stream::~Stream() {
  if (stream_ != nullptr) driver::api().cuStreamDestroy(stream_);
}
Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  std::swap(stream_, other.stream_);
  return *this;
}
void Stream::synchronize() const { MOJO_CU(cuStreamSynchronize(stream_)); }

Event::Event() { MOJO_CU(cuEventCreate(&event_, CU_EVENT_DEFAULT)); }
Event::~Event() {
  if (event_ != nullptr) driver::api().cuEventDestroy(event_);
}
Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
Event& Event::operator=(Event&& other) noexcept {
  std::swap(event_, other.event_);
  return *this;
}
void Event::record(StreamHandle stream) { MOJO_CU(cuEventRecord(event_, stream)); }
void Event::synchronize() const { MOJO_CU(cuEventSynchronize(event_)); }
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  MOJO_CU(cuEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

// ---- DeviceBuffer ---------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes > 0) MOJO_CU(cuMemAlloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) driver::api().cuMemFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), size_(std::exchange(other.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(size_, other.size_);
  return *this;
}

static void check_range(std::size_t offset, std::size_t bytes, std::size_t size, const char* what) {
  if (offset > size || bytes > size - offset)
    throw InvalidArgumentError(fmt::format("{}: {} bytes at offset {} do not fit a {}-byte buffer",
                                           what, bytes, offset, size));
}

Tensor DeviceBuffer::as(const TensorSpec& spec, std::size_t byte_offset) const {
  std::int64_t extent = 0;  // last element reachable through the strides, plus one
  for (int i = 0; i < spec.rank(); ++i) extent += (spec.dim(i) - 1) * spec.stride(i);
  std::size_t bytes = spec.numel() == 0 ? 0 : std::size_t(extent + 1) * dtype_size(spec.dtype());
  if (byte_offset > size_ || bytes > size_ - byte_offset)
    throw ShapeError(fmt::format("tensor {} at offset {} needs {} bytes; the buffer has {}",
                                 spec.str(), byte_offset, bytes, size_));
  return Tensor{spec, ptr_ + byte_offset};
}

void DeviceBuffer::copy_from_host(const void* src, std::size_t bytes, std::size_t offset) {
  check_range(offset, bytes, size_, "DeviceBuffer::copy_from_host");
  if (bytes > 0) MOJO_CU(cuMemcpyHtoD(ptr_ + offset, src, bytes));
}
void DeviceBuffer::copy_to_host(void* dst, std::size_t bytes, std::size_t offset) const {
  check_range(offset, bytes, size_, "DeviceBuffer::copy_to_host");
  if (bytes > 0) MOJO_CU(cuMemcpyDtoH(dst, ptr_ + offset, bytes));
}
void DeviceBuffer::fill_bytes(std::uint8_t value) {
  if (size_ > 0) MOJO_CU(cuMemsetD8(ptr_, value, size_));
}

// ---- Module / Function / launch -------------------------------------------

Module Module::load(std::string_view image) {
  Module m;
  MOJO_CU(cuModuleLoadData(&m.module_, image.data()));
  return m;
}
Module::~Module() {
  if (module_ != nullptr) driver::api().cuModuleUnload(module_);
}
Module::Module(Module&& other) noexcept : module_(std::exchange(other.module_, nullptr)) {}
Module& Module::operator=(Module&& other) noexcept {
  std::swap(module_, other.module_);
  return *this;
}

Function Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  CUresult r = driver::api().cuModuleGetFunction(&f, module_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    throw DeviceError(fmt::format("the loaded module has no kernel named '{}'", name), int(r));
  driver::check(r, "cuModuleGetFunction");
  return Function(f);
}

static int function_attribute(CUfunction f, CUfunction_attribute a) {
  int v = 0;
  MOJO_CU(cuFuncGetAttribute(&v, a, f));
  return v;
}
int Function::num_registers() const { return function_attribute(function_, CU_FUNC_ATTRIBUTE_NUM_REGS); }
int Function::static_shared_bytes() const {
  return function_attribute(function_, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
}
int Function::local_bytes() const { return function_attribute(function_, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES); }
int Function::max_threads_per_block() const {
  return function_attribute(function_, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
}
void Function::set_max_dynamic_shared(int bytes) const {
  MOJO_CU(cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
}

void launch(const Function& f, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream,
            void** args) {
  MOJO_CU(cuLaunchKernel(f.handle(), grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_smem,
                         stream, args, nullptr));
}

}  // namespace mojo

namespace mojo {

void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes > 0) MOJO_CU(cuMemcpyDtoDAsync(dst, src, bytes, stream));
}

TensorMap tile_tensor_map(DevicePtr base, DType dtype, std::int64_t cols, std::int64_t rows, std::int64_t batches,
                          std::int64_t row_stride, std::int64_t batch_stride, unsigned box_cols, unsigned box_rows) {
  static_assert(sizeof(TensorMap) == sizeof(CUtensorMap));
  if (dtype != DType::f16 && dtype != DType::bf16)
    throw InvalidArgumentError(fmt::format("tile_tensor_map: {} is not a 16-bit float", dtype_name(dtype)));
  const cuuint64_t element = 2;
  // A single batch still needs a stride: the tensor's own extent.
  if (batches <= 1) batch_stride = row_stride * std::max<std::int64_t>(rows, 1);
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(std::max<std::int64_t>(batches, 1))};
  const cuuint64_t strides[2] = {cuuint64_t(row_stride) * element, cuuint64_t(batch_stride) * element};
  const cuuint32_t box[3] = {box_cols, box_rows, 1}, element_strides[3] = {1, 1, 1};
  CUtensorMap encoded{};
  MOJO_CU(cuTensorMapEncodeTiled(&encoded,
                                 dtype == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                 3, reinterpret_cast<void*>(base), dims, strides, box, element_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  TensorMap map;
  std::memcpy(&map, &encoded, sizeof map);
  return map;
}

void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  MOJO_CU(cuStreamSynchronize(stream));
  MOJO_CU(cuMemcpyDtoH(dst, src, bytes));
}

// ---- Graph --------------------------------------------------------------------

void Graph::begin_capture(StreamHandle stream) {
  if (stream == nullptr) throw InvalidArgumentError("Graph::capture needs a stream; the legacy default stream cannot be captured");
  MOJO_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
}

void Graph::abandon_capture(StreamHandle stream) noexcept {
  CUgraph graph = nullptr;
  if (driver::api().cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph) driver::api().cuGraphDestroy(graph);
}

Graph Graph::end_capture(StreamHandle stream) {
  CUgraph graph = nullptr;
  MOJO_CU(cuStreamEndCapture(stream, &graph));
  Graph g;
  CUresult r = driver::api().cuGraphInstantiateWithFlags(&g.exec_, graph, 0);
  driver::api().cuGraphDestroy(graph);
  driver::check(r, "cuGraphInstantiateWithFlags");
  return g;
}

Graph::~Graph() {
  if (exec_ != nullptr) driver::api().cuGraphExecDestroy(exec_);
}
Graph::Graph(Graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
Graph& Graph::operator=(Graph&& other) noexcept {
  std::swap(exec_, other.exec_);
  return *this;
}
void Graph::launch(StreamHandle stream) const { MOJO_CU(cuGraphLaunch(exec_, stream)); }

}  // namespace mojo
