#include "cache/entry.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstring>

namespace mojo::entry {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'J', 'O', 'J', 'I', 'T', '\0'};

std::uint64_t header_checksum(const Header& h) { return XXH3_64bits(&h, offsetof(Header, header_checksum)); }

std::uint64_t body_checksum(std::string_view meta, std::string_view payload) {
  XXH3_state_t s;
  XXH3_64bits_reset(&s);
  XXH3_64bits_update(&s, meta.data(), meta.size());
  XXH3_64bits_update(&s, payload.data(), payload.size());
  return XXH3_64bits_digest(&s);
}

}  // namespace

Header make_header(const KernelKey& key, std::uint32_t kind, std::string_view meta, std::string_view payload) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.format_version = kCacheFormatVersion;
  h.kind = kind;
  h.key_high = key.high;
  h.key_low = key.low;
  h.meta_size = meta.size();
  h.payload_size = payload.size();
  h.body_checksum = body_checksum(meta, payload);
  h.header_checksum = header_checksum(h);
  return h;
}

namespace {
std::string encode_entry(const KernelKey& key, std::uint32_t kind_code, std::string_view meta,
                         std::string_view payload) {
  const Header h = make_header(key, kind_code, meta, payload);
  std::string out(reinterpret_cast<const char*>(&h), sizeof h);
  out.append(meta);
  out.append(payload);
  return out;
}
}  // namespace

std::string encode(const KernelKey& key, EntryKind kind, std::string_view meta, std::string_view payload) {
  return encode_entry(key, kind.code(), meta, payload);
}

std::string encode_alias(const KernelKey& key, EntryKind kind, std::string_view meta, const KernelKey& bundle) {
  return encode_entry(key, kind.code() | kAliasFlag, meta, bundle.hex());
}

std::optional<KernelKey> alias_target(std::string_view file, const Header& h) {
  const std::optional<KernelKey> bundle = KernelKey::from_hex(payload_of(file, h));
  if (!bundle || (bundle->high == h.key_high && bundle->low == h.key_low)) return std::nullopt;
  return bundle;
}

void seal(Header& h) { h.header_checksum = header_checksum(h); }

std::string check(std::string_view file, const KernelKey* expected_key, const EntryKind* expected_kind, Header* out) {
  if (file.size() < sizeof(Header)) return fmt::format("truncated: {} bytes, shorter than the header", file.size());
  Header h;
  std::memcpy(&h, file.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return "not a mojo-jit cache entry (bad magic)";
  if (h.header_checksum != header_checksum(h)) return "header checksum mismatch";
  if (h.format_version != kCacheFormatVersion)
    return fmt::format("format version {} (this build reads {})", h.format_version, kCacheFormatVersion);
  if (expected_key && (h.key_high != expected_key->high || h.key_low != expected_key->low))
    return fmt::format("header names key {:016x}{:016x}, not the file's key", h.key_high, h.key_low);
  if (!EntryKind::from_code(h.kind & ~kAliasFlag)) return fmt::format("unknown payload kind {}", h.kind & ~kAliasFlag);
  if (expected_kind && (h.kind & ~kAliasFlag) != expected_kind->code()) return "header names another payload kind";
  const std::uint64_t body = file.size() - sizeof h;
  if (h.meta_size > body || h.payload_size != body - h.meta_size)
    return fmt::format("size mismatch: header says {} + {} bytes, file holds {}", h.meta_size, h.payload_size, body);
  if (h.body_checksum != body_checksum(meta_of(file, h), payload_of(file, h))) return "payload checksum mismatch";
  if (out) *out = h;
  return {};
}

}  // namespace mojo::entry
