// The layered kernel cache the runtime compiles through:
//
//   memory -> writable cache dir -> read-only cache dirs -> compile (then store)
//
// Concurrent requests for one key share a single lookup and compile: threads
// through an in-flight table, processes through a per-key flock. When the
// writable directory cannot be used the cache keeps working from memory and
// says so once. Offline mode turns a miss into CacheMissError.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/remote.hpp"
#include "mojo/cache.hpp"

namespace mojo {

struct CacheOptions {
  std::optional<std::filesystem::path> dir;           // the writable layer; none: memory only
  std::vector<std::filesystem::path> readonly_dirs;  // never written, never evicted
  bool offline = false;
  std::uint64_t max_bytes = std::uint64_t(1) << 30;
  bool trust_any_dir = false;  // skip the ownership/permission check (loading a cubin runs code)
  std::chrono::milliseconds lock_timeout{120000};
  std::string remote;  // the shared tier's URL (redis://HOST:PORT[/DB]); empty: none
};

struct CacheRequest {
  KernelKey key;
  EntryKind kind = Emit::cubin;
  std::string_view description;  // "rms_norm {dtype=bf16 ...} for sm_90 (cubin)": what, for logs and errors
  std::string_view meta;         // stored in the entry's header block
  // The key's inputs that are not in `description` ("source=<hash>\ncompiler=<id>\n"):
  // remembered per description, so that a compile can say which one changed.
  std::string_view components;
};

class KernelCache {
 public:
  using Binary = std::shared_ptr<const std::string>;
  explicit KernelCache(CacheOptions options);

  // The artifact for `request`, compiling with `compile` only when no layer
  // has it. `*compiled` tells whether this call compiled.
  std::shared_ptr<const std::string> get(const CacheRequest& request, const std::function<std::string()>& compile,
                                         bool* compiled);
  // Records that the kernel with `kernel_key` lives in `bundle` (already in
  // the cache under `bundle_key`): later lookups of the kernel get the bundle,
  // here and, through the remote tier, on the fleet's other machines.
  void alias(const KernelKey& kernel_key, EntryKind kind, const KernelKey& bundle_key, const Binary& bundle,
             std::string_view meta);
  CacheStats stats() const;
  std::optional<std::filesystem::path> writable_dir() const;
  void forget_memory();  // drops the in-memory layer (disk layers stay)


 private:
  struct KeyHash {
    std::size_t operator()(const KernelKey& k) const noexcept { return k.low; }
  };

  Binary lookup_disk(const CacheRequest& request, std::string* problem);
  // The remote tier's entry, checked; stored in the local layers on a hit. A corrupt value is reported,
  // deleted, and recompiled (then written again). An alias there is followed to its bundle.
  Binary lookup_remote(const CacheRequest& request);
  Binary lookup_remote_bundle(const CacheRequest& request, const KernelKey& bundle, std::string_view alias_meta);
  std::string compile_cause(const CacheRequest& request, const std::string& problem) const;
  void remember_components(const CacheRequest& request) const;
  // Compiles under the key's cross-process lock, unless another process
  // stored the entry meanwhile; `*compiled` says which.
  Binary compile_and_store(const CacheRequest& request, const std::function<std::string()>& compile,
                           const std::string& corrupt, bool* compiled);
  void store(const CacheRequest& request, const std::string& payload);
  void disable_disk(const std::string& why);
  std::shared_ptr<const DiskCache> disk() const;

  CacheOptions options_;
  mutable std::mutex mutex_;  // guards everything below but the counters
  std::unordered_map<KernelKey, std::shared_future<Binary>, KeyHash> memory_;
  std::shared_ptr<const DiskCache> disk_;
  std::vector<DiskCache> readonly_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> stamped_;  // keys whose last-used stamp this process set
  std::optional<std::uint64_t> disk_bytes_;                   // estimate, for the size cap
  bool warned_lock_ = false;

  std::unique_ptr<RemoteCache> remote_;
  std::atomic<std::uint64_t> remote_hits_{0};
  std::atomic<std::uint64_t> disk_hits_{0}, readonly_hits_{0}, misses_{0}, compiles_{0}, bad_entries_{0},
      evicted_{0}, lock_waits_{0};
  std::atomic<std::int64_t> compile_ns_{0};
};

}  // namespace mojo
