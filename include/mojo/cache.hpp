// The kernel cache: content keys, and an on-disk store of compiled artifacts
// whose entries are written whole or not at all and verified before use.
// Layout and format: cache/README.md.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/stage.hpp"

namespace mojo {

// What a cache entry holds: a stage's artifact (implicitly from its Emit), or
// an autotuning record (the winning candidate for a shape bucket on a device).
class EntryKind {
 public:
  constexpr EntryKind(Emit stage) noexcept : code_(std::uint32_t(stage)) {}
  static constexpr EntryKind tuning() noexcept { return EntryKind(kTuningCode); }
  // The code in an entry's header; nullopt for a code no kind has.
  static std::optional<EntryKind> from_code(std::uint32_t code) noexcept;
  constexpr std::uint32_t code() const noexcept { return code_; }
  // "ptx", "cubin", ..., "tuning": the entry file's suffix.
  std::string_view name() const noexcept;
  friend constexpr bool operator==(EntryKind, EntryKind) = default;

 private:
  static constexpr std::uint32_t kTuningCode = 16;
  constexpr explicit EntryKind(std::uint32_t code) noexcept : code_(code) {}
  std::uint32_t code_;
};

// XXH3-128 over everything that changes the binary.
struct KernelKey {
  std::uint64_t high = 0, low = 0;
  std::string hex() const;  // 32 lowercase hex digits
  static std::optional<KernelKey> from_hex(std::string_view hex);
  friend bool operator==(const KernelKey&, const KernelKey&) = default;
};

// The inputs of a key. Every field is a deterministic string: no paths,
// pointers or timestamps, so the same inputs give the same key on any machine.
struct KeyInputs {
  std::string_view source;    // the full translation unit, prelude and includes inlined
  std::string_view kernels;   // the kernel names the module must contain
  std::string_view params;    // Params::str() of each specialization
  std::string_view target;    // "sm_90a"
  std::string_view compiler;  // Compiler::identity()
  EntryKind kind = Emit::cubin;
};
KernelKey compute_key(const KeyInputs& inputs);

// Why `dir` must not be trusted with code, or empty when it may: it must be
// owned by this user (or root) and not writable by group or others. A
// missing directory is trusted (it will be created 0700).
std::string untrusted_reason(const std::filesystem::path& dir);

// Bumped whenever the entry format or the key's recipe changes; older entries are ignored.
inline constexpr std::uint32_t kCacheFormatVersion = 1;

struct CacheStats {
  std::uint64_t memory_hits = 0;    // launches served by a kernel already loaded
  std::uint64_t disk_hits = 0;      // from the writable cache directory
  std::uint64_t readonly_hits = 0;  // from a read-only layer (MOJO_JIT_CACHE_READONLY_DIRS)
  std::uint64_t remote_hits = 0;    // from the shared remote tier (MOJO_JIT_REMOTE)
  std::uint64_t misses = 0;         // in no layer
  std::uint64_t compiles = 0;
  std::uint64_t bad_entries = 0;    // entries found corrupt: reported, removed, recompiled
  std::uint64_t evicted = 0;        // entries removed to stay under the size cap
  std::uint64_t lock_waits = 0;     // times another process held a key this one needed
  double compile_seconds = 0;
  // Of compile_seconds, by CompileStage (mojo/stage.hpp), as the compilers measured it; the rest is the
  // runtime's (the dump, if any). NVRTC's phases only with RuntimeOptions::time_compile_stages.
  std::array<double, kCompileStages> compile_stage_seconds{};
};

struct DiskEntryInfo {
  std::filesystem::path path;
  KernelKey key;
  EntryKind kind = Emit::cubin;
  std::uint64_t payload_bytes = 0;
  std::string meta;  // "op=rms_norm params=... target=sm_90 compiler=nvrtc-13.0"
  bool alias = false;  // the kernel lives in a bundle; the payload names the bundle's key
};

// An exclusive lock on one key across processes: flock() on a lock file beside
// the entry. The kernel drops it when its holder dies, so a crashed compile
// never blocks others. Released (and its file removed) on destruction.
class KeyLock {
 public:
  enum class Status {
    held,
    unsupported,  // flock() does not work on this file system
    timed_out,    // another process held it for longer than the timeout
    failed,       // the lock file could not be created: the directory is unusable
  };
  KeyLock() = default;
  ~KeyLock();
  KeyLock(KeyLock&& other) noexcept;
  KeyLock& operator=(KeyLock&& other) noexcept;
  Status status() const noexcept { return status_; }
  bool held() const noexcept { return status_ == Status::held; }
  bool waited() const noexcept { return waited_; }  // another process held it first
  const std::string& problem() const noexcept { return problem_; }  // why not held

 private:
  friend class DiskCache;
  int fd_ = -1;
  Status status_ = Status::failed;
  bool waited_ = false;
  std::string path_, problem_;
};

struct DiskUsage {
  std::uint64_t entries = 0, bytes = 0;  // whole entry files
  std::uint64_t stale_files = 0;         // temp and lock files left behind
};

class DiskCache {
 public:
  // `dir` and its subdirectories are created (mode 0700) by the first store().
  explicit DiskCache(std::filesystem::path dir);
  // $MOJO_JIT_CACHE_DIR, else $XDG_CACHE_HOME/mojo-jit, else $HOME/.cache/mojo-jit.
  static std::filesystem::path default_dir();

  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::filesystem::path entry_path(const KernelKey& key, EntryKind kind) const;

  // The payload of a verified entry; nullopt when absent. A corrupt entry is
  // removed (unless `remove_bad` is false: a read-only layer), `*problem`
  // says why, and nullopt is returned.
  std::optional<std::string> load(const KernelKey& key, EntryKind kind, std::string* problem = nullptr,
                                  bool remove_bad = true) const;
  // Writes to a temp file in the same directory, fsyncs and renames: readers
  // see the old state or the whole new entry. Throws Error on I/O failure.
  void store(const KernelKey& key, EntryKind kind, std::string_view meta, std::string_view payload) const;
  // An alias at a kernel's own key for a kernel stored in `bundle`'s module:
  // load(key) then returns the bundle's payload (cache/README.md, Bundles).
  void store_alias(const KernelKey& key, EntryKind kind, const KernelKey& bundle, std::string_view meta) const;

  // The last key components compiled for a specialization (by its description),
  // so that a later compile can say what changed. Best effort: never throws.
  std::filesystem::path index_path(std::string_view specialization) const;
  void write_index(std::string_view specialization, std::string_view components) const;
  // Sets the entry's last-used stamp (its mtime) to now: eviction is LRU by it.
  void touch(const KernelKey& key, EntryKind kind) const;
  // Takes the key's lock, waiting up to `timeout`. Where flock() does not work
  // (some network file systems) or the wait times out, the returned lock is
  // not held and says why; the caller then goes on without it (writes stay
  // atomic through rename, so the worst case is a duplicate compile).
  KeyLock lock(const KernelKey& key, EntryKind kind, std::chrono::milliseconds timeout) const;

  // Every entry of the current format; `problems` gets one line per bad file.
  std::vector<DiskEntryInfo> list(std::vector<std::string>* problems = nullptr) const;
  // Checks every entry; with `remove`, deletes the bad ones. Returns the good count.
  std::size_t verify(std::vector<std::string>* problems, bool remove) const;
  // Sizes from the file system, without reading entries.
  DiskUsage usage() const;
  // Deletes least-recently-used entries until at most `max_bytes` remain, and
  // temp/lock files older than `stale_after`. Safe while others read: a reader
  // holds the file it opened; a later lookup misses and recompiles. Returns
  // the number of entries deleted.
  std::size_t prune(std::uint64_t max_bytes, std::chrono::seconds stale_after = std::chrono::hours(1)) const;
  // Removes every entry and leftover temp/lock file; returns how many files went.
  std::size_t clear() const;

 private:
  std::optional<std::string> load_entry(const KernelKey& key, EntryKind kind, std::string* problem, bool remove_bad,
                                        bool alias_allowed) const;
  void write_entry(const KernelKey& key, EntryKind kind, std::uint32_t kind_code, std::string_view meta,
                   std::string_view payload) const;
  std::filesystem::path dir_;
};

// Copies between a disk cache and a fleet's remote tier (redis://HOST:PORT[/DB],
// README "Cache"): what `mojo-jit cache push|pull` does. Both throw
// InvalidArgumentError for a URL this build cannot serve and Error when the
// tier fails; an entry that fails its checks is skipped, never copied.
struct CacheSyncResult {
  std::size_t copied = 0, skipped = 0;
};
// Every valid, whole entry of `cache` to the remote tier (bundles and their aliases too).
CacheSyncResult push_to_remote(const DiskCache& cache, const std::string& url);
// Every entry of this format in the remote tier into `cache`, each checked (its name must be its key).
CacheSyncResult pull_from_remote(const DiskCache& cache, const std::string& url);

}  // namespace mojo
