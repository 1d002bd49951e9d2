// The CPU device's memory, built to catch what a GPU would silently get
// wrong: fresh allocations are poisoned (uninitialised reads show as NaN, or
// as a difference between two poisons), and each allocation sits between
// guard zones whose canary is checked after every launch, so a store past a
// buffer is a DeviceError naming the kernel and the buffer, in every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mojo::cpu {

// What fresh device memory holds (MOJO_JIT_CPU_POISON): nan (0xff bytes: NaN
// in every float type, -1 in every integer; the default), zero, or random bytes.
enum class Poison : std::uint8_t { nan, zero, random };
Poison poison_from_env();  // throws InvalidArgumentError naming the variable
// What allocations made from now on hold, in place of MOJO_JIT_CPU_POISON's
// (nullopt: that again). check_op launches under two poisons.
void set_poison(std::optional<Poison> poison);
// Fills `bytes` at `p` with `poison` (random: from `seed`).
void fill_poison(void* p, std::size_t bytes, Poison poison, std::uint64_t seed = 0);

// `bytes` of device memory, 256-byte aligned as cuMemAlloc's, poisoned, between guard zones.
void* allocate(std::size_t bytes);
void release(void* p) noexcept;

// Checks every live allocation's guard zones; a broken one is re-armed and
// reported as a DeviceError that names `kernel`, the buffer and the bytes.
void check_guards(std::string_view kernel);

}  // namespace mojo::cpu
