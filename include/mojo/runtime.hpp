// The Runtime glues ops -> cache -> compiler -> device:
//
//   mojo::Runtime rt;
//   rt.launch("rms_norm", {out, x, w}, {{"eps", 1e-6f}}, stream);
//
// The first call for a new specialization compiles (or loads from the disk
// cache); later calls cost a hash lookup and a cuLaunchKernel, with no
// allocation, formatting or file-system access. Everything but launching
// works without a GPU: compile() takes an explicit target.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/cache.hpp"
#include "mojo/compiler.hpp"
#include "mojo/device.hpp"
#include "mojo/manifest.hpp"
#include "mojo/op.hpp"
#include "mojo/templates.hpp"

namespace mojo {

// Every option has an environment variable too (README, "Environment");
// an option set here wins over the environment.
struct RuntimeOptions {
  std::filesystem::path cache_dir;  // empty: DiskCache::default_dir()
  bool disk_cache = true;           // false: memory only (also MOJO_JIT_DISABLE_DISK_CACHE=1)
  // Looked up after cache_dir, never written (also MOJO_JIT_CACHE_READONLY_DIRS, ':'-separated).
  std::vector<std::filesystem::path> readonly_cache_dirs;
  bool offline = false;             // a miss throws CacheMissError (also MOJO_JIT_OFFLINE=1)
  // A fleet's shared cache tier, redis://HOST:PORT[/DB]: looked up after the local layers, written after a
  // compile (also MOJO_JIT_REMOTE). Failures degrade to local work with one warning.
  std::string remote_cache;
  std::uint64_t cache_max_bytes = 0;  // 0: $MOJO_JIT_CACHE_MAX_BYTES, else 1 GiB
  bool trust_cache_dir = false;     // use a cache dir others can write (also MOJO_JIT_CACHE_TRUST=1)
  std::string compiler;             // empty: $MOJO_JIT_COMPILER, else "nvrtc"
  std::vector<std::filesystem::path> template_paths;  // searched before $MOJO_JIT_TEMPLATE_PATH
  std::filesystem::path dump_dir;   // empty: $MOJO_JIT_DUMP; writes each compile's source and output
  // Where launches run: "cuda" (GPU 0), "cuda:N", or "cpu" / "cpu:ARCH" (the
  // emulator, sm_80 by default, e.g. cpu:sm_90a). Empty: $MOJO_JIT_DEVICE, else "cuda".
  std::string device;
  // Before each launch, ops that index memory with data (embedding ids,
  // rotary positions, KV slots) read it back and throw InvalidArgumentError
  // for a value out of range; after a cooperative one, the Runtime checks
  // that its kernels left their sync words zero (OpDef::sync_words).
  // Synchronizes the stream: for debugging only (also MOJO_JIT_DEBUG_CHECKS=1).
  bool debug_checks = false;
  // On a specialization's first launch, time the op's candidate configs
  // (GEMM tiles) on the real tensors and keep the fastest; the choice is
  // stored in the cache per device, op, params and shape bucket, so later
  // processes skip the timing (also MOJO_JIT_AUTOTUNE=1).
  bool autotune = false;
  // Launch on sm_90+ GPUs with programmatic dependent launch: each kernel may start while the one before it
  // in the stream finishes, and waits for it on the GPU (mojo::after_previous_kernels), so that one kernel's
  // launch and ramp hide under the tail of the one before: for plans of several steps and short kernels in a
  // graph. Off by default until measured (also MOJO_JIT_PDL=1).
  bool programmatic_dependent_launch = false;
  // NVRTC reports its phases' times too (CacheStats::compile_stage_seconds; LLVM always does), through a
  // temporary file a compile: for benchmarks.
  bool time_compile_stages = false;
};

// One compiled specialization, as compile() returns it.
struct Artifact {
  std::string op;
  Params params;
  Target target;
  Emit emit = Emit::cubin;
  std::string kernel_name;           // the first kernel's
  std::vector<std::string> kernels;  // every kernel of the op's plan, in launch order (most ops: one)
  std::size_t workspace_bytes = 0;   // scratch memory the plan needs for these shapes (OpDef::workspace_bytes)
  KernelKey key;
  std::shared_ptr<const std::string> binary;  // PTX text or cubin bytes (all the plan's kernels in one module)
  bool compiled = false;  // false: it came from the cache
  KernelResources resources;  // the first kernel's registers, shared memory, stack: cubin only (zeros for PTX and IR)
};

struct PrewarmResult {
  std::size_t compiled = 0, cached = 0, failed = 0;
  double seconds = 0;
  std::vector<std::string> failures;  // "<label>: <error>"
};
// Called after each item (serialized): items done, total, the item, whether it succeeded.
using PrewarmProgress = std::function<void(std::size_t, std::size_t, const PrewarmItem&, bool)>;

// One module holding many kernels (compile_all).
struct Bundle {
  Target target;
  Emit emit = Emit::cubin;
  KernelKey key;
  std::vector<std::string> kernels;            // their names in the module
  std::shared_ptr<const std::string> binary;   // PTX text or cubin bytes
  bool compiled = false;                       // false: it came from the cache
};

struct LoadedKernel;
struct Binding;

// A specialization resolved once. Launched with tensors of the shapes,
// strides and dtypes it was resolved for (and pointers aligned at least as
// well) and the same scalars, it reuses everything: no specialization, no
// allocation, no lookup, nothing from the driver but the launch. Other
// tensors are specialized again and must give the same kernel (a different
// hidden size or alignment throws rather than running the wrong kernel).
// Valid while its Runtime lives.
class KernelHandle {
 public:
  void launch(TensorList tensors, ScalarList scalars = {}, StreamHandle stream = nullptr) const;
  const Function& function() const noexcept;
  const Params& params() const noexcept { return params_; }
  const std::string& kernel_name() const noexcept;

 private:
  friend class Runtime;
  KernelHandle(const OpDef* op, const LoadedKernel* kernel, Params params, Target target,
               std::shared_ptr<const Binding> binding)
      : op_(op), kernel_(kernel), params_(params), target_(target), binding_(std::move(binding)) {}
  const OpDef* op_;
  const LoadedKernel* kernel_;
  Params params_;
  Target target_;
  std::shared_ptr<const Binding> binding_;  // what it was resolved for
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Specializes, compiles or loads on first use, and launches on `stream`.
  void launch(std::string_view op, TensorList tensors, ScalarList scalars = {},
              StreamHandle stream = nullptr);
  // Resolves a specialization now; the handle launches with no lookup.
  KernelHandle get_kernel(std::string_view op, TensorList tensors, ScalarList scalars = {});

  // Compiles (or finds in the cache) one specialization for an explicit
  // target: no GPU needed. Tensors may have data == 0.
  Artifact compile(std::string_view op, TensorList tensors, ScalarList scalars, const Target& target,
                   Emit emit);
  // Compiles every item on `jobs` threads (0: one per core), no GPU needed.
  // Idempotent: items already in a cache layer count as cached.
  PrewarmResult prewarm(const std::vector<PrewarmItem>& items, Emit emit = Emit::cubin, int jobs = 0,
                        const PrewarmProgress& progress = {});
  // All distinct specializations of `items` compiled together: one module per
  // target, one front-end parse and one optimisation run (LLVM then splits the
  // back end over `jobs` threads; 0: one per core). The cache then answers a
  // lookup of any one of these kernels with its bundle, compiling nothing.
  std::vector<Bundle> compile_all(const std::vector<PrewarmItem>& items, Emit emit = Emit::cubin, int jobs = 0);
  // The key compile() would use, without compiling.
  KernelKey key(std::string_view op, TensorList tensors, ScalarList scalars, const Target& target,
                Emit emit);
  // Everything that went into that key (to see why a lookup missed).
  struct KeyParts {
    std::string source;  // the whole translation unit
    std::string kernel, params, target, compiler;
    Emit emit;
    KernelKey key;
  };
  KeyParts key_parts(std::string_view op, TensorList tensors, ScalarList scalars, const Target& target, Emit emit);

  CacheStats stats() const;
  // Empty when the disk cache is off.
  std::filesystem::path cache_dir() const;
  const Compiler& compiler() const;
  const TemplateRegistry& templates() const;
  // Searches `dir` for templates before every other place. Specializations
  // resolved so far are looked up again (their keys may change); handles
  // already given out stay valid.
  void add_template_path(std::filesystem::path dir);
  // The device launches go to; opened on first use (throws NoDeviceError
  // when it is a GPU and there is none).
  const Device& device();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mojo
