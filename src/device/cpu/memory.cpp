#include "device/cpu/memory.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "core/config.hpp"
#include "device/cpu/fiber.hpp"
#include "mojo/error.hpp"

#if MOJO_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace mojo::cpu {

namespace {

// A guard zone on each side: a vector store one row past a buffer lands in
// it. ASan builds also poison the zones, so that reads past the end are reported.
constexpr std::size_t kGuard = 256;
constexpr unsigned char kCanary = 0xa5;

struct Allocation {
  std::size_t bytes;     // what was asked for
  std::size_t rear;      // guard bytes after them (kGuard plus the padding to 256)
};
std::mutex g_mutex;
std::map<std::uintptr_t, Allocation> g_live;  // by payload address
std::uint64_t g_allocations = 0;              // seeds the random poison
std::optional<Poison> g_poison;               // set_poison's, under g_mutex

unsigned char* base_of(std::uintptr_t payload) { return reinterpret_cast<unsigned char*>(payload - kGuard); }

// The first byte of [p, p + n) that is not the canary, or n. Reads the
// zones that ASan builds poison, so it is not instrumented.
#if MOJO_ASAN
__attribute__((no_sanitize_address))
#endif
std::size_t first_broken(const unsigned char* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != kCanary) return i;
  return n;
}

void arm(unsigned char* p, std::size_t n) {
#if MOJO_ASAN
  __asan_unpoison_memory_region(p, n);
#endif
  std::memset(p, kCanary, n);
#if MOJO_ASAN
  __asan_poison_memory_region(p, n);
#endif
}

}  // namespace

Poison poison_from_env() {
  const std::optional<std::string> v = config::choice("MOJO_JIT_CPU_POISON", {"nan", "zero", "random"});
  if (!v || *v == "nan") return Poison::nan;
  return *v == "zero" ? Poison::zero : Poison::random;
}

void fill_poison(void* p, std::size_t bytes, Poison poison, std::uint64_t seed) {
  switch (poison) {
    case Poison::nan:
      std::memset(p, 0xff, bytes);
      return;
    case Poison::zero:
      std::memset(p, 0, bytes);
      return;
    case Poison::random: {
      std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
      auto* out = static_cast<unsigned char*>(p);
      std::size_t i = 0;
      for (; i + 8 <= bytes; i += 8) {
        const std::uint64_t r = rng();
        std::memcpy(out + i, &r, 8);
      }
      for (std::uint64_t r = rng(); i < bytes; ++i, r >>= 8) out[i] = static_cast<unsigned char>(r);
      return;
    }
  }
}

void set_poison(std::optional<Poison> poison) {
  std::lock_guard lock(g_mutex);
  g_poison = poison;
}

void* allocate(std::size_t bytes) {
  static const Poison from_env = poison_from_env();
  const std::size_t rear = (bytes + 255) / 256 * 256 - bytes + kGuard;
  void* p = nullptr;
  if (posix_memalign(&p, 256, kGuard + bytes + rear) != 0)
    throw DeviceError(fmt::format("cpu device: out of memory allocating {} bytes", bytes));
  auto* base = static_cast<unsigned char*>(p);
  arm(base, kGuard);
  arm(base + kGuard + bytes, rear);
  Poison poison;
  std::uint64_t seed;
  {
    std::lock_guard lock(g_mutex);
    poison = g_poison.value_or(from_env);
    seed = ++g_allocations;
  }
  fill_poison(base + kGuard, bytes, poison, seed);  // outside the lock: other threads' launches check guards
  std::lock_guard lock(g_mutex);
  g_live.emplace(reinterpret_cast<std::uintptr_t>(base + kGuard), Allocation{bytes, rear});
  return base + kGuard;
}

void release(void* p) noexcept {
  if (p == nullptr) return;
  const auto payload = reinterpret_cast<std::uintptr_t>(p);
  std::size_t bytes = 0, rear = 0;
  {
    std::lock_guard lock(g_mutex);
    const auto it = g_live.find(payload);
    if (it == g_live.end()) return;
    bytes = it->second.bytes;
    rear = it->second.rear;
    g_live.erase(it);
  }
#if MOJO_ASAN
  __asan_unpoison_memory_region(base_of(payload), kGuard + bytes + rear);
#else
  static_cast<void>(bytes), static_cast<void>(rear);
#endif
  std::free(base_of(payload));
}

void check_guards(std::string_view kernel) {
  std::string report;
  std::lock_guard lock(g_mutex);
  for (const auto& [payload, a] : g_live) {
    unsigned char* front = base_of(payload);
    unsigned char* back = reinterpret_cast<unsigned char*>(payload) + a.bytes;
    const std::size_t before = first_broken(front, kGuard), after = first_broken(back, a.rear);
    if (before == kGuard && after == a.rear) continue;
    if (report.empty()) {
      report = after < a.rear
                   ? fmt::format("cpu device: kernel {} wrote past the end of the {}-byte buffer at 0x{:x} (at byte {} "
                                 "after its end)",
                                 kernel, a.bytes, payload, after)
                   : fmt::format("cpu device: kernel {} wrote before the start of the {}-byte buffer at 0x{:x} (at "
                                 "byte {} before it)",
                                 kernel, a.bytes, payload, kGuard - before);
    }
    arm(front, kGuard);
    arm(back, a.rear);
  }
  if (!report.empty()) throw DeviceError(report);
}

}  // namespace mojo::cpu
