// Any bytes as a cache entry file: check() must return a verdict, never
// crash, read out of bounds or accept an entry whose checksums do not hold.
// Random bytes almost never pass the magic and header checksum, so each
// input is also checked "sealed": magic, version and header checksum made
// valid (and then the body checksum too), which lets the fuzzer reach the
// size and body checks behind them.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cache/entry.hpp"

namespace {

void check_one(std::string_view file) {
  mojo::entry::Header h;
  if (!mojo::entry::check(file, nullptr, nullptr, &h).empty()) return;
  // Accepted: its parts lie inside the file and agree with the header.
  std::string_view meta = mojo::entry::meta_of(file, h), payload = mojo::entry::payload_of(file, h);
  if (meta.size() != h.meta_size || payload.size() != h.payload_size) __builtin_trap();
  if (sizeof h + meta.size() + payload.size() != file.size()) __builtin_trap();
  mojo::KernelKey key{h.key_high, h.key_low};
  mojo::EntryKind kind = mojo::entry::kind_of(h);
  if (!mojo::entry::check(file, &key, &kind, nullptr).empty()) __builtin_trap();
  // Re-encoding the same parts gives the same header.
  mojo::entry::Header again = mojo::entry::make_header(key, h.kind, meta, payload);
  if (std::memcmp(&again, &h, sizeof h) != 0) __builtin_trap();
  // Against another key it is refused.
  mojo::KernelKey other{~key.high, key.low};
  if (mojo::entry::check(file, &other, nullptr, nullptr).empty()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string file(reinterpret_cast<const char*>(data), size);
  check_one(file);
  if (size < sizeof(mojo::entry::Header)) return 0;

  // Sealed: a header that passes its own checks, with the fuzzer's sizes.
  mojo::entry::Header h;
  std::memcpy(&h, file.data(), sizeof h);
  mojo::entry::Header valid = mojo::entry::make_header({h.key_high, h.key_low}, mojo::Emit::cubin, "", "");
  std::memcpy(h.magic, valid.magic, sizeof h.magic);
  h.format_version = valid.format_version;
  mojo::entry::seal(h);
  std::memcpy(file.data(), &h, sizeof h);
  check_one(file);

  // Sealed with a matching body checksum, when the sizes fit the file.
  const std::uint64_t body = size - sizeof h;
  if (h.meta_size <= body && h.payload_size == body - h.meta_size) {
    std::string_view rest = std::string_view(file).substr(sizeof h);
    mojo::entry::Header full = mojo::entry::make_header({h.key_high, h.key_low}, h.kind,
                                                        rest.substr(0, h.meta_size), rest.substr(h.meta_size));
    std::memcpy(file.data(), &full, sizeof full);
    check_one(file);
  }
  return 0;
}
