// How the CPU device shows a kernel's data races to ThreadSanitizer (the
// TSan build): every GPU thread is a TSan fiber, switched to *without*
// synchronisation, so TSan orders two GPU threads only where the kernel's own
// synchronisation does. The primitives say where that is (release at a
// barrier's arrival, acquire at its release; mbarrier arrive and complete_tx
// -> wait; the lanes of a warp or warpgroup collective; a block's start and
// end), and which memory they touch on the kernel's behalf (cp.async,
// ldmatrix, TMA, wgmma operands). The emulator's own bookkeeping, which every
// fiber of a block shares, is kept out of TSan's sight (Quiet). Without TSan
// every call here is empty.
#pragma once

#include <cstddef>

#include "device/cpu/fiber.hpp"

#if MOJO_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" {
void __tsan_read_range(void* addr, unsigned long size);
void __tsan_write_range(void* addr, unsigned long size);
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
}
#endif

namespace mojo::cpu::race {

#if MOJO_TSAN
inline void release(const void* sync) { __tsan_release(const_cast<void*>(sync)); }
inline void acquire(const void* sync) { __tsan_acquire(const_cast<void*>(sync)); }
inline void quiet_begin() { __tsan_ignore_thread_begin(); }
inline void quiet_end() { __tsan_ignore_thread_end(); }
// The calling GPU thread reads or writes `bytes` at `p` through a primitive (called while Quiet).
inline void read(const void* p, std::size_t bytes) {
  __tsan_ignore_thread_end();
  __tsan_read_range(const_cast<void*>(p), bytes);
  __tsan_ignore_thread_begin();
}
inline void write(const void* p, std::size_t bytes) {
  __tsan_ignore_thread_end();
  __tsan_write_range(const_cast<void*>(p), bytes);
  __tsan_ignore_thread_begin();
}
#else
inline void release(const void*) {}
inline void acquire(const void*) {}
inline void quiet_begin() {}
inline void quiet_end() {}
inline void read(const void*, std::size_t) {}
inline void write(const void*, std::size_t) {}
#endif

// A synchronisation object per phase parity: a thread that resumes late from
// phase p must not acquire what others released into phase p + 1 (phase p + 2
// cannot begin without it).
inline const void* phase_sync(const void* object, unsigned phase) {
  return static_cast<const char*>(object) + (phase & 1u);
}

}  // namespace mojo::cpu::race
