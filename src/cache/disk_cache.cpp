// The on-disk store. Format (cache/README.md): <dir>/v<format>/<2 hex>/<key>.<kind>,
// each file = 64-byte header + meta text + payload. Written whole or not at
// all (temp file, fsync, rename); verified before a byte reaches the driver.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "mojo/cache.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'M', 'O', 'J', 'O', 'J', 'I', 'T', '\0'};

// Little-endian on every platform CUDA runs on (x86-64, aarch64).
struct Header {
  char magic[8];
  std::uint32_t format_version;
  std::uint32_t kind;
  std::uint64_t key_high, key_low;
  std::uint64_t meta_size;
  std::uint64_t payload_size;
  std::uint64_t body_checksum;    // XXH3-64 of meta + payload
  std::uint64_t header_checksum;  // XXH3-64 of the bytes above
};
static_assert(sizeof(Header) == 64);

std::uint64_t header_checksum(const Header& h) { return XXH3_64bits(&h, offsetof(Header, header_checksum)); }

std::uint64_t body_checksum(std::string_view meta, std::string_view payload) {
  XXH3_state_t s;
  XXH3_64bits_reset(&s);
  XXH3_64bits_update(&s, meta.data(), meta.size());
  XXH3_64bits_update(&s, payload.data(), payload.size());
  return XXH3_64bits_digest(&s);
}

std::string_view kind_suffix(Emit kind) { return emit_name(kind); }

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

// Checks a whole entry file; returns the problem, or empty when valid.
std::string verify(std::string_view file, const KernelKey* expected_key, Emit* kind, Header* out) {
  if (file.size() < sizeof(Header)) return fmt::format("truncated: {} bytes, shorter than the header", file.size());
  Header h;
  std::memcpy(&h, file.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return "not a mojo-jit cache entry (bad magic)";
  if (h.header_checksum != header_checksum(h)) return "header checksum mismatch";
  if (h.format_version != kCacheFormatVersion)
    return fmt::format("format version {} (this build reads {})", h.format_version, kCacheFormatVersion);
  if (expected_key && (h.key_high != expected_key->high || h.key_low != expected_key->low))
    return fmt::format("header names key {:016x}{:016x}, not the file's key", h.key_high, h.key_low);
  if (kind && h.kind != std::uint32_t(*kind)) return "header names another payload kind";
  if (h.meta_size > file.size() || h.payload_size != file.size() - sizeof h - h.meta_size)
    return fmt::format("size mismatch: header says {} + {} bytes, file holds {}", h.meta_size, h.payload_size,
                       file.size() - sizeof h);
  std::string_view meta = file.substr(sizeof h, h.meta_size);
  std::string_view payload = file.substr(sizeof h + h.meta_size);
  if (h.body_checksum != body_checksum(meta, payload)) return "payload checksum mismatch";
  if (out) *out = h;
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

}  // namespace

DiskCache::DiskCache(fs::path dir) : dir_(std::move(dir)) {}

fs::path DiskCache::default_dir() {
  if (const char* d = std::getenv("MOJO_JIT_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "mojo-jit";
  if (const char* d = std::getenv("HOME"); d && *d) return fs::path(d) / ".cache" / "mojo-jit";
  return fs::temp_directory_path() / "mojo-jit";
}

fs::path DiskCache::entry_path(const KernelKey& key, Emit kind) const {
  std::string hex = key.hex();
  return dir_ / fmt::format("v{}", kCacheFormatVersion) / hex.substr(0, 2) /
         fmt::format("{}.{}", hex, kind_suffix(kind));
}

std::optional<std::string> DiskCache::load(const KernelKey& key, Emit kind, std::string* problem) const {
  fs::path path = entry_path(key, kind);
  std::string error;
  std::optional<std::string> file = read_file(path, &error);
  if (!file) {
    if (!error.empty() && problem) *problem = fmt::format("{}: {}", path.string(), error);
    return std::nullopt;
  }
  Header h;
  std::string bad = verify(*file, &key, &kind, &h);
  if (!bad.empty()) {
    std::error_code ec;
    fs::remove(path, ec);  // a bad entry is never loaded; it is recompiled and rewritten
    if (problem) *problem = fmt::format("{}: {}; removed", path.string(), bad);
    return std::nullopt;
  }
  return file->substr(sizeof(Header) + h.meta_size);
}

void DiskCache::store(const KernelKey& key, Emit kind, std::string_view meta, std::string_view payload) const {
  fs::path path = entry_path(key, kind);
  fs::path dir = path.parent_path();
  make_private_dirs(dir);

  static std::atomic<unsigned> counter{0};
  fs::path temp = dir / fmt::format(".{}.tmp.{}.{}.{}", path.filename().string(), ::getpid(),
                                    std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000,
                                    counter.fetch_add(1));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", temp.string(), std::strerror(errno)));

  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.format_version = kCacheFormatVersion;
  h.kind = std::uint32_t(kind);
  h.key_high = key.high;
  h.key_low = key.low;
  h.meta_size = meta.size();
  h.payload_size = payload.size();
  h.body_checksum = body_checksum(meta, payload);
  h.header_checksum = header_checksum(h);
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
  fs::path root = dir_ / fmt::format("v{}", kCacheFormatVersion);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::string name = it->path().filename().string();
    if (is_temp_name(name)) continue;
    std::string error;
    std::optional<std::string> file = read_file(it->path(), &error);
    if (!file) continue;
    Header h;
    std::string bad = verify(*file, nullptr, nullptr, &h);
    std::string stem = it->path().stem().string();
    auto key = KernelKey::from_hex(stem);
    if (bad.empty() && (!key || key->high != h.key_high || key->low != h.key_low))
      bad = "file name does not match the key in its header";
    if (!bad.empty()) {
      if (problems) problems->push_back(fmt::format("{}: {}", it->path().string(), bad));
      continue;
    }
    out.push_back(DiskEntryInfo{it->path(), *key, Emit(h.kind), h.payload_size,
                                file->substr(sizeof h, h.meta_size)});
  }
  return out;
}

std::size_t DiskCache::clear() const {
  std::size_t removed = 0;
  std::error_code ec;
  fs::path root = dir_ / fmt::format("v{}", kCacheFormatVersion);
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) ++removed;
  fs::remove_all(root, ec);
  return removed;
}

}  // namespace mojo
