// The public device types (mojo/device.hpp) over the two backends
// (src/device/backend.hpp): each object remembers the backend and context it
// was made in and hands its calls to them.
#include "mojo/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/config.hpp"
#include "device/backend.hpp"
#include "device/hooks.hpp"
#include "mojo/error.hpp"

namespace mojo {

constinit thread_local CurrentDevice t_current_device;

bool device_available() noexcept {
  try {
    return Device::count() > 0;
  } catch (...) {
    return false;
  }
}

// ---- Device ---------------------------------------------------------------

Device Device::open(std::string_view spec) {
  const config::DeviceSpec d = config::parse_device(spec, fmt::format("device '{}'", spec));
  return d.cpu ? cpu(d.target, d.sms) : open(d.ordinal);
}

namespace {
std::mutex g_default_mutex;
std::string g_default_spec = "cuda";

// Makes a device current on a thread where none is, as the CUDA runtime makes
// a primary context current on first use: the context the application made
// current through the driver, else the default device.
void ensure_a_device() {
  CurrentDevice& c = current_device();
  if (c.backend != nullptr || c.context != nullptr) return;
  std::string spec;
  {
    std::lock_guard lock(g_default_mutex);
    spec = g_default_spec;
  }
  if (!spec.starts_with("cpu")) {
    if (void* context = driver_current_context()) {
      c = CurrentDevice{&cuda_backend(), context, Target{}};
      return;
    }
  }
  // Opened once per spec and kept for the process, like the runtime's primary context.
  static std::mutex opened_mutex;
  static std::map<std::string, Device*, std::less<>> opened;
  std::lock_guard lock(opened_mutex);
  Device*& d = opened[spec];
  if (d == nullptr)
    d = new Device(Device::open(spec));
  else
    d->make_current();
}

// The backend new objects on this thread go to, and their context: the current device's.
CurrentDevice device_for_new_object() {
  ensure_a_device();
  CurrentDevice c = current_device();
  if (c.backend == nullptr) c.backend = &cuda_backend();  // a driver context with no Device made current
  return c;
}
}  // namespace

void Device::set_default(std::string_view spec) {
  std::lock_guard lock(g_default_mutex);
  g_default_spec = spec;
}

bool Device::is_cpu() const noexcept { return backend_ != nullptr && backend_->is_cpu(); }

void Device::make_current() const { backend_->make_current(context_, target_); }

// What this thread made current is remembered, so that a launch asks the
// driver nothing (a context made current behind the Runtime's back, through
// the driver itself, needs Device::make_current again).
void Device::ensure_current() const {
  const CurrentDevice& c = current_device();
  if (c.backend != backend_ || c.context != context_ || !(c.target == target_)) make_current();
}

void Device::synchronize() const {
  make_current();
  backend_->synchronize();
}

// ---- Stream / Event -------------------------------------------------------

Stream::Stream() {
  const CurrentDevice c = device_for_new_object();
  stream_ = {c.backend->create_stream(), c.backend, c.context};
}
Stream::~Stream() {
  if (stream_.handle != nullptr) stream_.backend->destroy_stream(stream_.context, stream_.handle);
}
void Stream::synchronize() const { stream_.backend->synchronize_stream(stream_.context, stream_.handle); }

Event::Event() {
  const CurrentDevice c = device_for_new_object();
  event_ = {c.backend->create_event(), c.backend, c.context};
}
Event::~Event() {
  if (event_.handle != nullptr) event_.backend->destroy_event(event_.context, event_.handle);
}
void Event::record(StreamHandle stream) {
  if (event_.handle == nullptr) throw InvalidArgumentError("Event::record on a moved-from Event");
  event_.backend->record_event(event_.context, event_.handle, stream);
}
void Event::synchronize() const {
  if (event_.handle == nullptr) throw InvalidArgumentError("Event::synchronize on a moved-from Event");
  event_.backend->synchronize_event(event_.context, event_.handle);
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  if (start.event_.handle == nullptr || end.event_.handle == nullptr)
    throw InvalidArgumentError("Event::elapsed_ms of a moved-from Event");
  if (start.event_.backend != end.event_.backend)
    throw InvalidArgumentError("Event::elapsed_ms of events on different devices");
  return start.event_.backend->elapsed_ms(start.event_.handle, end.event_.handle);
}

// ---- DeviceBuffer ---------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  const CurrentDevice c = device_for_new_object();
  ptr_ = {c.backend->allocate(bytes), c.backend, c.context};
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_.handle != 0) ptr_.backend->release(ptr_.context, ptr_.handle);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::move(other.ptr_)), size_(std::exchange(other.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(size_, other.size_);
  return *this;
}

static void check_range(std::size_t offset, std::size_t bytes, std::size_t size, const char* what) {
  if (offset > size || bytes > size - offset)
    throw InvalidArgumentError(
        fmt::format("{}: {} bytes at offset {} do not fit a {}-byte buffer", what, bytes, offset, size));
}

Tensor DeviceBuffer::as(const TensorSpec& spec, std::size_t byte_offset) const {
  const std::size_t bytes = spec.extent_bytes();
  if (byte_offset > size_ || bytes > size_ - byte_offset)
    throw ShapeError(
        fmt::format("tensor {} at offset {} needs {} bytes; the buffer has {}", spec.str(), byte_offset, bytes, size_));
  return Tensor{spec, ptr_.handle + byte_offset};
}

void DeviceBuffer::copy_from_host(const void* src, std::size_t bytes, std::size_t offset) {
  check_range(offset, bytes, size_, "DeviceBuffer::copy_from_host");
  if (bytes != 0) ptr_.backend->copy_from_host(ptr_.context, ptr_.handle + offset, src, bytes);
}
void DeviceBuffer::copy_to_host(void* dst, std::size_t bytes, std::size_t offset) const {
  check_range(offset, bytes, size_, "DeviceBuffer::copy_to_host");
  if (bytes != 0) ptr_.backend->copy_to_host(ptr_.context, dst, ptr_.handle + offset, bytes);
}
void DeviceBuffer::fill_bytes(std::uint8_t value) {
  if (size_ != 0) ptr_.backend->fill_bytes(ptr_.context, ptr_.handle, value, size_);
}

// ---- Module / Function / launch -------------------------------------------

Module Module::load(std::string_view image) {
  const CurrentDevice c = device_for_new_object();
  Module m;
  m.module_ = {c.backend->load_module(image), c.backend, c.context};
  return m;
}
Module::~Module() {
  if (module_.handle != nullptr) module_.backend->unload_module(module_.context, module_.handle);
}

Function Module::function(const std::string& name) const {
  if (module_.handle == nullptr) throw InvalidArgumentError("Module::function on a moved-from Module");
  return Function(*module_.backend, module_.backend->function(module_.handle, name));
}

namespace {
// The backend of a Function that came from a Module; InvalidArgumentError for an empty one.
const Backend& backend_of(const Backend* backend) {
  if (backend == nullptr) throw InvalidArgumentError("an empty mojo::Function (not from Module::function)");
  return *backend;
}
}  // namespace

int Function::num_registers() const { return backend_of(backend_).attribute(function_, FunctionAttribute::registers); }
int Function::static_shared_bytes() const {
  return backend_of(backend_).attribute(function_, FunctionAttribute::static_shared_bytes);
}
int Function::local_bytes() const { return backend_of(backend_).attribute(function_, FunctionAttribute::local_bytes); }
int Function::max_threads_per_block() const {
  return backend_of(backend_).attribute(function_, FunctionAttribute::max_threads_per_block);
}
void Function::set_max_dynamic_shared(int bytes) const {
  backend_of(backend_).set_max_dynamic_shared(function_, bytes);
}
CUfunc_st* Function::handle() const noexcept {
  return backend_ == &cuda_backend() ? static_cast<CUfunc_st*>(function_) : nullptr;
}

namespace {
std::atomic<std::uint64_t> g_driver_calls{0};
std::atomic<device_hooks::LaunchSink> g_launch_sink{nullptr};
}  // namespace

std::uint64_t device_hooks::driver_calls() noexcept { return g_driver_calls.load(std::memory_order_relaxed); }
void device_hooks::count_driver_call() noexcept { g_driver_calls.fetch_add(1, std::memory_order_relaxed); }
void device_hooks::set_launch_sink(LaunchSink sink) noexcept { g_launch_sink.store(sink, std::memory_order_relaxed); }

void launch(const Function& f, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream, void** args,
            LaunchOptions options) {
  if (const device_hooks::LaunchSink sink = g_launch_sink.load(std::memory_order_relaxed)) {
    sink(f, grid, block, dynamic_smem, stream, args, options);
    return;
  }
  backend_of(f.backend_).launch(f.function_, grid, block, dynamic_smem, stream, args, options);
}

void copy_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes != 0) current_backend().copy_async(dst, src, bytes, stream);
}

void fill_async(DevicePtr dst, std::uint8_t value, std::size_t bytes, StreamHandle stream) {
  if (bytes != 0) current_backend().fill_async(dst, value, bytes, stream);
}

void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes != 0) current_backend().copy_to_host_after(dst, src, bytes, stream);
}

// ---- TMA descriptors ---------------------------------------------------------

namespace {

// What a TMA descriptor is encoded from, on which device.
struct TensorMapKey {
  DevicePtr base;
  std::int64_t dtype, cols, rows, batches, row_stride, batch_stride, box_cols, box_rows;
  const void* device;  // the thread's current device: the CUDA context made current, else the backend
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

TensorMap encode_tile_tensor_map(const TensorMapKey& key);

}  // namespace

TensorMap tile_tensor_map(DevicePtr base, DType dtype, std::int64_t cols, std::int64_t rows, std::int64_t batches,
                          std::int64_t row_stride, std::int64_t batch_stride, unsigned box_cols, unsigned box_rows) {
  const CurrentDevice& current = current_device();
  const TensorMapKey key{base,         std::int64_t(dtype),
                         cols,         rows,
                         batches,      row_stride,
                         batch_stride, box_cols,
                         box_rows,     current.context != nullptr ? current.context : current.backend};
  TensorMapMemo& memo = t_tensor_maps;
  const std::size_t set = TensorMapMemo::set(key), first = set * TensorMapMemo::kWays;
  for (std::size_t i = first; i < first + TensorMapMemo::kWays; ++i)
    if (memo.used[i] && memo.keys[i] == key) return memo.maps[i];
  const TensorMap map = encode_tile_tensor_map(key);
  const std::size_t i = first + memo.next[set];
  memo.next[set] = std::uint8_t((memo.next[set] + 1) % TensorMapMemo::kWays);
  memo.keys[i] = key;
  memo.maps[i] = map;
  memo.used[i] = true;
  return map;
}

namespace {
TensorMap encode_tile_tensor_map(const TensorMapKey& k) {
  const DType dtype = DType(k.dtype);
  if (dtype != DType::f16 && dtype != DType::bf16)
    throw InvalidArgumentError(fmt::format("tile_tensor_map: {} is not a 16-bit float", dtype_name(dtype)));
  const std::uint64_t element = 2;
  // A single batch still needs a stride: the tensor's own extent.
  const std::int64_t batch_stride = k.batches <= 1 ? k.row_stride * std::max<std::int64_t>(k.rows, 1) : k.batch_stride;
  const std::uint64_t dims[3] = {std::uint64_t(k.cols), std::uint64_t(k.rows),
                                 std::uint64_t(std::max<std::int64_t>(k.batches, 1))};
  const std::uint64_t strides[2] = {std::uint64_t(k.row_stride) * element, std::uint64_t(batch_stride) * element};
  const std::uint32_t box[3] = {std::uint32_t(k.box_cols), std::uint32_t(k.box_rows), 1};
  return current_backend().encode_tensor_map(dtype, k.base, dims, strides, box);
}
}  // namespace

// ---- Graph --------------------------------------------------------------------

bool is_capturing(StreamHandle stream) { return current_backend().is_capturing(stream); }

void Graph::begin_capture(StreamHandle stream) {
  if (stream == nullptr)
    throw InvalidArgumentError("Graph::capture needs a stream; the legacy default stream cannot be captured");
  current_backend().begin_capture(stream);
}
void Graph::abandon_capture(StreamHandle stream) noexcept { current_backend().abandon_capture(stream); }
Graph Graph::end_capture(StreamHandle stream) {
  Graph g;
  const Backend& backend = current_backend();
  g.exec_ = {backend.end_capture(stream), &backend, nullptr};
  return g;
}

Graph::~Graph() {
  if (exec_.handle != nullptr) exec_.backend->destroy_graph(exec_.handle);
}
void Graph::launch(StreamHandle stream) const {
  if (exec_.handle == nullptr) throw InvalidArgumentError("Graph::launch of a moved-from Graph");
  exec_.backend->launch_graph(exec_.handle, stream);
}

}  // namespace mojo
