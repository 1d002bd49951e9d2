#include "cache/kernel_cache.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "cache/entry.hpp"
#include "core/log.hpp"
#include "mojo/error.hpp"

namespace mojo {

// How long a fleet-wide claim on compiling a key lives if its holder dies without releasing it.
constexpr std::chrono::milliseconds kRemoteClaimExpiry{30000};
namespace fs = std::filesystem;

KernelCache::KernelCache(CacheOptions options) : options_(std::move(options)) {
  if (options_.dir) {
    std::string why = options_.trust_any_dir ? std::string() : untrusted_reason(*options_.dir);
    if (why.empty())
      disk_ = std::make_shared<const DiskCache>(*options_.dir);
    else
      log::warn(fmt::format("refusing the cache directory: {}; kernels stay in memory (set MOJO_JIT_CACHE_TRUST=1 "
                            "to use it anyway: loading a cubin runs its code)",
                            why));
  }
  for (const fs::path& dir : options_.readonly_dirs) {
    std::string why = options_.trust_any_dir ? std::string() : untrusted_reason(dir);
    if (why.empty())
      readonly_.emplace_back(dir);
    else
      log::warn(fmt::format("refusing the read-only cache directory: {}", why));
  }
  if (!options_.remote.empty()) remote_ = std::make_unique<RemoteCache>(options_.remote);  // connects on first use
}

std::shared_ptr<const DiskCache> KernelCache::disk() const {
  std::lock_guard lock(mutex_);
  return disk_;
}

std::optional<fs::path> KernelCache::writable_dir() const {
  auto d = disk();
  return d ? std::optional<fs::path>(d->dir()) : std::nullopt;
}

void KernelCache::forget_memory() {
  std::lock_guard lock(mutex_);
  memory_.clear();
}

void KernelCache::disable_disk(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!disk_) return;
  disk_.reset();
  log::warn(fmt::format("{}; the disk cache is off for this process, kernels stay in memory", why));
}

std::shared_ptr<const std::string> KernelCache::get(const CacheRequest& request,
                                                    const std::function<std::string()>& compile, bool* compiled) {
  *compiled = false;
  std::promise<Binary> promise;
  for (;;) {
    std::unique_lock lock(mutex_);
    auto it = memory_.find(request.key);
    if (it == memory_.end()) {
      memory_.emplace(request.key, promise.get_future().share());
      break;
    }
    std::shared_future<Binary> pending = it->second;
    lock.unlock();
    // Another thread has it or is making it: wait and share the result. A
    // failure is published as null (exceptions are not shared across
    // threads); then this thread tries itself and gets its own error.
    if (Binary result = pending.get()) return result;
  }
  try {
    std::string problem;
    Binary result = lookup_disk(request, &problem);
    if (!result) result = lookup_remote(request);
    if (!result) result = compile_and_store(request, compile, problem, compiled);
    promise.set_value(result);
    return result;
  } catch (...) {
    {
      std::lock_guard lock(mutex_);
      memory_.erase(request.key);  // a later call tries again
    }
    promise.set_value(nullptr);
    throw;
  }
}

KernelCache::Binary KernelCache::lookup_disk(const CacheRequest& request, std::string* corrupt) {
  auto hit = [&](std::string payload) { return std::make_shared<const std::string>(std::move(payload)); };
  if (auto d = disk()) {
    std::string problem;
    if (auto payload = d->load(request.key, request.kind, &problem)) {
      ++disk_hits_;
      bool first_use;
      {
        std::lock_guard lock(mutex_);
        first_use = stamped_.emplace(request.key.high, request.key.low).second;
      }
      if (first_use) d->touch(request.key, request.kind);  // last-used stamp, once per process
      log::debug(fmt::format("disk hit for {}", request.description));
      return hit(std::move(*payload));
    }
    if (!problem.empty()) {
      ++bad_entries_;
      log::warn(fmt::format("unusable cache entry for {}: {}; recompiling", request.description, problem));
      *corrupt = problem;
    }
  }
  for (const DiskCache& layer : readonly_) {
    std::string problem;
    if (auto payload = layer.load(request.key, request.kind, &problem, /*remove_bad=*/false)) {
      ++readonly_hits_;
      log::debug(fmt::format("read-only hit for {} in {}", request.description, layer.dir().string()));
      return hit(std::move(*payload));
    }
    if (!problem.empty()) {
      ++bad_entries_;
      log::warn(fmt::format("unusable entry in read-only cache for {}: {}", request.description, problem));
    }
  }
  return nullptr;
}

KernelCache::Binary KernelCache::lookup_remote(const CacheRequest& request) {
  if (!remote_) return nullptr;
  std::optional<std::string> value = remote_->get(request.key, request.kind);
  if (!value) return nullptr;
  entry::Header h{};
  std::string problem = entry::check(*value, &request.key, &request.kind, &h);
  std::optional<KernelKey> bundle;
  if (problem.empty() && entry::is_alias(h) && !(bundle = entry::alias_target(*value, h)))
    problem = "an alias that names no valid bundle key";
  if (!problem.empty()) {
    ++bad_entries_;
    log::warn(fmt::format("unusable entry in the remote cache for {}: {}; deleted, recompiling", request.description,
                          problem));
    remote_->remove(request.key, request.kind);
    return nullptr;
  }
  if (bundle) return lookup_remote_bundle(request, *bundle, entry::meta_of(*value, h));
  ++remote_hits_;
  log::debug(fmt::format("remote hit for {}", request.description));
  auto payload = std::make_shared<const std::string>(entry::payload_of(*value, h));
  store(request, *payload);  // the next process on this machine finds it on disk
  return payload;
}

// The kernel of `request` lives in `bundle`'s module (a remote alias named it): that module, stored here with
// the alias so the next process on this machine finds both on disk. A missing bundle is a plain miss.
KernelCache::Binary KernelCache::lookup_remote_bundle(const CacheRequest& request, const KernelKey& bundle,
                                                      std::string_view alias_meta) {
  std::optional<std::string> value = remote_->get(bundle, request.kind);
  if (!value) return nullptr;
  entry::Header h{};
  std::string problem = entry::check(*value, &bundle, &request.kind, &h);
  if (problem.empty() && entry::is_alias(h)) problem = "an alias where a bundle should be";
  if (!problem.empty()) {
    ++bad_entries_;
    log::warn(fmt::format("unusable bundle {} in the remote cache for {}: {}; deleted, recompiling", bundle.hex(),
                          request.description, problem));
    remote_->remove(bundle, request.kind);
    return nullptr;
  }
  ++remote_hits_;
  log::debug(fmt::format("remote hit for {} in bundle {}", request.description, bundle.hex()));
  auto payload = std::make_shared<const std::string>(entry::payload_of(*value, h));
  if (auto d = disk()) {
    try {
      d->store(bundle, request.kind, entry::meta_of(*value, h), *payload);
      d->store_alias(request.key, request.kind, bundle, alias_meta);
    } catch (const Error& e) {
      disable_disk(e.what());
    }
  }
  return payload;
}

// Why this compile happens, for MOJO_JIT_LOG=info: the entry was corrupt, the
// specialization was never compiled here, or its key changed, and how.
std::string KernelCache::compile_cause(const CacheRequest& request, const std::string& corrupt) const {
  if (!corrupt.empty()) return "the cached entry was corrupt";
  auto d = disk();
  if (!d) return "no disk cache";
  std::ifstream in(d->index_path(request.description));
  if (!in) return "first use";
  std::stringstream before;
  before << in.rdbuf();
  if (before.str() == request.components) return "not in the cache (evicted or cleared)";
  // Name each component whose line differs.
  std::vector<std::string> changed;
  std::stringstream old_lines(before.str()), new_lines{std::string(request.components)};
  for (std::string a, b; std::getline(new_lines, b);) {
    if (!std::getline(old_lines, a)) a.clear();
    if (a != b) changed.push_back(fmt::format("{} (was {})", b, a.empty() ? "absent" : a.substr(a.find('=') + 1)));
  }
  return fmt::format("key changed: {}", fmt::join(changed, ", "));
}

void KernelCache::remember_components(const CacheRequest& request) const {
  if (auto d = disk()) d->write_index(request.description, request.components);
}

KernelCache::Binary KernelCache::compile_and_store(const CacheRequest& request,
                                                   const std::function<std::string()>& compile,
                                                   const std::string& corrupt, bool* compiled) {
  ++misses_;
  if (options_.offline)
    throw CacheMissError(fmt::format("{}: not in any cache layer, and offline mode (MOJO_JIT_OFFLINE) forbids "
                                     "compiling; prewarm it with `mojo-jit prewarm`",
                                     request.description));
  KeyLock lock;
  if (auto d = disk()) {
    lock = d->lock(request.key, request.kind, options_.lock_timeout);
    if (lock.waited()) ++lock_waits_;
    switch (lock.status()) {
      case KeyLock::Status::held: break;
      case KeyLock::Status::failed: disable_disk(lock.problem()); break;
      case KeyLock::Status::timed_out: log::warn(lock.problem()); break;
      case KeyLock::Status::unsupported: {
        std::lock_guard guard(mutex_);
        if (!warned_lock_) log::warn(lock.problem());  // once: it holds for every key
        warned_lock_ = true;
      }
    }
    // Look again under the lock: another process may have stored the entry
    // between our first look and taking the lock (whether or not we waited).
    if (auto payload = d->load(request.key, request.kind)) {
      ++disk_hits_;
      return std::make_shared<const std::string>(std::move(*payload));
    }
  }
  // Across the fleet: one process claims the key in the remote tier and compiles; the others wait for its
  // entry there (until the claim is released or expires, or the lock timeout), then compile only if it did not
  // come.
  bool claimed = false;
  if (remote_) {
    const auto deadline = std::chrono::steady_clock::now() + options_.lock_timeout;
    while (!(claimed = remote_->claim(request.key, request.kind, kRemoteClaimExpiry))) {
      if (Binary found = lookup_remote(request)) return found;
      if (!remote_->claimed(request.key, request.kind) || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (Binary found = lookup_remote(request)) {  // stored between our first look and the claim
      if (claimed) remote_->release(request.key, request.kind);
      return found;
    }
  }
  struct Release {  // the claim, when this process holds it: released after the entry is written, or on a failure
    RemoteCache* remote;
    const CacheRequest& request;
    ~Release() {
      if (remote) remote->release(request.key, request.kind);
    }
  } release{claimed ? remote_.get() : nullptr, request};
  const bool is_compile = request.kind != EntryKind::tuning();  // a tuning record is timed, not compiled
  if (is_compile && log::enabled(log::Level::info))
    log::info(fmt::format("compiling {}: {}", request.description, compile_cause(request, corrupt)));
  auto start = std::chrono::steady_clock::now();
  auto result = std::make_shared<const std::string>(compile());
  if (is_compile) {
    compile_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    ++compiles_;
  }
  *compiled = true;
  store(request, *result);
  if (remote_) remote_->put(request.key, request.kind, entry::encode(request.key, request.kind, request.meta, *result));
  remember_components(request);
  return result;
}

void KernelCache::store(const CacheRequest& request, const std::string& payload) {
  auto d = disk();  // may have been turned off meanwhile
  if (!d) return;
  try {
    d->store(request.key, request.kind, request.meta, payload);
  } catch (const Error& e) {
    disable_disk(e.what());  // e.g. ENOSPC or a read-only directory: this process goes on from memory
    return;
  }
  // Size cap: keep a running estimate; scan and evict only when it passes the cap.
  std::lock_guard lock(mutex_);
  if (!disk_bytes_) disk_bytes_ = d->usage().bytes;
  else *disk_bytes_ += payload.size() + request.meta.size() + 64;
  if (*disk_bytes_ > options_.max_bytes) {
    std::size_t removed = d->prune(options_.max_bytes / 10 * 9);
    evicted_ += removed;
    disk_bytes_ = d->usage().bytes;
    log::info(fmt::format("evicted {} least-recently-used entries from {} (cap {} bytes)", removed,
                          d->dir().string(), options_.max_bytes));
  }
}

void KernelCache::alias(const KernelKey& kernel_key, EntryKind kind, const KernelKey& bundle_key, const Binary& bundle,
                        std::string_view meta) {
  {
    std::lock_guard lock(mutex_);
    if (!memory_.count(kernel_key)) {
      std::promise<Binary> ready;
      ready.set_value(bundle);
      memory_.emplace(kernel_key, ready.get_future().share());
    }
  }
  if (auto d = disk()) {
    try {
      d->store_alias(kernel_key, kind, bundle_key, meta);
    } catch (const Error& e) {
      disable_disk(e.what());
    }
  }
  if (remote_) remote_->put(kernel_key, kind, entry::encode_alias(kernel_key, kind, meta, bundle_key));
}

CacheStats KernelCache::stats() const {
  CacheStats s;
  s.disk_hits = disk_hits_;
  s.readonly_hits = readonly_hits_;
  s.remote_hits = remote_hits_;
  s.misses = misses_;
  s.compiles = compiles_;
  s.bad_entries = bad_entries_;
  s.evicted = evicted_;
  s.lock_waits = lock_waits_;
  s.compile_seconds = double(compile_ns_.load()) * 1e-9;
  return s;
}

}  // namespace mojo
