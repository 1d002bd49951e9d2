// mojo_cpu.cuh: what a template needs to be built for the host and run on
// the CPU device. The runtime puts it in front of the templates of a host
// build (never of a GPU build) and defines MOJO_CPU and __CUDA_ARCH__ (the
// emulated target), so the preludes take their CPU branches: CUDA's keywords
// become host C++, special registers and every primitive call the emulator
// through one table (mojo_cpu_abi.h), and conversions and fast math are done
// here, bit-exact or within the PTX ISA's bounds.
#pragma once

#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "mojo_cpu_abi.h"

#define __global__
#define __device__
// One copy per OS thread, which runs one block at a time.
#define __shared__ static thread_local
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)

// Set by the emulator when it loads this library.
extern "C" __attribute__((visibility("default"))) const mojo_cpu_api* mojo_cpu_api_table = nullptr;

// Called by the emulator on an OS thread before each block: the library's
// thread-local block (its static __shared__ arrays) is allocated on the
// thread's first call, by the scheduler, not by whichever GPU thread touches
// it first (which the TSan build would see racing with the others).
extern "C" __attribute__((visibility("default"))) void mojo_cpu_tls_touch() {
  static thread_local char touch;
  asm volatile("" : : "r"(&touch) : "memory");
}

namespace mojo::cpu {

inline const mojo_cpu_api& api() { return *mojo_cpu_api_table; }

inline float bits_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned float_bits(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
// .ftz: subnormal inputs and results become zero of the same sign.
inline float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }

// cvt.f32.f16: exact; every NaN becomes the canonical 0x7fffffff, as the H100 does (its sign and payload
// are dropped: Conformance.ConversionsAndFastMath).
inline float f16_to_f32(unsigned short h) {
  const unsigned sign = unsigned(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(mant != 0 ? 0x7fffffffu : sign | 0x7f800000u);
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  const float magnitude = std::ldexp(float(mant), -24);  // zero or subnormal, exact
  return sign ? -magnitude : magnitude;
}
// cvt.rn.f16.f32: to nearest even, overflow to inf, f16 subnormals kept, NaN stays NaN.
inline unsigned short f32_to_f16(float f) {
  const unsigned u = float_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds past 65504: inf
  if (a < 0x38800000u) {                                          // below f16's normal range
    const float scaled = std::fabs(f) * 16777216.f;                // units of 2^-24, exact
    return (unsigned short)(sign | unsigned(std::nearbyint(scaled)));  // the default mode is to nearest even
  }
  const unsigned rounded = a + 0xfffu + ((a >> 13) & 1u);
  return (unsigned short)(sign | ((rounded - 0x38000000u) >> 13));
}
// cvt.rn.bf16.f32: to nearest even; NaN stays NaN (quiet).
inline unsigned short f32_to_bf16(float f) {
  const unsigned u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// cvt.rna.tf32.f32: 10 mantissa bits, to nearest with ties away from zero.
inline unsigned f32_to_tf32(unsigned u) {
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // inf and NaN unchanged
  return (u + 0x1000u) & 0xffffe000u;
}

// Calls kernel `f` with the launch's arguments (one pointer per parameter, as cuLaunchKernel takes them).
template <class... A, std::size_t... I>
void call(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}
template <class F> struct Signature;
template <class... A> struct Signature<void (*)(A...)> {
  // The parameter count, then each parameter's size: the launcher checks its arguments against them.
  static constexpr unsigned sizes[] = {unsigned(sizeof...(A)), unsigned(sizeof(A))...};
  static void run(void (*f)(A...), void** args) { call(f, args, std::index_sequence_for<A...>{}); }
};

}  // namespace mojo::cpu

// The host entry point of kernel NAME: NAME_mojo_cpu(args) runs one GPU thread
// of it; NAME_mojo_cpu_params lists its parameters' sizes.
#define MOJO_CPU_ENTRY(NAME)                                                                                        \
  extern "C" __attribute__((visibility("default"))) void NAME##_mojo_cpu(void** args) {                              \
    mojo::cpu::Signature<decltype(&NAME)>::run(&NAME, args);                                                        \
  }                                                                                                                 \
  extern "C" __attribute__((visibility("default"))) const unsigned* const NAME##_mojo_cpu_params =                   \
      mojo::cpu::Signature<decltype(&NAME)>::sizes;
