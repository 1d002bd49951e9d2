// cache push and pull: whole entries between a disk cache and the remote
// tier, each checked on the way (cache/README.md).
#include <fmt/format.h>

#include <fstream>
#include <iterator>

#include "cache/entry.hpp"
#include "cache/remote.hpp"
#include "mojo/error.hpp"

namespace mojo {

CacheSyncResult push_to_remote(const DiskCache& cache, const std::string& url) {
  RemoteCache remote(url);
  CacheSyncResult r;
  for (const DiskEntryInfo& e : cache.list()) {
    std::ifstream in(e.path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    entry::Header h{};
    if (!entry::check(bytes, &e.key, &e.kind, &h).empty()) {
      ++r.skipped;
      continue;
    }
    remote.put(e.key, e.kind, bytes);
    if (remote.off()) throw Error(fmt::format("cache push: the remote tier {} failed (see the warning)", url));
    ++r.copied;
  }
  return r;
}

CacheSyncResult pull_from_remote(const DiskCache& cache, const std::string& url) {
  RemoteCache remote(url);
  CacheSyncResult r;
  const std::vector<std::string> names = remote.names();
  if (remote.off()) throw Error(fmt::format("cache pull: the remote tier {} failed (see the warning)", url));
  for (const std::string& name : names) {
    const std::optional<std::string> value = remote.get_named(name);
    entry::Header h{};
    if (!value || !entry::check(*value, nullptr, nullptr, &h).empty()) {
      ++r.skipped;
      continue;
    }
    const KernelKey key{h.key_high, h.key_low};
    const EntryKind kind = entry::kind_of(h);
    const std::optional<KernelKey> bundle = entry::is_alias(h) ? entry::alias_target(*value, h) : std::nullopt;
    if (RemoteCache::key_of(key, kind) != name || (entry::is_alias(h) && !bundle)) {
      ++r.skipped;
      continue;
    }
    if (bundle) cache.store_alias(key, kind, *bundle, entry::meta_of(*value, h));
    else cache.store(key, kind, entry::meta_of(*value, h), entry::payload_of(*value, h));
    ++r.copied;
  }
  return r;
}

}  // namespace mojo
