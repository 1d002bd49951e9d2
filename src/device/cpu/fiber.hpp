// Fibers for the CPU device: each GPU thread of a block runs on its own
// stack, and the executor switches between them only where a GPU thread
// would wait (barriers, warp collectives, asynchronous waits). The switch is
// a few instructions of x86-64 assembly (callee-saved registers and the
// stack pointer), announced to ASan and TSan so sanitized builds work.
#pragma once

#include <cstddef>

// Which sanitizer instruments this build (GCC's macros, or clang's __has_feature).
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOJO_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define MOJO_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(MOJO_ASAN)
#define MOJO_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(MOJO_TSAN)
#define MOJO_TSAN 1
#endif

namespace mojo::cpu {

class Fiber {
 public:
  using Entry = void (*)(void* arg);
  explicit Fiber(std::size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Arms the fiber to run entry(arg) from the top of its stack at the next resume().
  void start(Entry entry, void* arg);
  // From the scheduler: runs the fiber until it suspends.
  void resume();
  // From inside the fiber: back to the scheduler that resumed it. `final`
  // says the fiber will not be resumed again before its next start().
  void suspend(bool final = false);
  // How TSan's reports name the fiber (the TSan build; a no-op otherwise).
  void name(const char* text);

 private:
  static void begin(void* self);
  void* stack_ = nullptr;  // mapping, guard page first
  std::size_t mapped_ = 0;
  void* sp_ = nullptr;            // the fiber's saved stack pointer
  void* scheduler_sp_ = nullptr;  // the scheduler's, while the fiber runs
  Entry entry_ = nullptr;
  void* arg_ = nullptr;
  // Sanitizer bookkeeping.
  void* fake_stack_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  std::size_t scheduler_stack_size_ = 0;
  void* tsan_fiber_ = nullptr;
  void* tsan_scheduler_ = nullptr;
};

}  // namespace mojo::cpu
