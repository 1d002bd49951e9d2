// The shared tier of a fleet's cache, on Redis (MOJO_JIT_REMOTE=redis://HOST:PORT[/DB]): looked up after the
// local layers and before compiling, written after a compile. Values are whole entries, the same checksummed
// bytes as a disk entry, under "mojo-jit:v<format>:<key>.<kind>"; the caller checks each before use. Every call
// is bounded by a timeout, and the first failure (unreachable, timeout, an error reply) turns the tier off for
// the process with one warning: a fleet's cache is an optimisation, never a reason to fail a launch.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/cache.hpp"

struct redisContext;
struct redisReply;

namespace mojo {

class RemoteCache {
 public:
  // Throws InvalidArgumentError for a malformed URL (or one this build cannot serve: no hiredis).
  explicit RemoteCache(std::string_view url);
  ~RemoteCache();
  RemoteCache(const RemoteCache&) = delete;
  RemoteCache& operator=(const RemoteCache&) = delete;

  std::optional<std::string> get(const KernelKey& key, EntryKind kind);
  void put(const KernelKey& key, EntryKind kind, std::string_view entry);
  void remove(const KernelKey& key, EntryKind kind);
  // A claim on compiling a key across the fleet (SET NX with an expiry, so a crashed holder frees it): true
  // when this process holds it (or the tier is off: then every process compiles on its own).
  bool claim(const KernelKey& key, EntryKind kind, std::chrono::milliseconds expiry);
  void release(const KernelKey& key, EntryKind kind);
  // Whether another process holds the claim now.
  bool claimed(const KernelKey& key, EntryKind kind);
  static std::string key_of(const KernelKey& key, EntryKind kind);
  const std::string& url() const noexcept { return url_; }
  // For `mojo-jit cache pull`: the names of this format's entries, and a value by name.
  std::vector<std::string> names();
  std::optional<std::string> get_named(const std::string& name);
  // Whether a failure turned the tier off (a command that needs it then fails).
  bool off() const noexcept { return off_; }

 private:
  redisContext* connected();  // under mutex_; null once off
  // One command under mutex_ (printf-like, hiredis's %b for bytes): its reply, or null when the tier is off or
  // the command failed (which turns it off).
  std::shared_ptr<redisReply> command(const char* format, ...);
  void turn_off(const std::string& why);
  static std::string claim_of(const KernelKey& key, EntryKind kind);

  std::string url_, host_;
  int port_ = 6379, db_ = 0;
  std::mutex mutex_;
  redisContext* context_ = nullptr;
  bool off_ = false;
};

}  // namespace mojo
