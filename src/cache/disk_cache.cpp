// The on-disk store. Format (cache/README.md): <dir>/v<format>/<2 hex>/<key>.<kind>,
// each file = 64-byte header + meta text + payload. Written whole or not at
// all (temp file, fsync, rename); verified before a byte reaches the driver.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache/entry.hpp"
#include "core/config.hpp"
#include "mojo/cache.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace fs = std::filesystem;

namespace {

using entry::Header;

// Reads a whole file; nullopt if it does not exist. Throws nothing.
std::optional<std::string> read_file(const fs::path& path, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR && error) *error = fmt::format("cannot open: {}", std::strerror(errno));
    return std::nullopt;
  }
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (error) *error = fmt::format("cannot read: {}", std::strerror(errno));
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    data.append(buf, std::size_t(n));
  }
  ::close(fd);
  return data;
}

// verify() for a file found by scanning: its name must match its header.
std::string verify_entry_file(std::string_view file, const fs::path& path, Header* h) {
  std::string bad = entry::check(file, nullptr, nullptr, h);
  if (!bad.empty()) return bad;
  auto key = KernelKey::from_hex(path.stem().string());
  if (!key || key->high != h->key_high || key->low != h->key_low ||
      path.extension().string() != fmt::format(".{}", entry::kind_of(*h).name()))
    return "file name does not match the key and kind in its header";
  return {};
}

void write_all(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("cannot write cache entry {}: {}", path.string(), std::strerror(errno)));
    data.remove_prefix(std::size_t(n));
  }
}

// mkdir -p with mode 0700 for every directory it creates: a cache holds code
// the GPU will run, so nobody else may write (or read) it.
void make_private_dirs(const fs::path& dir) {
  fs::path partial;
  for (const fs::path& part : dir) {
    partial /= part;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error(fmt::format("cannot create cache directory {}: {}", partial.string(), std::strerror(errno)));
  }
}

bool is_temp_name(const std::string& name) { return name.starts_with('.') && name.find(".tmp.") != std::string::npos; }
bool is_lock_name(const std::string& name) { return name.ends_with(".lock"); }

struct FileInfo {
  fs::path path;
  std::string name;
  struct stat st;
};

// Every regular file under the current format's directory.
template <class F>
void for_each_file(const fs::path& dir, F&& f) {
  fs::path root = dir / fmt::format("v{}", kCacheFormatVersion);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec) && it->path().filename() == "index") {  // compile-cause notes, not entries
      it.disable_recursion_pending();
      continue;
    }
    FileInfo info{it->path(), it->path().filename().string(), {}};
    if (::lstat(info.path.c_str(), &info.st) != 0 || !S_ISREG(info.st.st_mode)) continue;
    f(info);
  }
}

}  // namespace

DiskCache::DiskCache(fs::path dir) : dir_(std::move(dir)) {}

fs::path DiskCache::default_dir() {
  if (auto d = config::text("MOJO_JIT_CACHE_DIR")) return *d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "mojo-jit";
  if (const char* d = std::getenv("HOME"); d && *d) return fs::path(d) / ".cache" / "mojo-jit";
  return fs::temp_directory_path() / "mojo-jit";
}

fs::path DiskCache::entry_path(const KernelKey& key, EntryKind kind) const {
  std::string hex = key.hex();
  return dir_ / fmt::format("v{}", kCacheFormatVersion) / hex.substr(0, 2) /
         fmt::format("{}.{}", hex, kind.name());
}

std::optional<std::string> DiskCache::load(const KernelKey& key, EntryKind kind, std::string* problem,
                                           bool remove_bad) const {
  return load_entry(key, kind, problem, remove_bad, /*alias_allowed=*/true);
}

std::optional<std::string> DiskCache::load_entry(const KernelKey& key, EntryKind kind, std::string* problem,
                                                 bool remove_bad, bool alias_allowed) const {
  fs::path path = entry_path(key, kind);
  std::string error;
  std::optional<std::string> file = read_file(path, &error);
  if (!file) {
    if (!error.empty() && problem) *problem = fmt::format("{}: {}", path.string(), error);
    return std::nullopt;
  }
  Header h;
  std::string bad = entry::check(*file, &key, &kind, &h);
  std::optional<KernelKey> bundle;
  if (bad.empty() && entry::is_alias(h)) {
    bundle = entry::alias_target(*file, h);
    if (!alias_allowed) bad = "an alias where a bundle should be";
    else if (!bundle) bad = "an alias that names no valid bundle key";
  }
  if (!bad.empty()) {
    std::error_code ec;
    if (remove_bad) fs::remove(path, ec);  // never loaded; recompiled and rewritten
    if (problem) *problem = fmt::format("{}: {}{}", path.string(), bad, remove_bad ? "; removed" : "");
    return std::nullopt;
  }
  if (!bundle) return std::string(entry::payload_of(*file, h));
  // The kernel lives in a bundle: its module is the answer. An alias never
  // leads to another alias (so a damaged cache cannot loop); a missing
  // bundle is a plain miss.
  return load_entry(*bundle, kind, problem, remove_bad, /*alias_allowed=*/false);
}

void DiskCache::store(const KernelKey& key, EntryKind kind, std::string_view meta, std::string_view payload) const {
  write_entry(key, kind, kind.code(), meta, payload);
}

void DiskCache::store_alias(const KernelKey& key, EntryKind kind, const KernelKey& bundle, std::string_view meta) const {
  write_entry(key, kind, kind.code() | entry::kAliasFlag, meta, bundle.hex());
}

void DiskCache::write_entry(const KernelKey& key, EntryKind kind, std::uint32_t kind_code, std::string_view meta,
                            std::string_view payload) const {
  fs::path path = entry_path(key, kind);
  fs::path dir = path.parent_path();
  make_private_dirs(dir);

  static std::atomic<unsigned> counter{0};
  fs::path temp = dir / fmt::format(".{}.tmp.{}.{}.{}", path.filename().string(), ::getpid(),
                                    std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000,
                                    counter.fetch_add(1));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", temp.string(), std::strerror(errno)));

  const Header h = entry::make_header(key, kind_code, meta, payload);
  try {
    write_all(fd, std::string_view(reinterpret_cast<const char*>(&h), sizeof h), temp);
    write_all(fd, meta, temp);
    write_all(fd, payload, temp);
    if (::fsync(fd) != 0) throw Error(fmt::format("cannot fsync {}: {}", temp.string(), std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    throw Error(fmt::format("cannot rename {} to {}: {}", temp.string(), path.string(), std::strerror(err)));
  }
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);  // make the rename itself durable
    ::close(dfd);
  }
}

std::vector<DiskEntryInfo> DiskCache::list(std::vector<std::string>* problems) const {
  std::vector<DiskEntryInfo> out;
  for_each_file(dir_, [&](const FileInfo& f) {
    if (is_temp_name(f.name) || is_lock_name(f.name)) return;
    std::string error;
    std::optional<std::string> file = read_file(f.path, &error);
    if (!file) return;
    Header h;
    std::string bad = verify_entry_file(*file, f.path, &h);
    if (!bad.empty()) {
      if (problems) problems->push_back(fmt::format("{}: {}", f.path.string(), bad));
      return;
    }
    out.push_back(DiskEntryInfo{f.path, KernelKey{h.key_high, h.key_low}, entry::kind_of(h), h.payload_size,
                                std::string(entry::meta_of(*file, h)), entry::is_alias(h)});
  });
  return out;
}

std::size_t DiskCache::clear() const {
  std::size_t removed = 0;
  for_each_file(dir_, [&](const FileInfo&) { ++removed; });
  std::error_code ec;
  fs::remove_all(dir_ / fmt::format("v{}", kCacheFormatVersion), ec);
  return removed;
}

fs::path DiskCache::index_path(std::string_view specialization) const {
  return dir_ / fmt::format("v{}", kCacheFormatVersion) / "index" /
         fmt::format("{:016x}", XXH3_64bits(specialization.data(), specialization.size()));
}

void DiskCache::write_index(std::string_view specialization, std::string_view components) const {
  fs::path path = index_path(specialization);
  try {
    make_private_dirs(path.parent_path());
  } catch (const Error&) {
    return;
  }
  fs::path temp = path.string() + fmt::format(".tmp.{}", ::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  bool ok = ::write(fd, components.data(), components.size()) == ssize_t(components.size());
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) ::unlink(temp.c_str());
}

void DiskCache::touch(const KernelKey& key, EntryKind kind) const {
  // An explicit stamp: mtime, which every file system keeps (atime often is not).
  ::utimensat(AT_FDCWD, entry_path(key, kind).c_str(), nullptr, 0);
}

KeyLock::~KeyLock() {
  if (fd_ < 0) return;
  // Unlink while still holding: a waiter that locks the old file afterwards
  // sees that it is no longer at the path and retries (see lock()).
  ::unlink(path_.c_str());
  ::close(fd_);  // drops the flock
}
KeyLock::KeyLock(KeyLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      status_(other.status_),
      waited_(other.waited_),
      path_(std::move(other.path_)),
      problem_(std::move(other.problem_)) {}
KeyLock& KeyLock::operator=(KeyLock&& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(status_, other.status_);
  std::swap(waited_, other.waited_);
  std::swap(path_, other.path_);
  std::swap(problem_, other.problem_);
  return *this;
}

KeyLock DiskCache::lock(const KernelKey& key, EntryKind kind, std::chrono::milliseconds timeout) const {
  KeyLock lock;
  fs::path entry = entry_path(key, kind);
  fs::path path = entry.parent_path() / (entry.filename().string() + ".lock");
  lock.path_ = path.string();
  try {
    make_private_dirs(path.parent_path());
  } catch (const Error& e) {
    lock.problem_ = e.what();
    return lock;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      lock.problem_ = fmt::format("cannot open lock file {}: {}", path.string(), std::strerror(errno));
      return lock;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // The file may have been pruned and recreated while we waited: only a
      // lock on the file that is at `path` now counts.
      struct stat held, now;
      if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
          held.st_dev == now.st_dev) {
        lock.fd_ = fd;
        lock.status_ = KeyLock::Status::held;
        return lock;
      }
      ::close(fd);
      continue;
    }
    int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK && err != EINTR) {
      lock.problem_ = fmt::format("flock() does not work on {} ({}); going on without cross-process locks",
                                  dir_.string(), std::strerror(err));
      lock.status_ = KeyLock::Status::unsupported;
      return lock;
    }
    lock.waited_ = true;
    if (std::chrono::steady_clock::now() >= deadline) {
      lock.problem_ = fmt::format("gave up waiting {} ms for {}; compiling without it", timeout.count(),
                                  path.string());
      lock.status_ = KeyLock::Status::timed_out;
      return lock;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::size_t DiskCache::verify(std::vector<std::string>* problems, bool remove) const {
  std::size_t good = 0;
  for_each_file(dir_, [&](const FileInfo& f) {
    if (is_temp_name(f.name) || is_lock_name(f.name)) return;
    std::string error;
    std::optional<std::string> file = read_file(f.path, &error);
    if (!file) {
      if (problems && !error.empty()) problems->push_back(fmt::format("{}: {}", f.path.string(), error));
      return;
    }
    Header h;
    std::string bad = verify_entry_file(*file, f.path, &h);
    if (bad.empty()) {
      ++good;
      return;
    }
    if (remove) ::unlink(f.path.c_str());
    if (problems) problems->push_back(fmt::format("{}: {}{}", f.path.string(), bad, remove ? "; removed" : ""));
  });
  return good;
}

DiskUsage DiskCache::usage() const {
  DiskUsage u;
  for_each_file(dir_, [&](const FileInfo& f) {
    if (is_temp_name(f.name) || is_lock_name(f.name)) {
      ++u.stale_files;
    } else {
      ++u.entries;
      u.bytes += std::uint64_t(f.st.st_size);
    }
  });
  return u;
}

std::size_t DiskCache::prune(std::uint64_t max_bytes, std::chrono::seconds stale_after) const {
  struct Entry {
    fs::path path;
    std::uint64_t bytes;
    struct timespec used;
  };
  std::vector<Entry> entries;
  std::uint64_t total = 0;
  const auto now = std::chrono::system_clock::now();
  for_each_file(dir_, [&](const FileInfo& f) {
    if (is_temp_name(f.name) || is_lock_name(f.name)) {
      auto age = now - std::chrono::system_clock::from_time_t(f.st.st_mtim.tv_sec);
      if (age > stale_after) ::unlink(f.path.c_str());  // a killed writer's leftovers
      return;
    }
    entries.push_back({f.path, std::uint64_t(f.st.st_size), f.st.st_mtim});
    total += std::uint64_t(f.st.st_size);
  });
  if (total <= max_bytes) return 0;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec) < std::tie(b.used.tv_sec, b.used.tv_nsec);
  });
  std::size_t removed = 0;
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    if (::unlink(e.path.c_str()) == 0) ++removed;
    total -= e.bytes;
  }
  return removed;
}

std::string untrusted_reason(const fs::path& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return {};
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", dir.string());
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return fmt::format("{} is owned by uid {}, not by this user (uid {}) or root", dir.string(), st.st_uid,
                       ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("{} is writable by {} (mode {:o})", dir.string(),
                       (st.st_mode & S_IWOTH) ? "everyone" : "its group", st.st_mode & 07777);
  return {};
}

}  // namespace mojo
