// The kernel cache: content keys, and an on-disk store of compiled artifacts
// whose entries are written whole or not at all and verified before use.
// Layout and format: cache/README.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/compiler.hpp"

namespace mojo {

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
  Emit emit = Emit::cubin;
};
KernelKey compute_key(const KeyInputs& inputs);

// Bumped whenever the entry format or the key's recipe changes; older entries are ignored.
inline constexpr std::uint32_t kCacheFormatVersion = 1;

struct CacheStats {
  std::uint64_t memory_hits = 0;  // launches served by a kernel already loaded
  std::uint64_t disk_hits = 0;
  std::uint64_t misses = 0;       // not in memory or on disk
  std::uint64_t compiles = 0;
  std::uint64_t bad_entries = 0;  // entries found corrupt, removed and recompiled
  double compile_seconds = 0;
};

struct DiskEntryInfo {
  std::filesystem::path path;
  KernelKey key;
  Emit kind = Emit::cubin;
  std::uint64_t payload_bytes = 0;
  std::string meta;  // "op=rms_norm params=... target=sm_90 compiler=nvrtc-13.0"
};

class DiskCache {
 public:
  // `dir` and its subdirectories are created (mode 0700) by the first store().
  explicit DiskCache(std::filesystem::path dir);
  // $MOJO_JIT_CACHE_DIR, else $XDG_CACHE_HOME/mojo-jit, else $HOME/.cache/mojo-jit.
  static std::filesystem::path default_dir();

  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::filesystem::path entry_path(const KernelKey& key, Emit kind) const;

  // The payload of a verified entry; nullopt when absent. A corrupt entry is
  // removed, `*problem` says why, and nullopt is returned.
  std::optional<std::string> load(const KernelKey& key, Emit kind, std::string* problem = nullptr) const;
  // Writes to a temp file in the same directory, fsyncs and renames: readers
  // see the old state or the whole new entry. Throws Error on I/O failure.
  void store(const KernelKey& key, Emit kind, std::string_view meta, std::string_view payload) const;

  // Every entry of the current format; `problems` gets one line per bad file.
  std::vector<DiskEntryInfo> list(std::vector<std::string>* problems = nullptr) const;
  // Removes every entry and leftover temp file; returns how many files went.
  std::size_t clear() const;

 private:
  std::filesystem::path dir_;
};

}  // namespace mojo
