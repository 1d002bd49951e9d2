// mojo_wgmma.cuh: Hopper building blocks (sm_90a only), on inline PTX so that
// NVRTC and clang compile them alike: mbarriers, TMA tile loads, warpgroup
// MMA (wgmma) with both operands in shared memory, and moving registers
// between warpgroups (setmaxnreg). Templates that include it must only call
// these from code instantiated for sm_90a.
#pragma once

#include "mojo_mma.cuh"

namespace mojo {

// A CUtensorMap (TMA descriptor), encoded on the host and passed by value as
// a kernel param. The TMA unit must read it where it lies, in param space:
// a kernel never names the param in C++ (that would copy it to local
// memory; clang 19 has no __grid_constant__), it takes its address with
// MOJO_PARAM_ADDRESS instead.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

// The generic address of parameter INDEX (a literal) of the extern "C"
// kernel NAME: NVRTC and clang both name it NAME_param_INDEX in PTX.
#if defined(MOJO_CPU)
#define MOJO_PARAM_ADDRESS(NAME, INDEX) reinterpret_cast<const mojo::TensorMap*>(mojo::cpu::api().param(INDEX))
#else
#define MOJO_PARAM_ADDRESS(NAME, INDEX)                                                              \
  [] {                                                                                               \
    unsigned long long address;                                                                      \
    asm("{ .reg .b64 p; mov.b64 p, " #NAME "_param_" #INDEX "; cvta.param.u64 %0, p; }" : "=l"(address)); \
    return reinterpret_cast<const mojo::TensorMap*>(address);                                        \
  }()
#endif

// The descriptor of an operand tile in shared memory as TMA writes it with
// 128-byte swizzling: 128-byte rows (64 16-bit elements) in swizzle atoms of
// 8 rows (1024 bytes), the tile 1024-byte aligned. Bits: start address >> 4
// at 0, leading byte offset >> 4 at 16, stride byte offset >> 4 at 32,
// swizzle mode 1 (128 B) at 62.
//  K-major (rows along M/N, 64 k each): atoms 1024 bytes apart along M/N (the
//    stride offset); the leading offset is unused (1). Stepping k by 16 adds
//    32 bytes to the start.
//  MN-major (rows along K, 64 m/n each): atoms 1024 bytes apart along K (the
//    stride offset); the next 64 m/n are `mn_chunk_bytes` further (the
//    leading offset). Stepping k by 16 adds 16 rows, 2048 bytes.
__device__ __forceinline__ unsigned long long wgmma_descriptor(unsigned smem_addr, unsigned mn_chunk_bytes = 16) {
  return (unsigned long long)((smem_addr & 0x3FFFF) >> 4) | ((unsigned long long)(mn_chunk_bytes >> 4) << 16) |
         ((1024ull >> 4) << 32) | (1ull << 62);
}

// Byte offset of 16-bit element (row, col) of a tile of ROWS rows as TMA writes it with 128-byte swizzling and
// wgmma_descriptor reads it: 64-column sub-tiles (128-byte rows) ROWS * 128 bytes apart; in each 1024-byte atom
// of 8 rows, 16-byte chunk c of row r sits at chunk c ^ (r % 8). A K-major tile's rows are along M/N, an MN-major
// one's along K. For a kernel that writes a tile itself (cp.async, stores) where TMA cannot.
template <int ROWS> __device__ __forceinline__ unsigned swizzled(int row, int col) {
  const unsigned byte = unsigned(col % 64) * 2;
  return unsigned(col / 64) * ROWS * 128 + unsigned(row) * 128 + (((byte >> 4) ^ unsigned(row % 8)) << 4) + byte % 16;
}

template <class T> constexpr bool is_bf16 = false;
template <> constexpr bool is_bf16<bf16> = true;

#if defined(MOJO_CPU)
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) { cpu::api().mbarrier_init(bar, arrivals); }
__device__ __forceinline__ void fence_barrier_init() {}
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) { cpu::api().mbarrier_arrive(bar, 0); }
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  cpu::api().mbarrier_arrive(bar, bytes);
}
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) { cpu::api().mbarrier_wait(bar, parity); }
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1, int c2) {
  cpu::api().tma_load_3d(dst, map, bar, c0, c1, c2);
}
__device__ __forceinline__ void tma_prefetch_descriptor(const TensorMap*) {}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {}
__device__ __forceinline__ void wgmma_fence() { cpu::api().wgmma_fence(); }
__device__ __forceinline__ void wgmma_commit() { cpu::api().wgmma_commit(); }
template <int N> __device__ __forceinline__ void wgmma_wait() { cpu::api().wgmma_wait(N); }
__device__ __forceinline__ void wgmma_fence_operand(float&) {}
__device__ __forceinline__ void wgmma_fence_operand(unsigned&) {}
__device__ __forceinline__ void fence_proxy_async() { cpu::api().fence_proxy_async(); }
template <class T, int N, int MN_MAJOR_A, int MN_MAJOR_B>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], unsigned long long a, unsigned long long b, int scale_d) {
  static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma tiles here are 64 x N, N a multiple of 16 up to 256");
  cpu::api().wgmma(d, N, a, nullptr, b, scale_d, MN_MAJOR_A, MN_MAJOR_B, is_bf16<T> ? 2 : 1);
}
template <class T, int N, int MN_MAJOR_B>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma with A in registers here: 64 x 64, 128 or 256 tiles");
  cpu::api().wgmma(d, N, 0, a, b, scale_d, 0, MN_MAJOR_B, is_bf16<T> ? 2 : 1);
}
#else

// ---- mbarriers (addresses in the shared window) -------------------------------
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the other threads and to the TMA unit.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Arrives and announces `bytes` that asynchronous copies will complete on this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase with this parity has completed (a fresh barrier is
// in phase 0, so waiting for parity 1 returns at once).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{ .reg .pred done;\n"
      "mojo_wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra mojo_wait;\n"
      "}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA ----------------------------------------------------------------------
// The box of `map` at (c0, c1, c2) into shared memory at `dst`, completing
// its bytes on the barrier; elements outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_descriptor(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// ---- registers between warpgroups --------------------------------------------
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// ---- wgmma ----------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed wgmma groups are still running.
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Makes this thread's ordinary stores to shared memory visible to the async
// proxy (wgmma, TMA) that reads them next: a tile a kernel writes itself (a
// softmax's P) before an MMA reads it, after a barrier among the writers.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Keeps the compiler from moving reads or writes of an accumulator across
// the asynchronous MMAs that own it.
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wgmma_fence_operand(unsigned& r) { asm volatile("" : "+r"(r)::"memory"); }

#define MOJO_ACC4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define MOJO_ACC8(d, i) MOJO_ACC4(d, i), MOJO_ACC4(d, i + 4)
// The accumulator operands of an m64nNk16 (N = 16 C): %0 .. %(8 C - 1), their
// constraints, and the operands after them (a, b, scale_d, the two majors).
#define MOJO_DREGS_1 "%0, %1, %2, %3, %4, %5, %6, %7"
#define MOJO_DREGS_2 MOJO_DREGS_1 ", " "%8, %9, %10, %11, %12, %13, %14, %15"
#define MOJO_DREGS_3 MOJO_DREGS_2 ", " "%16, %17, %18, %19, %20, %21, %22, %23"
#define MOJO_DREGS_4 MOJO_DREGS_3 ", " "%24, %25, %26, %27, %28, %29, %30, %31"
#define MOJO_DREGS_5 MOJO_DREGS_4 ", " "%32, %33, %34, %35, %36, %37, %38, %39"
#define MOJO_DREGS_6 MOJO_DREGS_5 ", " "%40, %41, %42, %43, %44, %45, %46, %47"
#define MOJO_DREGS_7 MOJO_DREGS_6 ", " "%48, %49, %50, %51, %52, %53, %54, %55"
#define MOJO_DREGS_8 MOJO_DREGS_7 ", " "%56, %57, %58, %59, %60, %61, %62, %63"
#define MOJO_DREGS_9 MOJO_DREGS_8 ", " "%64, %65, %66, %67, %68, %69, %70, %71"
#define MOJO_DREGS_10 MOJO_DREGS_9 ", " "%72, %73, %74, %75, %76, %77, %78, %79"
#define MOJO_DREGS_11 MOJO_DREGS_10 ", " "%80, %81, %82, %83, %84, %85, %86, %87"
#define MOJO_DREGS_12 MOJO_DREGS_11 ", " "%88, %89, %90, %91, %92, %93, %94, %95"
#define MOJO_DREGS_13 MOJO_DREGS_12 ", " "%96, %97, %98, %99, %100, %101, %102, %103"
#define MOJO_DREGS_14 MOJO_DREGS_13 ", " "%104, %105, %106, %107, %108, %109, %110, %111"
#define MOJO_DREGS_15 MOJO_DREGS_14 ", " "%112, %113, %114, %115, %116, %117, %118, %119"
#define MOJO_DREGS_16 MOJO_DREGS_15 ", " "%120, %121, %122, %123, %124, %125, %126, %127"
#define MOJO_DOPS_1(d) MOJO_ACC8(d, 0)
#define MOJO_DOPS_2(d) MOJO_DOPS_1(d), MOJO_ACC8(d, 8)
#define MOJO_DOPS_3(d) MOJO_DOPS_2(d), MOJO_ACC8(d, 16)
#define MOJO_DOPS_4(d) MOJO_DOPS_3(d), MOJO_ACC8(d, 24)
#define MOJO_DOPS_5(d) MOJO_DOPS_4(d), MOJO_ACC8(d, 32)
#define MOJO_DOPS_6(d) MOJO_DOPS_5(d), MOJO_ACC8(d, 40)
#define MOJO_DOPS_7(d) MOJO_DOPS_6(d), MOJO_ACC8(d, 48)
#define MOJO_DOPS_8(d) MOJO_DOPS_7(d), MOJO_ACC8(d, 56)
#define MOJO_DOPS_9(d) MOJO_DOPS_8(d), MOJO_ACC8(d, 64)
#define MOJO_DOPS_10(d) MOJO_DOPS_9(d), MOJO_ACC8(d, 72)
#define MOJO_DOPS_11(d) MOJO_DOPS_10(d), MOJO_ACC8(d, 80)
#define MOJO_DOPS_12(d) MOJO_DOPS_11(d), MOJO_ACC8(d, 88)
#define MOJO_DOPS_13(d) MOJO_DOPS_12(d), MOJO_ACC8(d, 96)
#define MOJO_DOPS_14(d) MOJO_DOPS_13(d), MOJO_ACC8(d, 104)
#define MOJO_DOPS_15(d) MOJO_DOPS_14(d), MOJO_ACC8(d, 112)
#define MOJO_DOPS_16(d) MOJO_DOPS_15(d), MOJO_ACC8(d, 120)
#define MOJO_WGMMA_SCALE_1 "%10"
#define MOJO_WGMMA_TAIL_1 "%8, %9, p, 1, 1, %11, %12"
#define MOJO_WGMMA_SCALE_2 "%18"
#define MOJO_WGMMA_TAIL_2 "%16, %17, p, 1, 1, %19, %20"
#define MOJO_WGMMA_SCALE_3 "%26"
#define MOJO_WGMMA_TAIL_3 "%24, %25, p, 1, 1, %27, %28"
#define MOJO_WGMMA_SCALE_4 "%34"
#define MOJO_WGMMA_TAIL_4 "%32, %33, p, 1, 1, %35, %36"
#define MOJO_WGMMA_SCALE_5 "%42"
#define MOJO_WGMMA_TAIL_5 "%40, %41, p, 1, 1, %43, %44"
#define MOJO_WGMMA_SCALE_6 "%50"
#define MOJO_WGMMA_TAIL_6 "%48, %49, p, 1, 1, %51, %52"
#define MOJO_WGMMA_SCALE_7 "%58"
#define MOJO_WGMMA_TAIL_7 "%56, %57, p, 1, 1, %59, %60"
#define MOJO_WGMMA_SCALE_8 "%66"
#define MOJO_WGMMA_TAIL_8 "%64, %65, p, 1, 1, %67, %68"
#define MOJO_WGMMA_SCALE_9 "%74"
#define MOJO_WGMMA_TAIL_9 "%72, %73, p, 1, 1, %75, %76"
#define MOJO_WGMMA_SCALE_10 "%82"
#define MOJO_WGMMA_TAIL_10 "%80, %81, p, 1, 1, %83, %84"
#define MOJO_WGMMA_SCALE_11 "%90"
#define MOJO_WGMMA_TAIL_11 "%88, %89, p, 1, 1, %91, %92"
#define MOJO_WGMMA_SCALE_12 "%98"
#define MOJO_WGMMA_TAIL_12 "%96, %97, p, 1, 1, %99, %100"
#define MOJO_WGMMA_SCALE_13 "%106"
#define MOJO_WGMMA_TAIL_13 "%104, %105, p, 1, 1, %107, %108"
#define MOJO_WGMMA_SCALE_14 "%114"
#define MOJO_WGMMA_TAIL_14 "%112, %113, p, 1, 1, %115, %116"
#define MOJO_WGMMA_SCALE_15 "%122"
#define MOJO_WGMMA_TAIL_15 "%120, %121, p, 1, 1, %123, %124"
#define MOJO_WGMMA_SCALE_16 "%130"
#define MOJO_WGMMA_TAIL_16 "%128, %129, p, 1, 1, %131, %132"

// One wgmma of 64 x N (C = N / 16 chunks of 8 accumulators, d's operands %0 .. %(8 C - 1)) in T's type: SCALE and
// TAIL name the operands after d's (scale_d's, and those of a, b and the majors), the inputs they are.
#define MOJO_WGMMA_ASM(N, C, TYPE, SCALE, TAIL, ...)                                                         \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, " SCALE ", 0;\n"                                               \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" MOJO_DREGS_##C "}, " TAIL \
               "; }"                                                                                          \
               : MOJO_DOPS_##C(d)                                                                             \
               : __VA_ARGS__)
#define MOJO_WGMMA_ISSUE(N, C, SCALE, TAIL, ...)                       \
  if constexpr (is_bf16<T>) MOJO_WGMMA_ASM(N, C, "bf16", SCALE, TAIL, __VA_ARGS__); \
  else MOJO_WGMMA_ASM(N, C, "f16", SCALE, TAIL, __VA_ARGS__)

// d (64 x N, fp32) (+)= a (64 x 16) * b (N x 16), both operands read from
// shared memory through their descriptors, each K-major or (MN_MAJOR_A/B = 1)
// MN-major; scale_d = 0 overwrites d. N is any multiple of 16 up to 256 (C =
// N / 16 chunks of 8 accumulators). Thread t of the warpgroup holds, for each
// 8 columns j, d[4j + e] at row 16 * (t / 32) + (t % 32) / 4 (+ 8 for e >= 2),
// column 8j + 2 * (t % 4) + e % 2.
#define MOJO_WGMMA_CASE(N, C)                                                                           \
  if constexpr (N_ == N) {                                                                              \
    MOJO_WGMMA_ISSUE(N, C, MOJO_WGMMA_SCALE_##C, MOJO_WGMMA_TAIL_##C, "l"(a), "l"(b), "r"(scale_d),     \
                     "n"(MN_MAJOR_A), "n"(MN_MAJOR_B));                                                 \
  }

template <class T, int N_, int MN_MAJOR_A, int MN_MAJOR_B>
__device__ __forceinline__ void wgmma(float (&d)[N_ / 2], unsigned long long a, unsigned long long b, int scale_d) {
  static_assert(N_ % 16 == 0 && N_ >= 16 && N_ <= 256, "wgmma tiles here are 64 x N, N a multiple of 16 up to 256");
  MOJO_WGMMA_CASE(16, 1) else MOJO_WGMMA_CASE(32, 2) else MOJO_WGMMA_CASE(48, 3) else MOJO_WGMMA_CASE(64, 4)
  else MOJO_WGMMA_CASE(80, 5) else MOJO_WGMMA_CASE(96, 6) else MOJO_WGMMA_CASE(112, 7) else MOJO_WGMMA_CASE(128, 8)
  else MOJO_WGMMA_CASE(144, 9) else MOJO_WGMMA_CASE(160, 10) else MOJO_WGMMA_CASE(176, 11)
  else MOJO_WGMMA_CASE(192, 12) else MOJO_WGMMA_CASE(208, 13) else MOJO_WGMMA_CASE(224, 14)
  else MOJO_WGMMA_CASE(240, 15) else MOJO_WGMMA_CASE(256, 16)
}

// d (64 x N, fp32; N 64, 128 or 256) (+)= a (64 x 16, from registers) * b (N x 16, through its descriptor,
// K-major or MN_MAJOR_B = 1). Thread t of the warpgroup holds a in 4 registers of two 16-bit values each: register
// r, half h (the low half first) is element (row 16 * (t / 32) + (t % 32) / 4 + 8 * (r % 2), k 2 * (t % 4) + h +
// 8 * (r / 2)). That is where the thread holds accumulators of the same 64 rows (wgmma above): accumulators
// d[8c .. 8c + 8) of a product, packed in pairs, are the A of the next one's k step c (FlashAttention 3
// keeps P so, never through shared memory). The operands after d's 8 C: a's four, b, scale_d, MN_MAJOR_B.
#define MOJO_WGMMA_RS_TAIL_4 "{%32, %33, %34, %35}, %36, p, 1, 1, %38"
#define MOJO_WGMMA_RS_SCALE_4 "%37"
#define MOJO_WGMMA_RS_TAIL_8 "{%64, %65, %66, %67}, %68, p, 1, 1, %70"
#define MOJO_WGMMA_RS_SCALE_8 "%69"
#define MOJO_WGMMA_RS_TAIL_16 "{%128, %129, %130, %131}, %132, p, 1, 1, %134"
#define MOJO_WGMMA_RS_SCALE_16 "%133"
#define MOJO_WGMMA_RS_CASE(N, C)                                                                                \
  if constexpr (N_ == N) {                                                                                      \
    MOJO_WGMMA_ISSUE(N, C, MOJO_WGMMA_RS_SCALE_##C, MOJO_WGMMA_RS_TAIL_##C, "r"(a[0]), "r"(a[1]), "r"(a[2]),    \
                     "r"(a[3]), "l"(b), "r"(scale_d), "n"(MN_MAJOR_B));                                         \
  }
template <class T, int N_, int MN_MAJOR_B>
__device__ __forceinline__ void wgmma_rs(float (&d)[N_ / 2], const unsigned (&a)[4], unsigned long long b, int scale_d) {
  static_assert(N_ == 64 || N_ == 128 || N_ == 256, "wgmma with A in registers here: 64 x 64, 128 or 256 tiles");
  MOJO_WGMMA_RS_CASE(64, 4) else MOJO_WGMMA_RS_CASE(128, 8) else MOJO_WGMMA_RS_CASE(256, 16)
}
#undef MOJO_WGMMA_RS_CASE
#undef MOJO_WGMMA_ISSUE
#undef MOJO_WGMMA_RS_TAIL_4
#undef MOJO_WGMMA_RS_SCALE_4
#undef MOJO_WGMMA_RS_TAIL_8
#undef MOJO_WGMMA_RS_SCALE_8
#undef MOJO_WGMMA_RS_TAIL_16
#undef MOJO_WGMMA_RS_SCALE_16

#undef MOJO_WGMMA_CASE
#undef MOJO_WGMMA_ASM
#undef MOJO_ACC8
#undef MOJO_ACC4
#undef MOJO_DREGS_1
#undef MOJO_DOPS_1
#undef MOJO_WGMMA_SCALE_1
#undef MOJO_WGMMA_TAIL_1
#undef MOJO_DREGS_2
#undef MOJO_DOPS_2
#undef MOJO_WGMMA_SCALE_2
#undef MOJO_WGMMA_TAIL_2
#undef MOJO_DREGS_3
#undef MOJO_DOPS_3
#undef MOJO_WGMMA_SCALE_3
#undef MOJO_WGMMA_TAIL_3
#undef MOJO_DREGS_4
#undef MOJO_DOPS_4
#undef MOJO_WGMMA_SCALE_4
#undef MOJO_WGMMA_TAIL_4
#undef MOJO_DREGS_5
#undef MOJO_DOPS_5
#undef MOJO_WGMMA_SCALE_5
#undef MOJO_WGMMA_TAIL_5
#undef MOJO_DREGS_6
#undef MOJO_DOPS_6
#undef MOJO_WGMMA_SCALE_6
#undef MOJO_WGMMA_TAIL_6
#undef MOJO_DREGS_7
#undef MOJO_DOPS_7
#undef MOJO_WGMMA_SCALE_7
#undef MOJO_WGMMA_TAIL_7
#undef MOJO_DREGS_8
#undef MOJO_DOPS_8
#undef MOJO_WGMMA_SCALE_8
#undef MOJO_WGMMA_TAIL_8
#undef MOJO_DREGS_9
#undef MOJO_DOPS_9
#undef MOJO_WGMMA_SCALE_9
#undef MOJO_WGMMA_TAIL_9
#undef MOJO_DREGS_10
#undef MOJO_DOPS_10
#undef MOJO_WGMMA_SCALE_10
#undef MOJO_WGMMA_TAIL_10
#undef MOJO_DREGS_11
#undef MOJO_DOPS_11
#undef MOJO_WGMMA_SCALE_11
#undef MOJO_WGMMA_TAIL_11
#undef MOJO_DREGS_12
#undef MOJO_DOPS_12
#undef MOJO_WGMMA_SCALE_12
#undef MOJO_WGMMA_TAIL_12
#undef MOJO_DREGS_13
#undef MOJO_DOPS_13
#undef MOJO_WGMMA_SCALE_13
#undef MOJO_WGMMA_TAIL_13
#undef MOJO_DREGS_14
#undef MOJO_DOPS_14
#undef MOJO_WGMMA_SCALE_14
#undef MOJO_WGMMA_TAIL_14
#undef MOJO_DREGS_15
#undef MOJO_DOPS_15
#undef MOJO_WGMMA_SCALE_15
#undef MOJO_WGMMA_TAIL_15
#undef MOJO_DREGS_16
#undef MOJO_DOPS_16
#undef MOJO_WGMMA_SCALE_16
#undef MOJO_WGMMA_TAIL_16
#endif  // MOJO_CPU

}  // namespace mojo
