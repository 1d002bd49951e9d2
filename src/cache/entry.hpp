// The bytes of one cache entry (format: cache/README.md): a 64-byte header,
// then meta text, then the payload. Pure functions over bytes, so the reader
// is fuzzed directly (tests/fuzz).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mojo/cache.hpp"

namespace mojo::entry {

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

// Header::kind is the entry's EntryKind code, with this bit set for an alias:
// an entry whose payload names the bundle entry that holds the kernel.
constexpr std::uint32_t kAliasFlag = 0x100;

Header make_header(const KernelKey& key, std::uint32_t kind, std::string_view meta, std::string_view payload);
inline Header make_header(const KernelKey& key, EntryKind kind, std::string_view meta, std::string_view payload) {
  return make_header(key, kind.code(), meta, payload);
}
// A whole entry (header, meta, payload): what a disk entry holds, and a remote cache's value.
std::string encode(const KernelKey& key, EntryKind kind, std::string_view meta, std::string_view payload);
// A whole alias entry: at a kernel's key, naming (as its payload, in hex) the bundle whose module holds it.
std::string encode_alias(const KernelKey& key, EntryKind kind, std::string_view meta, const KernelKey& bundle);
// The kind of a checked entry (check() rejects codes no kind has).
inline EntryKind kind_of(const Header& h) { return *EntryKind::from_code(h.kind & ~kAliasFlag); }
inline bool is_alias(const Header& h) { return (h.kind & kAliasFlag) != 0; }
// The bundle a checked alias entry names; nullopt when its payload is no key or its own key.
std::optional<KernelKey> alias_target(std::string_view file, const Header& h);
// Recomputes the header checksum after a field was changed (tests, tools).
void seal(Header& h);

// Checks a whole entry file; returns the problem, or empty when it is valid
// (then `*out` holds its header). `expected_key` / `expected_kind` may be
// null; an alias of the expected kind passes too.
std::string check(std::string_view file, const KernelKey* expected_key, const EntryKind* expected_kind, Header* out);

inline std::string_view meta_of(std::string_view file, const Header& h) { return file.substr(sizeof h, h.meta_size); }
inline std::string_view payload_of(std::string_view file, const Header& h) {
  return file.substr(sizeof h + h.meta_size);
}

}  // namespace mojo::entry
