#include "cache/remote.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdarg>

#include "core/log.hpp"
#include "mojo/error.hpp"

#if MOJO_JIT_WITH_REDIS
#include <hiredis/hiredis.h>
#endif

namespace mojo {

namespace {

bool parse_int(std::string_view s, int& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

RemoteCache::RemoteCache(std::string_view url) : url_(url) {
  const std::string_view scheme = "redis://";
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format("remote cache '{}': {}; expected redis://HOST:PORT[/DB]", url, why));
  };
  if (!url.starts_with(scheme)) throw bad("not a redis:// URL");
  std::string_view rest = url.substr(scheme.size());
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    if (!parse_int(rest.substr(slash + 1), db_) || db_ < 0) throw bad("the database is not a number");
    rest = rest.substr(0, slash);
  }
  if (auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (!parse_int(rest.substr(colon + 1), port_) || port_ <= 0 || port_ > 65535) throw bad("bad port");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) throw bad("no host");
  host_ = std::string(rest);
#if !MOJO_JIT_WITH_REDIS
  throw InvalidArgumentError(
      fmt::format("remote cache '{}': this build has no Redis support (install libhiredis-dev and rebuild)", url));
#endif
}

RemoteCache::~RemoteCache() {
#if MOJO_JIT_WITH_REDIS
  if (context_ != nullptr) redisFree(context_);
#endif
}

std::string RemoteCache::key_of(const KernelKey& key, EntryKind kind) {
  return fmt::format("mojo-jit:v{}:{}.{}", kCacheFormatVersion, key.hex(), kind.name());
}

void RemoteCache::turn_off(const std::string& why) {
  if (off_) return;
  off_ = true;
  log::warn(fmt::format("remote cache {}: {}; going on without it in this process", url_, why));
#if MOJO_JIT_WITH_REDIS
  if (context_ != nullptr) redisFree(context_);
#endif
  context_ = nullptr;
}

std::optional<std::string> RemoteCache::get(const KernelKey& key, EntryKind kind) {
  return get_named(key_of(key, kind));
}

std::string RemoteCache::claim_of(const KernelKey& key, EntryKind kind) { return key_of(key, kind) + ".claim"; }

#if MOJO_JIT_WITH_REDIS

constexpr timeval kConnectTimeout{0, 300 * 1000}, kCommandTimeout{1, 0};

redisContext* RemoteCache::connected() {
  if (off_) return nullptr;
  if (context_ != nullptr) return context_;
  context_ = redisConnectWithTimeout(host_.c_str(), port_, kConnectTimeout);
  if (context_ == nullptr || context_->err) {
    turn_off(context_ ? context_->errstr : "cannot allocate a connection");
    return nullptr;
  }
  redisSetTimeout(context_, kCommandTimeout);
  if (db_ != 0 && !command("SELECT %d", db_)) turn_off(fmt::format("cannot select database {}", db_));
  return context_;
}

std::shared_ptr<redisReply> RemoteCache::command(const char* format, ...) {
  redisContext* c = connected();
  if (c == nullptr) return nullptr;
  va_list args;
  va_start(args, format);
  auto* reply = static_cast<redisReply*>(redisvCommand(c, format, args));
  va_end(args);
  if (reply == nullptr) {
    turn_off(c->errstr);
    return nullptr;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    turn_off(reply->str);
    freeReplyObject(reply);
    return nullptr;
  }
  return std::shared_ptr<redisReply>(reply, freeReplyObject);
}

std::optional<std::string> RemoteCache::get_named(const std::string& name) {
  std::lock_guard lock(mutex_);
  const auto reply = command("GET %b", name.data(), name.size());
  if (!reply || reply->type != REDIS_REPLY_STRING) return std::nullopt;
  return std::string(reply->str, reply->len);
}

std::vector<std::string> RemoteCache::names() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  const std::string pattern = fmt::format("mojo-jit:v{}:*", kCacheFormatVersion);
  std::string cursor = "0";
  do {
    const auto reply = command("SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(), pattern.size());
    if (!reply) return out;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
      turn_off("unexpected SCAN reply");
      return out;
    }
    cursor.assign(reply->element[0]->str, reply->element[0]->len);
    for (std::size_t i = 0; i < reply->element[1]->elements; ++i)
      if (!std::string_view(reply->element[1]->element[i]->str).ends_with(".claim"))
        out.emplace_back(reply->element[1]->element[i]->str, reply->element[1]->element[i]->len);
  } while (cursor != "0");
  return out;
}

void RemoteCache::put(const KernelKey& key, EntryKind kind, std::string_view entry) {
  std::lock_guard lock(mutex_);
  const std::string name = key_of(key, kind);
  command("SET %b %b", name.data(), name.size(), entry.data(), entry.size());
}

void RemoteCache::remove(const KernelKey& key, EntryKind kind) {
  std::lock_guard lock(mutex_);
  const std::string name = key_of(key, kind);
  command("DEL %b", name.data(), name.size());
}

bool RemoteCache::claim(const KernelKey& key, EntryKind kind, std::chrono::milliseconds expiry) {
  std::lock_guard lock(mutex_);
  const std::string name = claim_of(key, kind);
  const auto reply = command("SET %b 1 NX PX %lld", name.data(), name.size(), (long long)expiry.count());
  return !reply || reply->type == REDIS_REPLY_STATUS;  // OK: held; nil: another holds it; off: compile alone
}

void RemoteCache::release(const KernelKey& key, EntryKind kind) {
  std::lock_guard lock(mutex_);
  const std::string name = claim_of(key, kind);
  command("DEL %b", name.data(), name.size());
}

bool RemoteCache::claimed(const KernelKey& key, EntryKind kind) {
  std::lock_guard lock(mutex_);
  const std::string name = claim_of(key, kind);
  const auto reply = command("EXISTS %b", name.data(), name.size());
  return reply && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
}

#else  // no hiredis: the constructor refuses every URL, so none of these runs

redisContext* RemoteCache::connected() { return nullptr; }
std::optional<std::string> RemoteCache::get_named(const std::string&) { return std::nullopt; }
std::vector<std::string> RemoteCache::names() { return {}; }
void RemoteCache::put(const KernelKey&, EntryKind, std::string_view) {}
void RemoteCache::remove(const KernelKey&, EntryKind) {}
bool RemoteCache::claim(const KernelKey&, EntryKind, std::chrono::milliseconds) { return true; }
void RemoteCache::release(const KernelKey&, EntryKind) {}
bool RemoteCache::claimed(const KernelKey&, EntryKind) { return false; }

#endif

}  // namespace mojo
