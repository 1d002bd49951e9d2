// Runtime: ops -> cache -> compiler -> device.
//
// Two maps. `loaded` answers the hot path: (op, params, target) -> a kernel
// already loaded on the GPU, found with one hash of a few integers and no
// allocation. On a miss, the specialization's full KernelKey (hash of the
// whole translation unit, compiler identity, target, stage) goes to the
// KernelCache: memory, then disk layers, and only then the compiler.
#include "mojo/runtime.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>

#include <unistd.h>
#include <unordered_map>

#include "cache/kernel_cache.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "mojo/environment.hpp"
#include "mojo/error.hpp"
#include "runtime/autotune.hpp"
#include "runtime/dump.hpp"
#include "runtime/specialization.hpp"
#include "runtime/workspace.hpp"

namespace mojo {
namespace fs = std::filesystem;

constexpr std::string_view kBundleProgram = "bundle.cu";  // a bundle's name in diagnostics

// A specialization loaded on the device: the kernels of its plan, in launch order (most ops: one).
struct LoadedKernel {
  struct Step {
    std::string name;
    Function function;
    Params params;  // the step's (OpDef::plan)
  };
  std::shared_ptr<const Module> module;  // shared by the kernels of one bundle
  std::vector<Step> steps;
  const Device* device;
  bool debug_checks;      // check the op's index data before each launch
  bool overlap_previous;  // launch with programmatic dependent launch (RuntimeOptions)
  Params params;      // what it was compiled for (an autotuned choice may differ from the heuristic's)
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

CacheOptions cache_options(const RuntimeOptions& o) {
  CacheOptions c;
  if (o.disk_cache && !config::flag("MOJO_JIT_DISABLE_DISK_CACHE"))
    c.dir = o.cache_dir.empty() ? DiskCache::default_dir() : o.cache_dir;
  c.readonly_dirs = o.readonly_cache_dirs;
  for (fs::path& p : environment::readonly_cache_dirs()) c.readonly_dirs.push_back(std::move(p));
  c.offline = o.offline || config::flag("MOJO_JIT_OFFLINE");
  c.remote = !o.remote_cache.empty() ? o.remote_cache : environment::remote_cache().value_or("");
  c.trust_any_dir = o.trust_cache_dir || config::flag("MOJO_JIT_CACHE_TRUST");
  if (o.cache_max_bytes > 0)
    c.max_bytes = o.cache_max_bytes;
  else if (auto n = environment::cache_max_bytes())
    c.max_bytes = *n;
  if (auto ms = config::number("MOJO_JIT_LOCK_TIMEOUT_MS", 0, 24 * 3600 * 1000, "milliseconds"))
    c.lock_timeout = std::chrono::milliseconds(*ms);
  return c;
}

std::string device_spec(const RuntimeOptions& options) {
  if (!options.device.empty()) return options.device;
  return environment::device().value_or("cuda");
}

// The options with MOJO_JIT_LOG and MOJO_JIT_DEVICE checked first, so that a bad value is an
// InvalidArgumentError naming its variable from the constructor, before anything logs or opens.
RuntimeOptions checked_options(RuntimeOptions o) {
  environment::check_log();
  o.device = device_spec(o);
  return o;
}

// The compiler the options name, else MOJO_JIT_COMPILER's (an error from that names the variable), else NVRTC.
std::unique_ptr<Compiler> make_runtime_compiler(const RuntimeOptions& options) {
  if (!options.compiler.empty()) return make_compiler(options.compiler);
  const std::optional<std::string> name = config::choice("MOJO_JIT_COMPILER", {"nvrtc", "llvm"});
  if (!name) return make_compiler("nvrtc");
  try {
    return make_compiler(*name);
  } catch (const InvalidArgumentError& e) {  // llvm in a build without it
    throw InvalidArgumentError(fmt::format("MOJO_JIT_COMPILER='{}': {}", *name, e.what()));
  }
}

// A MOJO_JIT_* variable no part reads is most likely misspelt: said once per process.
void warn_unknown_variables() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& name : config::unknown_variables())
      log::warn(fmt::format("{} is not a mojo-jit variable and is ignored (README, \"Environment\")", name));
  });
}

// One launch of a plan with its geometry and arguments, packed when a binding is made.
struct PackedStep {
  LaunchGeometry geometry;
  KernelArgs args;
};

// f(step, params) for every launch of `kernel`'s plan in stream order: its steps, the whole sequence run
// OpDef::repeats times, each run's params with "repeat" (its index) when there are several.
template <class F>
void for_each_launch(const OpDef& op, const LoadedKernel& kernel, TensorList tensors, F f) {
  const std::int64_t runs = op.repeats(kernel.params, tensors);
  for (std::int64_t r = 0; r < runs; ++r)
    for (const LoadedKernel::Step& step : kernel.steps) {
      if (runs == 1) {
        f(step, step.params);
        continue;
      }
      Params p = step.params;
      p.add("repeat", r);
      f(step, p);
    }
}

// The op's checks of its index data (RuntimeOptions::debug_checks), which read it on the host: not for a launch
// a graph captures, whose data is there only when the graph runs (and whose thread may not copy to the host).
void check_data_unless_captured(const OpDef& op, TensorList tensors, ScalarList scalars, StreamHandle stream) {
  if (!is_capturing(stream)) return op.check_data(tensors, scalars, stream);
  static std::once_flag said;
  std::call_once(said, [&] {
    log::warn(fmt::format("{}: debug checks skip the launches a graph captures (their data is there only when the "
                          "graph runs); launch without the graph to check them",
                          op.name()));
  });
}

// A cooperative launch's failure (its grid too large for the device at once, say), named after the op, with
// the way out where the op has one: a `cooperative` scalar that picks a plan without such a launch.
std::string cooperative_failure(const OpDef& op, std::string_view what) {
  const auto scalars = op.scalar_args();
  const bool has_choice =
      std::any_of(scalars.begin(), scalars.end(), [](const ScalarArgInfo& s) { return s.name == "cooperative"; });
  return fmt::format("{}: {}{}", op.name(), what,
                     has_choice ? "; cooperative=0 runs it without a cooperative launch" : "");
}

// The workspace a plan asks for (OpDef::workspace_bytes, OpDef::sync_words), from `arena`.
Workspace workspace_for(std::size_t bytes, std::size_t words, WorkspaceArena& arena, StreamHandle stream) {
  return bytes > 0 || words > 0 ? arena.get(stream, bytes, words) : Workspace{};
}

// With debug checks: that the plan's kernels left its sync words zero, as the next launch needs them (a launch a
// graph captures has not run yet). Else the barriers of the next launch would pass early, silently.
void check_sync_words_left_zero(const OpDef& op, const Params& params, TensorList tensors, DevicePtr sync,
                                WorkspaceArena& arena, StreamHandle stream) {
  if (is_capturing(stream)) return;
  std::vector<unsigned> words(op.sync_words(params, tensors));
  copy_to_host(words.data(), sync, words.size() * sizeof(unsigned), stream);
  const auto set = std::find_if(words.begin(), words.end(), [](unsigned w) { return w != 0; });
  if (set == words.end()) return;
  arena.forget_sync(stream);
  throw Error(
      fmt::format("{}: its kernels left {} of its {} sync words set (word {} holds {}); a cooperative "
                  "kernel must leave them zero (mojo::leave_sync_words), or the next launch's barriers pass "
                  "early",
                  op.name(), std::count_if(set, words.end(), [](unsigned w) { return w != 0; }), words.size(),
                  set - words.begin(), *set));
}

// CUDA's grid: at most 2^31 - 1 blocks along x, 65,535 along y and z.
constexpr unsigned kMaxGridX = 2147483647u, kMaxGridYZ = 65535u;

// Launches the kernels of `kernel`'s plan in order, with `workspace` from `arena`; `packed`: their geometry and
// arguments, when already packed for these tensors and this workspace.
void launch_plan(const OpDef& op, const LoadedKernel& kernel, TensorList tensors, ScalarList scalars,
                 StreamHandle stream, const Workspace& workspace, WorkspaceArena& arena,
                 const PackedStep* packed = nullptr) {
  kernel.device->ensure_current();  // before pack_args: TMA descriptors are encoded by the current device
  if (packed == nullptr) op.check_memory(tensors);  // else checked when these pointers were bound
  if (kernel.debug_checks) check_data_unless_captured(op, tensors, scalars, stream);
  std::size_t i = 0;
  for_each_launch(op, kernel, tensors, [&](const LoadedKernel::Step& step, const Params& params) {
    const PackedStep* mine = packed ? &packed[i++] : nullptr;
    LaunchGeometry g = mine ? mine->geometry : op.geometry(params, tensors);
    if (g.grid.x == 0 || g.grid.y == 0 || g.grid.z == 0) return;  // empty tensor, or a step this run skips
    if (g.grid.x > kMaxGridX || g.grid.y > kMaxGridYZ || g.grid.z > kMaxGridYZ)  // the driver's, said as the op's
      throw ShapeError(
          fmt::format("{}: these shapes need a grid of [{}, {}, {}] blocks; CUDA takes at most {} in x "
                      "and {} in y and z",
                      op.name(), g.grid.x, g.grid.y, g.grid.z, kMaxGridX, kMaxGridYZ));
    KernelArgs args;
    if (mine == nullptr) op.pack_args(params, tensors, scalars, workspace, args);
    if (g.persistent) g.grid.x = std::min(g.grid.x, unsigned(kernel.device->sm_count()));
    // Not both: whether the driver takes a cooperative launch that overlaps the one before is not documented.
    const LaunchOptions options{.overlap_previous = kernel.overlap_previous && !g.cooperative,
                                .cooperative = g.cooperative};
    try {
      mojo::launch(step.function, g.grid, g.block, g.dynamic_smem, stream, mine ? mine->args.data() : args.data(),
                   options);
    } catch (const DeviceError& e) {
      if (workspace.sync != 0) arena.forget_sync(stream);  // its kernels may have left sync words set
      if (!g.cooperative) throw;
      throw DeviceError(cooperative_failure(op, e.what()), e.code());
    }
  });
  if (kernel.debug_checks && workspace.sync != 0)
    check_sync_words_left_zero(op, kernel.params, tensors, workspace.sync, arena, stream);
}

// A launch with nothing packed beforehand: the geometry, the workspace and the arguments found now.
void launch_unbound(const OpDef& op, const LoadedKernel& kernel, WorkspaceArena& arena, TensorList tensors,
                    ScalarList scalars, StreamHandle stream) {
  const Workspace workspace =
      workspace_for(op.workspace_bytes(kernel.params, tensors), op.sync_words(kernel.params, tensors), arena, stream);
  launch_plan(op, kernel, tensors, scalars, stream, workspace, arena);
}

}  // namespace

// What a KernelHandle was resolved for: tensors like these (same specs,
// pointers aligned at least as well) and these scalars give the same params
// and geometry, so its launch reuses them.
struct Binding {
  const OpDef* op;
  const LoadedKernel* kernel;
  WorkspaceArena* arena;
  std::vector<TensorSpec> specs;
  std::vector<DevicePtr> alignments;  // bytes each pointer must be a multiple of
  std::vector<DevicePtr> pointers;    // the tensors' pointers, for which `steps` are packed
  std::vector<std::string> scalar_names;
  std::vector<Scalar> scalar_values;
  std::size_t workspace_bytes, sync_words;
  Workspace workspace;                      // what `steps` are packed with
  std::unique_ptr<PackedStep[]> steps;      // one per launch of the plan
  bool args_packed = false;  // false: these pointers do not pass the op's checks (e.g. null)

  Binding(const OpDef& op, const LoadedKernel& kernel, WorkspaceArena& arena, TensorList tensors, ScalarList scalars,
          StreamHandle stream)
      : op(&op),
        kernel(&kernel),
        arena(&arena),
        workspace_bytes(op.workspace_bytes(kernel.params, tensors)),
        sync_words(op.sync_words(kernel.params, tensors)),
        steps(std::make_unique<PackedStep[]>(std::size_t(op.repeats(kernel.params, tensors)) * kernel.steps.size())) {
    std::size_t n = 0;
    for_each_launch(op, kernel, tensors,
                    [&](const LoadedKernel::Step&, const Params& p) { steps[n++].geometry = op.geometry(p, tensors); });
    for (const Tensor& t : tensors) {
      specs.push_back(t.spec);
      pointers.push_back(t.data);
      // A null pointer was taken as 16-byte aligned; more than 256 never changes a param.
      alignments.push_back(t.data == 0 ? 16 : std::min<DevicePtr>(t.data & -t.data, 256));
    }
    for (const ScalarArg& a : scalars) {
      scalar_names.emplace_back(a.name);
      scalar_values.push_back(a.value);
    }
    kernel.device->ensure_current();
    try {
      op.check_memory(tensors);
      workspace = workspace_for(workspace_bytes, sync_words, arena, stream);
      n = 0;
      for_each_launch(op, kernel, tensors, [&](const LoadedKernel::Step&, const Params& p) {
        op.pack_args(p, tensors, scalars, workspace, steps[n++].args);
      });
      args_packed = true;
    } catch (const Error&) {
      // Packed at launch instead, where the error belongs.
    }
  }

  // Launches these tensors, which match(): with the arguments packed at binding when the pointers (tensors' and
  // workspace's) are the same.
  // The hot path of every cache hit: inlined into its callers (GCC stopped doing so by itself, +4 ns a launch).
  [[gnu::always_inline]] void launch(TensorList tensors, ScalarList scalars, StreamHandle stream) const {
    const Workspace ws = workspace_for(workspace_bytes, sync_words, *arena, stream);
    bool same = args_packed && ws.scratch == workspace.scratch && ws.sync == workspace.sync;
    for (std::size_t i = 0; same && i < pointers.size(); ++i) same = tensors[i].data == pointers[i];
    launch_plan(*op, *kernel, tensors, scalars, stream, ws, *arena, same ? steps.get() : nullptr);
  }

  bool matches(TensorList tensors, ScalarList scalars) const noexcept {
    if (tensors.size() != specs.size() || scalars.size() != scalar_names.size()) return false;
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (tensors[i].data % alignments[i] != 0 || !(tensors[i].spec == specs[i])) return false;
    for (std::size_t i = 0; i < scalar_names.size(); ++i)
      if (scalars[i].name != scalar_names[i] || !(scalars[i].value == scalar_values[i])) return false;
    return true;
  }
};

namespace {

std::atomic<std::uint64_t> g_next_runtime_id{1};

// The bindings Runtime::launch made last on this thread, so that a launch by
// name with tensors and scalars like a recent one reuses its binding: a small
// direct-mapped table, no lock, no allocation on a hit. An entry belongs to
// one Runtime (by id, never reused) and one generation of its templates.
struct RecentBinding {
  std::uint64_t runtime = 0, generation = 0;
  std::shared_ptr<const Binding> binding;
};
struct RecentBindings {
  static constexpr std::size_t kSlots = 64;
  std::array<RecentBinding, kSlots> slots;
  // By op and shapes: the linears of one layer (same op, other weights) keep their own entries.
  static std::size_t slot(const OpDef* op, TensorList tensors) noexcept {
    std::uint64_t h = std::uint64_t(reinterpret_cast<std::uintptr_t>(op));
    for (const Tensor& t : tensors)
      for (std::int64_t d : t.spec.shape()) h = (h ^ std::uint64_t(d)) * 0x100000001B3ull;
    return std::size_t((h ^ h >> 32) % kSlots);
  }
};
thread_local RecentBindings t_recent;

}  // namespace

struct Runtime::Impl {
  const std::uint64_t id = g_next_runtime_id.fetch_add(1);
  std::atomic<std::uint64_t> generation{0};  // add_template_path: bindings made before are stale
  RuntimeOptions options;
  mutable std::shared_mutex templates_mutex;
  TemplateRegistry templates;
  std::unique_ptr<Compiler> compiler;
  std::once_flag host_once;
  std::unique_ptr<Compiler> host_compiler;  // the cpu device's, made on its first use
  KernelCache cache;
  fs::path dump_dir;
  bool debug_checks;
  bool autotune;
  bool programmatic_dependent_launch;

  std::mutex device_mutex;
  std::optional<Device> device;
  std::atomic<const Device*> device_ready{nullptr};  // set once the device is open

  std::shared_mutex loaded_mutex;
  std::unordered_map<FastKey, std::unique_ptr<LoadedKernel>, FastKeyHash> loaded;
  std::vector<std::unique_ptr<LoadedKernel>> retired;  // unindexed, kept alive for KernelHandles
  std::mutex load_mutex;                               // one module load at a time
  // Loaded modules by the hash of their binary: one load per bundle, and a
  // binary that replaces a freed one at the same address is never taken for it.
  std::unordered_map<FastKey, std::weak_ptr<const Module>, FastKeyHash> modules;
  std::atomic<std::uint64_t> memory_hits{0};
  std::mutex stage_mutex;
  std::array<double, kCompileStages> stage_seconds{};  // CacheStats::compile_stage_seconds
  WorkspaceArena workspace;

  explicit Impl(RuntimeOptions o)
      : options(checked_options(std::move(o))),
        templates(options.template_paths),
        compiler(make_runtime_compiler(options)),
        cache(cache_options(options)),
        dump_dir(!options.dump_dir.empty() ? options.dump_dir : fs::path(config::text("MOJO_JIT_DUMP").value_or(""))),
        debug_checks(options.debug_checks || config::flag("MOJO_JIT_DEBUG_CHECKS")),
        autotune(options.autotune || config::flag("MOJO_JIT_AUTOTUNE")),
        programmatic_dependent_launch(options.programmatic_dependent_launch || config::flag("MOJO_JIT_PDL")) {
    warn_unknown_variables();
  }

  const Device& open_device() {
    std::lock_guard lock(device_mutex);
    if (!device) {
      device = Device::open(device_spec(options));
      device_ready.store(&*device, std::memory_order_release);
    }
    return *device;
  }

  // The compiler of an emission: the host compiler for the cpu device's, else the Runtime's.
  const Compiler& compiler_for(Emit emit) {
    if (emit != Emit::host) return *compiler;
    std::call_once(host_once, [&] { host_compiler = make_host_compiler(); });
    return *host_compiler;
  }

  // The templates of a translation unit; a host build starts with the cpu device's prelude.
  std::string expand(std::vector<std::string> files, Emit emit) const {
    if (emit == Emit::host) files.insert(files.begin(), "mojo_cpu.cuh");
    std::shared_lock lock(templates_mutex);
    return templates.expand(files);
  }
  Unit unit(const Specialization& s, const Target& target, Emit emit) {
    return specialization_unit(s, expand({std::string(s.op->template_file())}, emit), target,
                               compiler_for(emit).identity(), emit);
  }

  // The unit's binary: from the cache, else compiled (and `*compiled` set). `program`: the template file, or
  // "bundle.cu"; a dump's files are named after it (a bundle) or the first kernel.
  std::shared_ptr<const std::string> binary(const Unit& u, std::string_view program, const Target& target, Emit emit,
                                            bool* compiled, unsigned jobs = 1) {
    const std::string_view name = program == kBundleProgram ? "bundle" : std::string_view(u.kernels.front());
    const std::string stem = fmt::format("{}.{}.{}", name, target.sm_name(), u.key.hex().substr(0, 8));
    return cache.get(CacheRequest{u.key, emit, u.description, u.meta, u.components}, [&] {
      CompileRequest request{program, u.source, target, emit, u.description, jobs};
      request.time_stages = options.time_compile_stages;
      CompileResult result =
          compile_dumped(compiler_for(emit), request, dump_dir, stem, u.meta + fmt::format("key={}\n", u.key.hex()));
      std::lock_guard lock(stage_mutex);
      for (int i = 0; i < kCompileStages; ++i) stage_seconds[std::size_t(i)] += result.stage_ms[std::size_t(i)] * 1e-3;
      return std::move(result.binary);
    }, compiled);
  }

  Params tuned(const OpDef& op, const Params& params, TensorList tensors, ScalarList scalars, const Target& target,
               StreamHandle stream);

  // The kernels of `s` loaded on the device (`key`: its fast key), compiled or read from the cache first.
  const LoadedKernel& load(const Specialization& s, const Target& target, const FastKey& key) {
    const Device& dev = open_device();
    const Emit emit = dev.is_cpu() ? Emit::host : Emit::cubin;
    const Unit u = unit(s, target, emit);
    bool compiled = false;
    auto bin = binary(u, s.op->template_file(), target, emit, &compiled);
    std::lock_guard lock(load_mutex);
    {
      std::shared_lock read(loaded_mutex);
      if (auto it = loaded.find(key); it != loaded.end()) return *it->second;  // another thread was first
    }
    dev.ensure_current();
    const XXH128_hash_t h = XXH3_128bits(bin->data(), bin->size());
    std::weak_ptr<const Module>& slot = modules[FastKey{h.high64, h.low64}];
    std::shared_ptr<const Module> module = slot.lock();
    if (!module) {
      module = std::make_shared<const Module>(Module::load(*bin));
      slot = module;
    }
    const bool overlap = programmatic_dependent_launch && dev.target().sm >= 90;
    auto kernel =
        std::make_unique<LoadedKernel>(LoadedKernel{std::move(module), {}, &dev, debug_checks, overlap, s.params});
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      Function function = kernel->module->function(u.kernels[i]);
      if (const unsigned smem = s.op->max_dynamic_smem(s.steps[i]); smem > 48 * 1024)
        function.set_max_dynamic_shared(int(smem));
      kernel->steps.push_back({u.kernels[i], function, s.steps[i]});
    }
    std::unique_lock write(loaded_mutex);
    return *loaded.emplace(key, std::move(kernel)).first->second;
  }

  // The kernel launches of `op` with these tensors and scalars run: already loaded (a memory hit), else
  // loaded now, autotuned first when autotuning is on. `params`: what specialize() derived.
  const LoadedKernel& find_or_load(const OpDef& op, const Params& params, TensorList tensors, ScalarList scalars,
                                   const Target& target, StreamHandle stream) {
    const FastKey key = fast_key(&op, params, target);
    {
      std::shared_lock read(loaded_mutex);
      if (auto it = loaded.find(key); it != loaded.end()) {
        memory_hits.fetch_add(1, std::memory_order_relaxed);
        return *it->second;
      }
    }
    return load(Specialization(op, tuned(op, params, tensors, scalars, target, stream)), target, key);
  }
};

// With autotuning on and more than one candidate for tensors that may be
// launched repeatedly: the fastest candidate (runtime/autotune.hpp); else
// the heuristic's `params`.
Params Runtime::Impl::tuned(const OpDef& op, const Params& params, TensorList tensors, ScalarList scalars,
                            const Target& target, StreamHandle stream) {
  const Tunable* tunable = op.tuning();
  if (!autotune || tunable == nullptr) return params;
  const std::vector<Params> candidates = tunable->candidates(params, tensors, scalars, target);
  if (candidates.size() < 2 || !tunable->safe(tensors, scalars)) return params;
  const Device& dev = open_device();
  const std::string what = fmt::format("{} {{{}}} {} on {} ({})", op.name(), params.str(), tunable->bucket(tensors),
                                       dev.name(), target.sm_name());
  return autotune::fastest(cache, what, compiler->identity(), candidates, stream, [&](const Params& p) {
    const LoadedKernel& kernel = load(Specialization(op, p), target, fast_key(&op, p, target));
    auto binding = std::make_shared<const Binding>(op, kernel, workspace, tensors, scalars, stream);
    return [&, binding] { binding->launch(tensors, scalars, stream); };
  });
}

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  // Buffers and streams made on a thread with no device current go to this Runtime's device.
  Device::set_default(device_spec(impl_->options));
  // The cpu device costs nothing to open: it is current at once, so the buffers made next live on it.
  if (device_spec(impl_->options).starts_with("cpu")) impl_->open_device();
}
Runtime::~Runtime() = default;

void Runtime::launch(std::string_view op_name, TensorList tensors, ScalarList scalars, StreamHandle stream) {
  const OpDef& op = find_op(op_name);
  RecentBinding& recent = t_recent.slots[RecentBindings::slot(&op, tensors)];
  const std::uint64_t generation = impl_->generation.load(std::memory_order_acquire);
  if (recent.runtime == impl_->id && recent.generation == generation && recent.binding->op == &op &&
      recent.binding->matches(tensors, scalars)) {
    impl_->memory_hits.fetch_add(1, std::memory_order_relaxed);
    return recent.binding->launch(tensors, scalars, stream);
  }
  const Target target = device().target();
  const LoadedKernel* kernel =
      &impl_->find_or_load(op, op.specialize(tensors, scalars, target), tensors, scalars, target, stream);
  // A slot that holds a live binding keeps it: a caller that varies a scalar on every call, or two shapes
  // sharing a slot, take this path each time rather than allocate a binding each time.
  if (recent.runtime == impl_->id && recent.generation == generation)
    return launch_unbound(op, *kernel, impl_->workspace, tensors, scalars, stream);
  recent = RecentBinding{impl_->id, generation,
                         std::make_shared<const Binding>(op, *kernel, impl_->workspace, tensors, scalars, stream)};
  recent.binding->launch(tensors, scalars, stream);
}

KernelHandle Runtime::get_kernel(std::string_view op_name, TensorList tensors, ScalarList scalars) {
  const OpDef& op = find_op(op_name);
  const Target target = device().target();
  const Params params = op.specialize(tensors, scalars, target);
  const LoadedKernel& kernel = impl_->find_or_load(op, params, tensors, scalars, target, nullptr);
  return KernelHandle(&op, &kernel, params, target,
                      std::make_shared<const Binding>(op, kernel, impl_->workspace, tensors, scalars, nullptr));
}

Artifact Runtime::compile(std::string_view op_name, TensorList tensors, ScalarList scalars, const Target& target,
                          Emit emit) {
  const OpDef& op = find_op(op_name);
  const Specialization s(op, op.specialize(tensors, scalars, target));
  const Unit u = impl_->unit(s, target, emit);
  Artifact a;
  a.op = std::string(op.name());
  a.params = s.params;
  a.target = target;
  a.emit = emit;
  a.kernel_name = u.kernels.front();
  a.kernels = u.kernels;
  a.workspace_bytes = op.workspace_bytes(s.params, tensors);
  a.key = u.key;
  a.binary = impl_->binary(u, op.template_file(), target, emit, &a.compiled);
  if (emit == Emit::cubin) a.resources = kernel_resources(*a.binary, a.kernel_name);
  return a;
}

PrewarmResult Runtime::prewarm(const std::vector<PrewarmItem>& items, Emit emit, int jobs,
                               const PrewarmProgress& progress) {
  const auto start = std::chrono::steady_clock::now();
  PrewarmResult result;
  std::mutex m;  // guards result and progress calls
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  // Each process starts at its own place in the list, so that N processes
  // prewarming one directory at once compile different keys instead of
  // queueing on the same lock.
  const std::size_t offset = items.empty() ? 0 : std::hash<int>{}(::getpid()) * 2654435761u % items.size();
  auto worker = [&] {
    for (std::size_t n; (n = next.fetch_add(1)) < items.size();) {
      const PrewarmItem& item = items[(n + offset) % items.size()];
      std::string error;
      bool compiled = false;
      try {
        compiled = compile(item.op, item.tensors, item.scalar_args(), item.target, emit).compiled;
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard lock(m);
      if (!error.empty()) {
        ++result.failed;
        result.failures.push_back(fmt::format("{}: {}", item.label, error));
      } else {
        ++(compiled ? result.compiled : result.cached);
      }
      if (progress) progress(++done, items.size(), item, error.empty());
    }
  };
  unsigned n = jobs > 0 ? unsigned(jobs) : std::max(1u, std::thread::hardware_concurrency());
  n = std::min<unsigned>(n, unsigned(std::max<std::size_t>(items.size(), 1)));
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<Bundle> Runtime::compile_all(const std::vector<PrewarmItem>& items, Emit emit, int jobs) {
  const unsigned threads = jobs > 0 ? unsigned(jobs) : std::max(1u, std::thread::hardware_concurrency());
  std::vector<Target> targets;
  for (const PrewarmItem& item : items)
    if (std::find(targets.begin(), targets.end(), item.target) == targets.end()) targets.push_back(item.target);

  std::vector<Bundle> bundles;
  for (const Target& target : targets) {
    std::vector<Specialization> specs;  // those that add a kernel
    std::vector<std::string> files, names, params;
    std::string entries;  // one entry line per kernel, after the templates
    for (const PrewarmItem& item : items) {
      if (!(item.target == target)) continue;
      const OpDef& op = find_op(item.op);
      Specialization s(op, op.specialize(item.tensors, item.scalar_args(), target));
      // A specialization whose kernels are all here already (rows etc. do not matter) adds nothing; plans may
      // share kernels (moe_mlp's sort step is the same for f16 and bf16): each is defined once.
      bool adds = false;
      for (const Params& step : s.steps) {
        std::string name = op.kernel_name(step);
        if (std::find(names.begin(), names.end(), name) != names.end()) continue;
        names.push_back(std::move(name));
        params.push_back(step.str());
        entries += entry_text(op, step, emit);
        adds = true;
      }
      if (!adds) continue;
      if (std::find(files.begin(), files.end(), op.template_file()) == files.end())
        files.emplace_back(op.template_file());
      specs.push_back(std::move(s));
    }
    // One translation unit: every template (the prelude once), then one entry line per kernel.
    const Unit u = bundle_unit(impl_->expand(files, emit) + entries, names, params, target,
                               impl_->compiler_for(emit).identity(), emit);
    Bundle b;
    b.target = target;
    b.emit = emit;
    b.kernels = u.kernels;
    b.key = u.key;
    b.binary = impl_->binary(u, kBundleProgram, target, emit, &b.compiled, threads);
    // Index every kernel of the bundle under its own single-kernel key.
    for (const Specialization& s : specs) {
      const Unit single = impl_->unit(s, target, emit);
      impl_->cache.alias(single.key, emit, b.key, b.binary, single.meta + fmt::format("bundle={}\n", b.key.hex()));
    }
    bundles.push_back(std::move(b));
  }
  return bundles;
}

KernelKey Runtime::key(std::string_view op_name, TensorList tensors, ScalarList scalars, const Target& target,
                       Emit emit) {
  return key_parts(op_name, tensors, scalars, target, emit).key;
}

Runtime::KeyParts Runtime::key_parts(std::string_view op_name, TensorList tensors, ScalarList scalars,
                                     const Target& target, Emit emit) {
  const OpDef& op = find_op(op_name);
  const Specialization s(op, op.specialize(tensors, scalars, target));
  Unit u = impl_->unit(s, target, emit);
  return KeyParts{std::move(u.source), u.kernels.front(), s.params.str(), target.sm_name(),
                  impl_->compiler_for(emit).identity(), emit, u.key};
}

CacheStats Runtime::stats() const {
  CacheStats s = impl_->cache.stats();
  s.memory_hits = impl_->memory_hits;
  std::lock_guard lock(impl_->stage_mutex);
  s.compile_stage_seconds = impl_->stage_seconds;
  return s;
}

fs::path Runtime::cache_dir() const { return impl_->cache.writable_dir().value_or(fs::path()); }

const Compiler& Runtime::compiler() const { return *impl_->compiler; }
const TemplateRegistry& Runtime::templates() const { return impl_->templates; }

void Runtime::add_template_path(fs::path dir) {
  {
    std::unique_lock lock(impl_->templates_mutex);
    impl_->templates.add_search_path(std::move(dir));
  }
  impl_->cache.forget_memory();
  std::lock_guard load(impl_->load_mutex);
  std::unique_lock write(impl_->loaded_mutex);
  for (auto& [key, kernel] : impl_->loaded) impl_->retired.push_back(std::move(kernel));
  impl_->loaded.clear();
  // After the clear: a launch that reads the new generation finds only kernels of the new templates.
  impl_->generation.fetch_add(1, std::memory_order_release);
}

const Device& Runtime::device() {
  if (const Device* d = impl_->device_ready.load(std::memory_order_acquire)) return *d;
  return impl_->open_device();
}

// ---- KernelHandle -----------------------------------------------------------

void KernelHandle::launch(TensorList tensors, ScalarList scalars, StreamHandle stream) const {
  if (binding_->matches(tensors, scalars)) return binding_->launch(tensors, scalars, stream);
  const Params params = op_->specialize(tensors, scalars, target_);
  if (!(params == params_))
    throw InvalidArgumentError(fmt::format("{}: this handle runs {{{}}} but these tensors need {{{}}}; get a "
                                           "handle for them with Runtime::get_kernel",
                                           op_->name(), params_.str(), params.str()));
  launch_unbound(*op_, *kernel_, *binding_->arena, tensors, scalars, stream);
}

const Function& KernelHandle::function() const noexcept { return kernel_->steps.front().function; }
const std::string& KernelHandle::kernel_name() const noexcept { return kernel_->steps.front().name; }

}  // namespace mojo
