#include "device/cpu/fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <new>

#include "mojo/error.hpp"

#if !defined(__x86_64__)
#error "the CPU device's fibers switch stacks in x86-64 assembly; other hosts need a port of mojo_cpu_switch"
#endif

#if MOJO_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if MOJO_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// Saves the callee-saved registers, the x87 and SSE control words and the
// stack pointer into *from, then continues on `to`'s stack.
extern "C" void mojo_cpu_switch(void** from, void* to);
extern "C" void mojo_cpu_fiber_begin();
asm(R"(
  .text
  .globl mojo_cpu_switch
  .hidden mojo_cpu_switch
  .type mojo_cpu_switch, @function
mojo_cpu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw (%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mojo_cpu_switch, .-mojo_cpu_switch

  .globl mojo_cpu_fiber_begin
  .hidden mojo_cpu_fiber_begin
  .type mojo_cpu_fiber_begin, @function
mojo_cpu_fiber_begin:
  movq %r13, %rdi
  callq *%r12
  ud2
  .size mojo_cpu_fiber_begin, .-mojo_cpu_fiber_begin
)");

namespace mojo::cpu {

constexpr std::size_t kGuard = 4096;  // one page (x86-64) below each stack, mapped PROT_NONE

Fiber::Fiber(std::size_t stack_bytes) {
  const std::size_t page = kGuard;
  mapped_ = (stack_bytes + page - 1) / page * page + page;
  stack_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack_ == MAP_FAILED)
    throw DeviceError(
        "cpu device: cannot map a fiber stack (out of address space, or of the mappings a process "
        "may have: vm.max_map_count)");
#if !MOJO_ASAN
  // An overflow faults instead of corrupting the next stack. The guard splits the fiber's mapping in two: a
  // cooperative grid of 132 blocks of 512 threads (67,584 fibers) peaked at 49k mappings here and ran past
  // vm.max_map_count (65,530) under ASan, which has mappings of its own (2026-11-29). ASan's stacks are four
  // times these, so a kernel deep enough to overflow one faults here first.
  mprotect(stack_, page, PROT_NONE);
#endif
#if MOJO_TSAN
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
#if MOJO_TSAN
  if (tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
  munmap(stack_, mapped_);
}

void Fiber::start(Entry entry, void* arg) {
  entry_ = entry;
  arg_ = arg;
  auto* top =
      reinterpret_cast<std::uint64_t*>((reinterpret_cast<std::uintptr_t>(stack_) + mapped_) & ~std::uintptr_t(15));
#if MOJO_ASAN
  // Frames of an earlier run may have left redzones behind.
  __asan_unpoison_memory_region(static_cast<char*>(stack_) + kGuard, mapped_ - kGuard);
#endif
  // mojo_cpu_switch's frame as it pops it: control words, r15..r12, rbx, rbp, return address.
  std::uint64_t* sp = top - 11;
  sp[0] = 0x037f;                                          // x87 control word
  sp[1] = 0x1f80;                                          // mxcsr (ldmxcsr reads the low half)
  sp[2] = 0;                                               // r15
  sp[3] = 0;                                               // r14
  sp[4] = reinterpret_cast<std::uint64_t>(this);           // r13: the argument
  sp[5] = reinterpret_cast<std::uint64_t>(&Fiber::begin);  // r12: the function
  sp[6] = 0;                                               // rbx
  sp[7] = 0;                                               // rbp
  sp[8] = reinterpret_cast<std::uint64_t>(&mojo_cpu_fiber_begin);
  sp[9] = 0;
  sp[10] = 0;
  sp_ = sp;
}

void Fiber::name(const char* text) {
#if MOJO_TSAN
  __tsan_set_fiber_name(tsan_fiber_, text);
#else
  static_cast<void>(text);
#endif
}

void Fiber::begin(void* self) {
  auto* f = static_cast<Fiber*>(self);
#if MOJO_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &f->scheduler_stack_bottom_, &f->scheduler_stack_size_);
#endif
  f->entry_(f->arg_);
  __builtin_trap();  // entries end with suspend(true)
}

void Fiber::resume() {
#if MOJO_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, static_cast<char*>(stack_) + kGuard, mapped_ - kGuard);
#endif
#if MOJO_TSAN
  // Without synchronisation: GPU threads are ordered only by what the kernel
  // synchronises (race.hpp), so TSan sees the races a GPU could run into.
  tsan_scheduler_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
  mojo_cpu_switch(&scheduler_sp_, sp_);
#if MOJO_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void Fiber::suspend(bool final) {
#if MOJO_ASAN
  __sanitizer_start_switch_fiber(final ? nullptr : &fake_stack_, scheduler_stack_bottom_, scheduler_stack_size_);
#else
  static_cast<void>(final);
#endif
#if MOJO_TSAN
  __tsan_switch_to_fiber(tsan_scheduler_, __tsan_switch_to_fiber_no_sync);
#endif
  mojo_cpu_switch(&sp_, scheduler_sp_);
#if MOJO_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
}

}  // namespace mojo::cpu
