#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "mojo/cache.hpp"

namespace mojo {

std::optional<EntryKind> EntryKind::from_code(std::uint32_t code) noexcept {
  if (code == kTuningCode) return tuning();
  if (code <= std::uint32_t(Emit::host)) return EntryKind(Emit(code));
  return std::nullopt;
}

std::string_view EntryKind::name() const noexcept {
  return code_ == kTuningCode ? "tuning" : emit_name(Emit(code_));
}

std::string KernelKey::hex() const { return fmt::format("{:016x}{:016x}", high, low); }

std::optional<KernelKey> KernelKey::from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  KernelKey k;
  for (std::size_t i = 0; i < 32; ++i) {
    char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return std::nullopt;
    std::uint64_t& half = i < 16 ? k.high : k.low;
    half = half << 4 | std::uint64_t(v);
  }
  return k;
}

KernelKey compute_key(const KeyInputs& in) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  // Each field is length-prefixed so that no two different inputs concatenate alike.
  auto field = [&](std::string_view s) {
    std::uint64_t n = s.size();
    XXH3_128bits_update(&state, &n, sizeof n);
    XXH3_128bits_update(&state, s.data(), s.size());
  };
  field("mojo-jit kernel key");
  field(fmt::format("format {}", kCacheFormatVersion));
  field(in.source);
  field(in.kernels);
  field(in.params);
  field(in.target);
  field(in.compiler);
  field(in.kind.name());
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  return KernelKey{h.high64, h.low64};
}

}  // namespace mojo
