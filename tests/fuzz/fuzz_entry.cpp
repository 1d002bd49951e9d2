// Any bytes as a cache entry file: check() must return a verdict, never
// crash, read out of bounds or accept an entry whose checksums do not hold.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cache/entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  mojo::entry::Header h;
  std::string problem = mojo::entry::check(file, nullptr, nullptr, &h);
  if (problem.empty()) {
    // Accepted: its parts must lie inside the file and agree with the header.
    std::string_view meta = mojo::entry::meta_of(file, h), payload = mojo::entry::payload_of(file, h);
    if (meta.size() != h.meta_size || payload.size() != h.payload_size) __builtin_trap();
    mojo::KernelKey key{h.key_high, h.key_low};
    mojo::Emit kind = mojo::Emit(h.kind);
    if (!mojo::entry::check(file, &key, &kind, nullptr).empty()) __builtin_trap();
    // Re-encoding the same parts gives the same header.
    mojo::entry::Header again = mojo::entry::make_header(key, kind, meta, payload);
    if (std::memcmp(&again, &h, sizeof h) != 0) __builtin_trap();
  }
  // The same bytes checked against some other key are never accepted.
  mojo::KernelKey other{0x0123456789abcdefull, 0xfedcba9876543210ull};
  if (mojo::entry::check(file, &other, nullptr, nullptr).empty() && !(h.key_high == other.high && h.key_low == other.low))
    __builtin_trap();
  return 0;
}

