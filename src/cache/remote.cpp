#include "cache/remote.hpp"

#include <fmt/format.h>

#include <charconv>

#include "core/log.hpp"
#include "mojo/error.hpp"

#if MOJO_JIT_WITH_REDIS
#include <hiredis/hiredis.h>
#endif

namespace mojo {

namespace {

constexpr timeval kConnectTimeout{0, 300 * 1000}, kCommandTimeout{1, 0};

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

redisContext* RemoteCache::connected() {
#if MOJO_JIT_WITH_REDIS
  if (off_) return nullptr;
  if (context_ != nullptr) return context_;
  context_ = redisConnectWithTimeout(host_.c_str(), port_, kConnectTimeout);
  if (context_ == nullptr || context_->err) {
    turn_off(context_ ? context_->errstr : "cannot allocate a connection");
    return nullptr;
  }
  redisSetTimeout(context_, kCommandTimeout);
  if (db_ != 0) {
    auto* reply = static_cast<redisReply*>(redisCommand(context_, "SELECT %d", db_));
    const bool ok = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
    if (reply) freeReplyObject(reply);
    if (!ok) turn_off(fmt::format("cannot select database {}", db_));
  }
  return context_;
#else
  return nullptr;
#endif
}

std::optional<std::string> RemoteCache::get(const KernelKey& key, EntryKind kind) {
  return get_named(key_of(key, kind));
}

std::optional<std::string> RemoteCache::get_named(const std::string& name) {
#if MOJO_JIT_WITH_REDIS
  std::lock_guard lock(mutex_);
  redisContext* c = connected();
  if (c == nullptr) return std::nullopt;
  auto* reply = static_cast<redisReply*>(redisCommand(c, "GET %b", name.data(), name.size()));
  if (reply == nullptr) {
    turn_off(c->errstr);
    return std::nullopt;
  }
  std::optional<std::string> value;
  if (reply->type == REDIS_REPLY_STRING)
    value.emplace(reply->str, reply->len);
  else if (reply->type == REDIS_REPLY_ERROR)
    turn_off(reply->str);
  freeReplyObject(reply);
  return value;
#else
  (void)name;
  return std::nullopt;
#endif
}

std::vector<std::string> RemoteCache::names() {
  std::vector<std::string> out;
#if MOJO_JIT_WITH_REDIS
  std::lock_guard lock(mutex_);
  const std::string pattern = fmt::format("mojo-jit:v{}:*", kCacheFormatVersion);
  std::string cursor = "0";
  do {
    redisContext* c = connected();
    if (c == nullptr) return out;
    auto* reply = static_cast<redisReply*>(
        redisCommand(c, "SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(), pattern.size()));
    if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
      turn_off(reply == nullptr ? c->errstr : "unexpected SCAN reply");
      if (reply) freeReplyObject(reply);
      return out;
    }
    cursor.assign(reply->element[0]->str, reply->element[0]->len);
    for (std::size_t i = 0; i < reply->element[1]->elements; ++i)
      out.emplace_back(reply->element[1]->element[i]->str, reply->element[1]->element[i]->len);
    freeReplyObject(reply);
  } while (cursor != "0");
#endif
  return out;
}

void RemoteCache::put(const KernelKey& key, EntryKind kind, std::string_view entry) {
#if MOJO_JIT_WITH_REDIS
  std::lock_guard lock(mutex_);
  redisContext* c = connected();
  if (c == nullptr) return;
  const std::string name = key_of(key, kind);
  auto* reply =
      static_cast<redisReply*>(redisCommand(c, "SET %b %b", name.data(), name.size(), entry.data(), entry.size()));
  if (reply == nullptr) return turn_off(c->errstr);
  if (reply->type == REDIS_REPLY_ERROR) turn_off(reply->str);
  freeReplyObject(reply);
#else
  (void)key, (void)kind, (void)entry;
#endif
}

bool RemoteCache::claim(const KernelKey& key, EntryKind kind, std::chrono::milliseconds expiry) {
#if MOJO_JIT_WITH_REDIS
  std::lock_guard lock(mutex_);
  redisContext* c = connected();
  if (c == nullptr) return true;
  const std::string name = key_of(key, kind) + ".claim";
  auto* reply = static_cast<redisReply*>(
      redisCommand(c, "SET %b 1 NX PX %lld", name.data(), name.size(), (long long)expiry.count()));
  if (reply == nullptr) {
    turn_off(c->errstr);
    return true;
  }
  const bool held = reply->type == REDIS_REPLY_STATUS;  // OK; nil when another holds it
  if (reply->type == REDIS_REPLY_ERROR) turn_off(reply->str);
  freeReplyObject(reply);
  return held || off_;
#else
  (void)key, (void)kind, (void)expiry;
  return true;
#endif
}

void RemoteCache::release(const KernelKey& key, EntryKind kind) {
#if MOJO_JIT_WITH_REDIS
  std::lock_guard lock(mutex_);
  redisContext* c = connected();
  if (c == nullptr) return;
  const std::string name = key_of(key, kind) + ".claim";
  auto* reply = static_cast<redisReply*>(redisCommand(c, "DEL %b", name.data(), name.size()));
  if (reply == nullptr) return turn_off(c->errstr);
  freeReplyObject(reply);
#else
  (void)key, (void)kind;
#endif
}

bool RemoteCache::claimed(const KernelKey& key, EntryKind kind) {
#if MOJO_JIT_WITH_REDIS
  std::lock_guard lock(mutex_);
  redisContext* c = connected();
  if (c == nullptr) return false;
  const std::string name = key_of(key, kind) + ".claim";
  auto* reply = static_cast<redisReply*>(redisCommand(c, "EXISTS %b", name.data(), name.size()));
  if (reply == nullptr) {
    turn_off(c->errstr);
    return false;
  }
  const bool exists = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
  freeReplyObject(reply);
  return exists;
#else
  (void)key, (void)kind;
  return false;
#endif
}

void RemoteCache::remove(const KernelKey& key, EntryKind kind) {
#if MOJO_JIT_WITH_REDIS
  std::lock_guard lock(mutex_);
  redisContext* c = connected();
  if (c == nullptr) return;
  const std::string name = key_of(key, kind);
  auto* reply = static_cast<redisReply*>(redisCommand(c, "DEL %b", name.data(), name.size()));
  if (reply == nullptr) return turn_off(c->errstr);
  freeReplyObject(reply);
#else
  (void)key, (void)kind;
#endif
}

}  // namespace mojo
