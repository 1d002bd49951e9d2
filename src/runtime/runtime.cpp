// Runtime: ops -> cache -> compiler -> device.
//
// Two maps. `loaded` answers the hot path: (op, params, target) -> a kernel
// already loaded on the GPU, found with one hash of a few integers and no
// allocation. On a miss, the specialization's full KernelKey (hash of the
// whole translation unit, compiler identity, target, stage) is looked up in
// memory, then on disk, and only then compiled.
#include "mojo/runtime.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include "core/log.hpp"
#include "mojo/error.hpp"

namespace mojo {

struct LoadedKernel {
  std::string name;
  std::shared_ptr<const std::string> binary;
  Module module;
  Function function;
  const Device* device;
};

namespace {

struct FastKey {
  std::uint64_t high, low;
  bool operator==(const FastKey&) const = default;
};
struct FastKeyHash {
  std::size_t operator()(const FastKey& k) const noexcept { return k.low; }
};

FastKey fast_key(const OpDef* op, const Params& params, const Target& target) {
  std::int64_t words[3 + 2 * Params::kCapacity];
  int n = 0;
  words[n++] = std::int64_t(reinterpret_cast<std::uintptr_t>(op));
  words[n++] = target.sm * 2 + (target.arch_specific ? 1 : 0);
  words[n++] = std::int64_t(params.items().size());
  for (const Param& p : params.items()) {
    words[n++] = p.value;
    words[n++] = p.is_dtype;
  }
  XXH128_hash_t h = XXH3_128bits(words, std::size_t(n) * sizeof(std::int64_t));
  return {h.high64, h.low64};
}

struct KernelKeyHash {
  std::size_t operator()(const KernelKey& k) const noexcept { return k.low; }
};

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

std::string compiler_name(const RuntimeOptions& options) {
  if (!options.compiler.empty()) return options.compiler;
  if (const char* env = std::getenv("MOJO_JIT_COMPILER"); env && *env) return env;
  return "nvrtc";
}

void launch_loaded(const OpDef& op, const LoadedKernel& kernel, const Params& params, TensorList tensors,
                   ScalarList scalars, StreamHandle stream) {
  LaunchGeometry g = op.geometry(params, tensors);
  KernelArgs args;
  op.pack_args(params, tensors, scalars, args);
  if (g.grid.x == 0 || g.grid.y == 0 || g.grid.z == 0) return;  // empty tensor: nothing to do
  kernel.device->ensure_current();
  mojo::launch(kernel.function, g.grid, g.block, g.dynamic_smem, stream, args.data());
}

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  TemplateRegistry templates;
  std::unique_ptr<Compiler> compiler;
  std::optional<DiskCache> disk;

  std::mutex device_mutex;
  std::optional<Device> device;
  std::atomic<const Device*> device_ready{nullptr};  // set once the device is open

  std::shared_mutex loaded_mutex;
  std::unordered_map<FastKey, std::unique_ptr<LoadedKernel>, FastKeyHash> loaded;
  std::vector<std::unique_ptr<LoadedKernel>> retired;  // unindexed, kept alive for KernelHandles

  std::mutex compile_mutex;  // one specialization resolved at a time; keeps compiles unique
  std::unordered_map<KernelKey, std::shared_ptr<const std::string>, KernelKeyHash> binaries;

  std::atomic<std::uint64_t> memory_hits{0}, disk_hits{0}, misses{0}, compiles{0}, bad_entries{0};
  std::atomic<std::int64_t> compile_ns{0};

  explicit Impl(RuntimeOptions o)
      : options(std::move(o)), templates(options.template_paths), compiler(make_compiler(compiler_name(options))) {
    if (options.disk_cache && !env_flag("MOJO_JIT_DISABLE_DISK_CACHE"))
      disk.emplace(options.cache_dir.empty() ? DiskCache::default_dir() : options.cache_dir);
  }

  const Device& open_device() {
    std::lock_guard lock(device_mutex);
    if (!device) {
      device = Device::open(options.device);
      device_ready.store(&*device, std::memory_order_release);
    }
    return *device;
  }

  struct Unit {
    std::string source, kernel_name, description;
    KernelKey key;
  };

  Unit translation_unit(const OpDef& op, const Params& params, const Target& target, Emit emit) const {
    Unit u;
    u.kernel_name = op.kernel_name(params);
    u.source = templates.expand(op.template_file());
    u.source += fmt::format("\n#line 1 \"<specialization>\"\n{}\n", op.entry_line(params));
    u.description = fmt::format("{} {{{}}}", op.name(), params.str());
    std::string params_text = params.str(), target_name = target.sm_name();
    u.key = compute_key(KeyInputs{u.source, u.kernel_name, params_text, target_name, compiler->identity(), emit});
    return u;
  }

  // memory -> disk -> compile. Caller holds compile_mutex.
  std::shared_ptr<const std::string> binary(const OpDef& op, const Unit& u, const Params& params,
                                            const Target& target, Emit emit, bool* compiled) {
    *compiled = false;
    if (auto it = binaries.find(u.key); it != binaries.end()) return it->second;
    std::shared_ptr<const std::string> result;
    if (disk) {
      std::string problem;
      if (std::optional<std::string> payload = disk->load(u.key, emit, &problem)) {
        ++disk_hits;
        result = std::make_shared<const std::string>(std::move(*payload));
      } else if (!problem.empty()) {
        ++bad_entries;
        log::warn(fmt::format("unusable cache entry for {}: {}; recompiling", u.description, problem));
      }
    }
    if (!result) {
      ++misses;
      auto start = std::chrono::steady_clock::now();
      CompileResult r = compiler->compile(
          CompileRequest{op.template_file(), u.source, target, emit, u.description});
      compile_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
      ++compiles;
      *compiled = true;
      result = std::make_shared<const std::string>(std::move(r.binary));
      if (disk) store(u, params, target, emit, *result);
    }
    binaries.emplace(u.key, result);
    return result;
  }

  void store(const Unit& u, const Params& params, const Target& target, Emit emit, const std::string& payload) {
    std::string meta = fmt::format("op={}\nkernel={}\nparams={}\ntarget={}\ncompiler={}\nemit={}\n",
                                   u.description.substr(0, u.description.find(' ')), u.kernel_name, params.str(),
                                   target.sm_name(), compiler->identity(), emit_name(emit));
    try {
      disk->store(u.key, emit, meta, payload);
    } catch (const Error& e) {
      log::warn(fmt::format("{}; the disk cache is off for this process, kernels stay in memory", e.what()));
      disk.reset();
    }
  }

  const LoadedKernel& load(const OpDef& op, const Params& params, const Target& target, const FastKey& key) {
    std::lock_guard lock(compile_mutex);
    {
      std::shared_lock read(loaded_mutex);
      if (auto it = loaded.find(key); it != loaded.end()) return *it->second;
    }
    const Device& dev = open_device();
    Unit u = translation_unit(op, params, target, Emit::cubin);
    bool compiled = false;
    auto bin = binary(op, u, params, target, Emit::cubin, &compiled);
    dev.ensure_current();
    Module module = Module::load(*bin);
    Function function = module.function(u.kernel_name);
    auto kernel = std::make_unique<LoadedKernel>(
        LoadedKernel{u.kernel_name, std::move(bin), std::move(module), function, &dev});
    std::unique_lock write(loaded_mutex);
    return *loaded.emplace(key, std::move(kernel)).first->second;
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Runtime::~Runtime() = default;

void Runtime::launch(std::string_view op_name, TensorList tensors, ScalarList scalars, StreamHandle stream) {
  const OpDef& op = find_op(op_name);
  const Target target = device().target();
  const Params params = op.specialize(tensors, scalars, target);
  const FastKey key = fast_key(&op, params, target);
  const LoadedKernel* kernel = nullptr;
  {
    std::shared_lock read(impl_->loaded_mutex);
    if (auto it = impl_->loaded.find(key); it != impl_->loaded.end()) kernel = it->second.get();
  }
  if (kernel != nullptr)
    impl_->memory_hits.fetch_add(1, std::memory_order_relaxed);
  else
    kernel = &impl_->load(op, params, target, key);
  launch_loaded(op, *kernel, params, tensors, scalars, stream);
}

KernelHandle Runtime::get_kernel(std::string_view op_name, TensorList tensors, ScalarList scalars) {
  const OpDef& op = find_op(op_name);
  const Target target = device().target();
  const Params params = op.specialize(tensors, scalars, target);
  const FastKey key = fast_key(&op, params, target);
  return KernelHandle(&op, &impl_->load(op, params, target, key), params, target);
}

Artifact Runtime::compile(std::string_view op_name, TensorList tensors, ScalarList scalars, const Target& target,
                          Emit emit) {
  const OpDef& op = find_op(op_name);
  Params params = op.specialize(tensors, scalars, target);
  Impl::Unit u = impl_->translation_unit(op, params, target, emit);
  std::lock_guard lock(impl_->compile_mutex);
  Artifact a;
  a.op = std::string(op.name());
  a.params = params;
  a.target = target;
  a.emit = emit;
  a.kernel_name = u.kernel_name;
  a.key = u.key;
  a.binary = impl_->binary(op, u, params, target, emit, &a.compiled);
  return a;
}

KernelKey Runtime::key(std::string_view op_name, TensorList tensors, ScalarList scalars, const Target& target,
                       Emit emit) {
  const OpDef& op = find_op(op_name);
  return impl_->translation_unit(op, op.specialize(tensors, scalars, target), target, emit).key;
}

CacheStats Runtime::stats() const {
  CacheStats s;
  s.memory_hits = impl_->memory_hits;
  s.disk_hits = impl_->disk_hits;
  s.misses = impl_->misses;
  s.compiles = impl_->compiles;
  s.bad_entries = impl_->bad_entries;
  s.compile_seconds = double(impl_->compile_ns.load()) * 1e-9;
  return s;
}

std::filesystem::path Runtime::cache_dir() const {
  std::lock_guard lock(impl_->compile_mutex);
  return impl_->disk ? impl_->disk->dir() : std::filesystem::path();
}

const Compiler& Runtime::compiler() const { return *impl_->compiler; }
const TemplateRegistry& Runtime::templates() const { return impl_->templates; }

void Runtime::add_template_path(std::filesystem::path dir) {
  std::lock_guard lock(impl_->compile_mutex);
  impl_->templates.add_search_path(std::move(dir));
  impl_->binaries.clear();
  std::unique_lock write(impl_->loaded_mutex);
  for (auto& [key, kernel] : impl_->loaded) impl_->retired.push_back(std::move(kernel));
  impl_->loaded.clear();
}

const Device& Runtime::device() {
  if (const Device* d = impl_->device_ready.load(std::memory_order_acquire)) return *d;
  return impl_->open_device();
}

// ---- KernelHandle -----------------------------------------------------------

void KernelHandle::launch(TensorList tensors, ScalarList scalars, StreamHandle stream) const {
  const Params params = op_->specialize(tensors, scalars, target_);
  if (!(params == params_))
    throw InvalidArgumentError(fmt::format("{}: this handle runs {{{}}} but these tensors need {{{}}}; get a "
                                           "handle for them with Runtime::get_kernel",
                                           op_->name(), params_.str(), params.str()));
  launch_loaded(*op_, *kernel_, params_, tensors, scalars, stream);
}

const Function& KernelHandle::function() const noexcept { return kernel_->function; }
const std::string& KernelHandle::kernel_name() const noexcept { return kernel_->name; }

}  // namespace mojo
