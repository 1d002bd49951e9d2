#include "mojo/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "device/cpu/executor.hpp"
#include "device/cpu/library.hpp"
#include "device/cpu/memory.hpp"
#include "device/driver.hpp"
#include "device/hooks.hpp"
#include "mojo/error.hpp"

namespace mojo {

// ---- the cpu device's share --------------------------------------------------
namespace cpu {

// The device current on this thread, as a CUDA context is: where new
// streams, events and buffers go, and what a launch on the default stream runs on.
struct Current {
  bool cpu = false;
  Limits limits;
  CUcontext context = nullptr;  // the CUDA context this thread made current through a Device
};
thread_local Current t_current;

// A stream of the cpu device: launches run as they are enqueued, unless the
// stream is being captured into a graph.
struct Stream {
  Recording* capture = nullptr;
};
struct Recording {
  std::vector<std::function<void()>> work;
};

Stream* stream_of(StreamHandle h) { return reinterpret_cast<Stream*>(h); }

// One launch, its arguments copied (as a CUDA graph captures them by value).
std::function<void()> recorded_launch(const Kernel& k, Dim3 grid, Dim3 block, unsigned smem, void** args,
                                      const Limits& limits, const Schedule& schedule) {
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
    run(Launch{kernel, grid, block, smem, copy->pointers.data()}, limits, schedule);
    check_guards(kernel->name);
  };
}

}  // namespace cpu

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

Device Device::cpu(const Target& target) {
  Device d;
  d.cpu_ = true;
  d.target_ = target;
  const cpu::Limits limits = cpu::Limits::of(target);
  d.name_ = "cpu (emulating " + target.sm_name() + ")";
  d.sm_count_ = limits.sm_count;
  d.max_smem_block_ = 48 * 1024;
  d.max_smem_optin_ = int(limits.max_smem_optin);
  d.max_smem_sm_ = int(limits.max_smem_optin) + 1024;
  d.total_memory_ = 0;
  d.make_current();
  return d;
}

Device Device::open(std::string_view spec) {
  if (spec == "cuda") return open(0);
  if (spec.substr(0, 5) == "cuda:") {
    const std::string n(spec.substr(5));
    char* end = nullptr;
    const long ordinal = std::strtol(n.c_str(), &end, 10);
    if (!n.empty() && *end == '\0' && ordinal >= 0) return open(int(ordinal));
  }
  if (spec == "cpu") return cpu(Target{80, false});
  if (spec.substr(0, 4) == "cpu:") return cpu(Target::parse(spec.substr(4)));
  throw InvalidArgumentError(fmt::format("device '{}': expected cuda, cuda:N, cpu or cpu:ARCH (e.g. cpu:sm_90a)", spec));
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

namespace {
std::mutex g_default_mutex;
std::string g_default_spec = "cuda";

// Makes a device current on a thread where none is, as the CUDA runtime makes
// a primary context current on first use: the context the application made
// current through the driver, else the default device.
void ensure_a_device() {
  cpu::Current& c = cpu::t_current;
  if (c.cpu || c.context != nullptr) return;
  std::string spec;
  {
    std::lock_guard lock(g_default_mutex);
    spec = g_default_spec;
  }
  if (!spec.starts_with("cpu")) {
    CUcontext current = nullptr;
    MOJO_CU(cuCtxGetCurrent(&current));
    if (current != nullptr) {
      c.context = current;
      return;
    }
  }
  // Opened once per spec and kept for the process, like the runtime's primary context.
  static std::mutex opened_mutex;
  static std::map<std::string, Device*, std::less<>> opened;
  std::lock_guard lock(opened_mutex);
  Device*& d = opened[spec];
  if (d == nullptr) d = new Device(Device::open(spec));
  else d->make_current();
}

// Makes `context` current on this thread for an object that lives in it
// (the thread's own choice of device for new objects stays as it was).
void use_context(CUcontext context) {
  if (cpu::t_current.context == context) return;
  MOJO_CU(cuCtxSetCurrent(context));
  cpu::t_current.context = context;
}
// The same for a destructor: never throws.
void use_context_noexcept(CUcontext context) noexcept {
  if (cpu::t_current.context == context) return;
  if (driver::api().cuCtxSetCurrent(context) == CUDA_SUCCESS) cpu::t_current.context = context;
}
}  // namespace

void Device::set_default(std::string_view spec) {
  std::lock_guard lock(g_default_mutex);
  g_default_spec = spec;
}

void Device::make_current() const {
  cpu::t_current.cpu = cpu_;
  if (cpu_) {
    device_hooks::count_driver_call();  // cuCtxSetCurrent on a GPU
    cpu::t_current.limits = cpu::Limits::of(target_);
    cpu::t_current.context = nullptr;
    return;
  }
  MOJO_CU(cuCtxSetCurrent(context_->context));
  cpu::t_current.context = context_->context;
}

// What this thread made current is remembered, so that a launch asks the
// driver nothing (a context made current behind the Runtime's back, through
// the driver itself, needs Device::make_current again).
void Device::ensure_current() const {
  if (cpu_) {
    if (!cpu::t_current.cpu || !(cpu::t_current.limits.target == target_)) make_current();
    return;
  }
  if (cpu::t_current.cpu || cpu::t_current.context != context_->context) make_current();
}

void Device::synchronize() const {
  make_current();
  if (cpu_) return;  // every launch has completed
  MOJO_CU(cuCtxSynchronize());
}

// ---- Stream / Event -------------------------------------------------------

Stream::Stream() {
  ensure_a_device();
  cpu_ = cpu::t_current.cpu;
  context_ = cpu::t_current.context;
  if (cpu_) stream_ = reinterpret_cast<StreamHandle>(new cpu::Stream());
  else MOJO_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
}
Stream::~Stream() {
  if (stream_ == nullptr) return;
  if (cpu_) {
    delete cpu::stream_of(stream_);
    return;
  }
  use_context_noexcept(context_);
  driver::api().cuStreamDestroy(stream_);
}
Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), cpu_(other.cpu_), context_(other.context_) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  std::swap(stream_, other.stream_);
  std::swap(cpu_, other.cpu_);
  std::swap(context_, other.context_);
  return *this;
}
void Stream::synchronize() const {
  if (cpu_) return;
  use_context(context_);
  MOJO_CU(cuStreamSynchronize(stream_));
}

namespace {
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Event::Event() {
  ensure_a_device();
  cpu_ = cpu::t_current.cpu;
  context_ = cpu::t_current.context;
  if (!cpu_) MOJO_CU(cuEventCreate(&event_, CU_EVENT_DEFAULT));
}
Event::~Event() {
  if (event_ == nullptr) return;
  use_context_noexcept(context_);
  driver::api().cuEventDestroy(event_);
}
Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), cpu_(other.cpu_), context_(other.context_), cpu_ns_(other.cpu_ns_) {}
Event& Event::operator=(Event&& other) noexcept {
  std::swap(event_, other.event_);
  std::swap(cpu_, other.cpu_);
  std::swap(context_, other.context_);
  std::swap(cpu_ns_, other.cpu_ns_);
  return *this;
}
// On the cpu device, work before the record has completed when it is recorded.
void Event::record(StreamHandle stream) {
  if (cpu_) {
    cpu_ns_ = now_ns();
    return;
  }
  use_context(context_);
  MOJO_CU(cuEventRecord(event_, stream));
}
void Event::synchronize() const {
  if (cpu_) return;
  use_context(context_);
  MOJO_CU(cuEventSynchronize(event_));
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  if (start.cpu_ || end.cpu_) {
    if (!start.cpu_ || !end.cpu_) throw InvalidArgumentError("Event::elapsed_ms of events on different devices");
    return float(double(end.cpu_ns_ - start.cpu_ns_) * 1e-6);
  }
  float ms = 0;
  MOJO_CU(cuEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

// ---- DeviceBuffer ---------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  ensure_a_device();
  cpu_ = cpu::t_current.cpu;
  context_ = cpu::t_current.context;
  if (!cpu_) {
    MOJO_CU(cuMemAlloc(&ptr_, bytes));
    return;
  }
  device_hooks::count_driver_call();  // cuMemAlloc on a GPU
  ptr_ = reinterpret_cast<DevicePtr>(cpu::allocate(bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == 0) return;
  if (cpu_) {
    cpu::release(reinterpret_cast<void*>(ptr_));
    return;
  }
  use_context_noexcept(context_);
  driver::api().cuMemFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), size_(std::exchange(other.size_, 0)), cpu_(other.cpu_),
      context_(other.context_) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(size_, other.size_);
  std::swap(cpu_, other.cpu_);
  std::swap(context_, other.context_);
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
  if (bytes == 0) return;
  if (cpu_) {
    std::memcpy(reinterpret_cast<void*>(ptr_ + offset), src, bytes);
    return;
  }
  use_context(context_);
  MOJO_CU(cuMemcpyHtoD(ptr_ + offset, src, bytes));
}
void DeviceBuffer::copy_to_host(void* dst, std::size_t bytes, std::size_t offset) const {
  check_range(offset, bytes, size_, "DeviceBuffer::copy_to_host");
  if (bytes == 0) return;
  if (cpu_) {
    std::memcpy(dst, reinterpret_cast<const void*>(ptr_ + offset), bytes);
    return;
  }
  use_context(context_);
  MOJO_CU(cuMemcpyDtoH(dst, ptr_ + offset, bytes));
}
void DeviceBuffer::fill_bytes(std::uint8_t value) {
  if (size_ == 0) return;
  if (cpu_) {
    std::memset(reinterpret_cast<void*>(ptr_), value, size_);
    return;
  }
  use_context(context_);
  MOJO_CU(cuMemsetD8(ptr_, value, size_));
}

// ---- Module / Function / launch -------------------------------------------

Module Module::load(std::string_view image) {
  ensure_a_device();
  Module m;
  m.context_ = cpu::t_current.context;
  if (cpu::t_current.cpu) {
    device_hooks::count_driver_call();  // cuModuleLoadData on a GPU
    m.cpu_ = cpu::Library::load(image);
  }
  else MOJO_CU(cuModuleLoadData(&m.module_, image.data()));
  return m;
}
Module::~Module() {
  if (module_ == nullptr) return;
  use_context_noexcept(context_);
  driver::api().cuModuleUnload(module_);
}
Module::Module(Module&& other) noexcept
    : module_(std::exchange(other.module_, nullptr)), context_(other.context_), cpu_(std::move(other.cpu_)) {}
Module& Module::operator=(Module&& other) noexcept {
  std::swap(module_, other.module_);
  std::swap(context_, other.context_);
  std::swap(cpu_, other.cpu_);
  return *this;
}

Function Module::function(const std::string& name) const {
  if (cpu_) return Function(cpu_->kernel(name));
  CUfunction f = nullptr;
  CUresult r = driver::api().cuModuleGetFunction(&f, module_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    throw DeviceError(fmt::format("the loaded module has no kernel named '{}'", name), int(r));
  driver::check(r, "cuModuleGetFunction");
  return Function(f);
}

// A cpu kernel has no registers, no static shared memory the driver knows of and no stack limit.
static int function_attribute(CUfunction f, CUfunction_attribute a) {
  if (f == nullptr) return a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
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
  if (cpu_ != nullptr) {
    device_hooks::count_driver_call();  // cuFuncSetAttribute on a GPU
    if (bytes < 0 || bytes > int(cpu::t_current.limits.max_smem_optin))
      throw DeviceError(fmt::format("cpu device: {} bytes of dynamic shared memory; {} allows at most {}", bytes,
                                    cpu::t_current.limits.target.sm_name(), cpu::t_current.limits.max_smem_optin));
    cpu_->max_dynamic_smem = unsigned(bytes);
    return;
  }
  MOJO_CU(cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
}

namespace {
std::atomic<std::uint64_t> g_driver_calls{0};
std::atomic<device_hooks::LaunchSink> g_launch_sink{nullptr};
}  // namespace

std::uint64_t device_hooks::driver_calls() noexcept { return g_driver_calls.load(std::memory_order_relaxed); }
void device_hooks::count_driver_call() noexcept { g_driver_calls.fetch_add(1, std::memory_order_relaxed); }
void device_hooks::set_launch_sink(LaunchSink sink) noexcept { g_launch_sink.store(sink, std::memory_order_relaxed); }

void launch(const Function& f, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream,
            void** args) {
  if (const device_hooks::LaunchSink sink = g_launch_sink.load(std::memory_order_relaxed)) {
    sink(f, grid, block, dynamic_smem, stream, args);
    return;
  }
  if (const cpu::Kernel* k = f.cpu_kernel()) {
    const cpu::Schedule schedule = cpu::Schedule::from_env();
    if (stream != nullptr && cpu::stream_of(stream)->capture != nullptr) {
      cpu::stream_of(stream)->capture->work.push_back(
          cpu::recorded_launch(*k, grid, block, dynamic_smem, args, cpu::t_current.limits, schedule));
      return;
    }
    cpu::run(cpu::Launch{k, grid, block, dynamic_smem, args}, cpu::t_current.limits, schedule);
    cpu::check_guards(k->name);
    return;
  }
  MOJO_CU(cuLaunchKernel(f.handle(), grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_smem,
                         stream, args, nullptr));
}

}  // namespace mojo

namespace mojo {

void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  if (!cpu::t_current.cpu) {
    MOJO_CU(cuMemcpyDtoDAsync(dst, src, bytes, stream));
    return;
  }
  auto copy = [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes); };
  if (stream != nullptr && cpu::stream_of(stream)->capture != nullptr) cpu::stream_of(stream)->capture->work.push_back(copy);
  else copy();
}

namespace {

// What a TMA descriptor is encoded from, on which device.
struct TensorMapKey {
  DevicePtr base;
  std::int64_t dtype, cols, rows, batches, row_stride, batch_stride, box_cols, box_rows;
  const void* device;  // the CUDA context, or null for the cpu device
  bool operator==(const TensorMapKey&) const = default;
};

// The descriptors this thread encoded last, so that launching on the same
// tensors again encodes nothing: a small direct-mapped table, no lock, no allocation.
// 4-way set associative: the few maps a hot loop alternates between (two
// operands, a couple of tensor sets) never evict each other, whatever their
// addresses hash to (direct-mapped, two of four collided about one time in five).
struct TensorMapMemo {
  static constexpr std::size_t kSets = 8, kWays = 4;
  std::array<TensorMapKey, kSets * kWays> keys{};
  std::array<TensorMap, kSets * kWays> maps{};
  std::array<bool, kSets * kWays> used{};
  std::array<std::uint8_t, kSets> next{};  // the way a miss replaces, round robin
  static std::size_t set(const TensorMapKey& k) noexcept {
    std::uint64_t h = k.base ^ std::uint64_t(k.rows) * 0x9E3779B97F4A7C15ull ^ std::uint64_t(k.cols) << 17 ^
                      std::uint64_t(k.box_rows) << 40 ^ std::uint64_t(k.batches) << 7;
    h ^= h >> 29;
    return std::size_t(h * 0xBF58476D1CE4E5B9ull >> 59) % kSets;
  }
};
thread_local TensorMapMemo t_tensor_maps;

TensorMap encode_tile_tensor_map(DevicePtr base, DType dtype, std::int64_t cols, std::int64_t rows,
                                 std::int64_t batches, std::int64_t row_stride, std::int64_t batch_stride,
                                 unsigned box_cols, unsigned box_rows);

}  // namespace

TensorMap tile_tensor_map(DevicePtr base, DType dtype, std::int64_t cols, std::int64_t rows, std::int64_t batches,
                          std::int64_t row_stride, std::int64_t batch_stride, unsigned box_cols, unsigned box_rows) {
  const TensorMapKey key{base, std::int64_t(dtype), cols, rows, batches, row_stride, batch_stride, box_cols, box_rows,
                         cpu::t_current.cpu ? nullptr : static_cast<const void*>(cpu::t_current.context)};
  TensorMapMemo& memo = t_tensor_maps;
  const std::size_t set = TensorMapMemo::set(key), first = set * TensorMapMemo::kWays;
  for (std::size_t i = first; i < first + TensorMapMemo::kWays; ++i)
    if (memo.used[i] && memo.keys[i] == key) return memo.maps[i];
  const TensorMap map = encode_tile_tensor_map(base, dtype, cols, rows, batches, row_stride, batch_stride, box_cols,
                                               box_rows);
  const std::size_t i = first + memo.next[set];
  memo.next[set] = std::uint8_t((memo.next[set] + 1) % TensorMapMemo::kWays);
  memo.keys[i] = key;
  memo.maps[i] = map;
  memo.used[i] = true;
  return map;
}

namespace {
TensorMap encode_tile_tensor_map(DevicePtr base, DType dtype, std::int64_t cols, std::int64_t rows,
                                 std::int64_t batches, std::int64_t row_stride, std::int64_t batch_stride,
                                 unsigned box_cols, unsigned box_rows) {
  static_assert(sizeof(TensorMap) == sizeof(CUtensorMap));
  if (dtype != DType::f16 && dtype != DType::bf16)
    throw InvalidArgumentError(fmt::format("tile_tensor_map: {} is not a 16-bit float", dtype_name(dtype)));
  const cuuint64_t element = 2;
  // A single batch still needs a stride: the tensor's own extent.
  if (batches <= 1) batch_stride = row_stride * std::max<std::int64_t>(rows, 1);
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(std::max<std::int64_t>(batches, 1))};
  const cuuint64_t strides[2] = {cuuint64_t(row_stride) * element, cuuint64_t(batch_stride) * element};
  const cuuint32_t box[3] = {box_cols, box_rows, 1}, element_strides[3] = {1, 1, 1};
  if (cpu::t_current.cpu) {
    device_hooks::count_driver_call();  // cuTensorMapEncodeTiled on a GPU
    return cpu::encode_tensor_map(base, dims, strides, box, unsigned(element));
  }
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
}  // namespace

void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  if (cpu::t_current.cpu) {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return;
  }
  MOJO_CU(cuStreamSynchronize(stream));
  MOJO_CU(cuMemcpyDtoH(dst, src, bytes));
}

// ---- Graph --------------------------------------------------------------------

void Graph::begin_capture(StreamHandle stream) {
  if (stream == nullptr) throw InvalidArgumentError("Graph::capture needs a stream; the legacy default stream cannot be captured");
  if (cpu::t_current.cpu) {
    if (cpu::stream_of(stream)->capture != nullptr) throw InvalidArgumentError("Graph::capture: the stream is already being captured");
    cpu::stream_of(stream)->capture = new cpu::Recording();
    return;
  }
  MOJO_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
}

void Graph::abandon_capture(StreamHandle stream) noexcept {
  if (cpu::t_current.cpu) {
    delete std::exchange(cpu::stream_of(stream)->capture, nullptr);
    return;
  }
  CUgraph graph = nullptr;
  if (driver::api().cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph) driver::api().cuGraphDestroy(graph);
}

Graph Graph::end_capture(StreamHandle stream) {
  if (cpu::t_current.cpu) {
    Graph g;
    g.cpu_.reset(std::exchange(cpu::stream_of(stream)->capture, nullptr));
    return g;
  }
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
Graph::Graph(Graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)), cpu_(std::move(other.cpu_)) {}
Graph& Graph::operator=(Graph&& other) noexcept {
  std::swap(exec_, other.exec_);
  std::swap(cpu_, other.cpu_);
  return *this;
}
void Graph::launch(StreamHandle stream) const {
  if (cpu_) {
    for (const auto& work : cpu_->work) work();
    return;
  }
  MOJO_CU(cuGraphLaunch(exec_, stream));
}

}  // namespace mojo
