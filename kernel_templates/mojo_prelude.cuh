// mojo_prelude.cuh: the small portable device prelude every template includes.
//
// It needs no CUDA SDK header, so the same templates compile with NVRTC and
// with clang (-nocudainc): storage types and conversions, special registers,
// warp/block reductions, vector loads/stores and fast math are defined here
// once, on inline PTX where the two front ends would differ.
//
// Template convention: a template file `<op>.cu` defines
//   #define MOJO_KERNEL_<op>(NAME, P)
// which expands to one `extern "C" __global__` kernel called NAME, reading the
// specialization's params by name from the struct P the runtime writes before
// it (`struct NAME_p { using dtype = mojo::bf16; static constexpr int hidden =
// 4096, vec = 8; };`): a param the op does not give is a compile error naming
// it. The runtime appends one such pair per specialization, so several
// specializations (and several templates) can share one module.
#pragma once

#include "mojo_activation.h"
#include "mojo_row_tile.h"

// NVRTC, or nvcc compiling a dumped translation unit (the repro MOJO_JIT_DUMP
// gives): CUDA's built-ins are there.
#if defined(__CUDACC_RTC__) || defined(__NVCC__)
#define MOJO_NVIDIA_FRONT_END 1
#endif

#if !defined(MOJO_NVIDIA_FRONT_END) && !defined(MOJO_CPU)
// clang's CUDA front end without the SDK headers: spell out what NVRTC has built in.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#endif

// A lambda inlined where it is called. clang leaves a large lambda called twice as a function of its own,
// and what it captures by reference then lives in local memory (888 bytes of stack in the sm_90a attention's
// consumer loop); NVVM inlines it anyway.
#if defined(MOJO_NVIDIA_FRONT_END)
#define MOJO_INLINE_LAMBDA
#else
#define MOJO_INLINE_LAMBDA __attribute__((always_inline))
#endif

// The block's dynamic shared memory, 128-byte aligned (on the CPU device, the emulator's arena).
#if defined(MOJO_CPU)
#define MOJO_DYNAMIC_SMEM(NAME) unsigned char* const NAME = mojo::cpu::api().dynamic_smem()
#else
#define MOJO_DYNAMIC_SMEM(NAME) extern __shared__ __attribute__((aligned(128))) unsigned char NAME[]
#endif

namespace mojo {

// ---- special registers -------------------------------------------------------
#if defined(MOJO_CPU)
__device__ __forceinline__ unsigned thread_x() { return cpu::api().self()->tid; }
__device__ __forceinline__ unsigned block_x() { return cpu::api().self()->ctaid[0]; }
__device__ __forceinline__ unsigned block_dim_x() { return cpu::api().self()->ntid; }
__device__ __forceinline__ unsigned grid_dim_x() { return cpu::api().self()->nctaid[0]; }
__device__ __forceinline__ unsigned block_y() { return cpu::api().self()->ctaid[1]; }
__device__ __forceinline__ unsigned block_z() { return cpu::api().self()->ctaid[2]; }
__device__ __forceinline__ void sync_block() { cpu::api().barrier(0, 0); }
#elif defined(MOJO_NVIDIA_FRONT_END)
__device__ __forceinline__ unsigned thread_x() { return threadIdx.x; }
__device__ __forceinline__ unsigned block_x() { return blockIdx.x; }
__device__ __forceinline__ unsigned block_dim_x() { return blockDim.x; }
__device__ __forceinline__ unsigned grid_dim_x() { return gridDim.x; }
__device__ __forceinline__ unsigned block_y() { return blockIdx.y; }
__device__ __forceinline__ unsigned block_z() { return blockIdx.z; }
#else
__device__ __forceinline__ unsigned thread_x() { return __nvvm_read_ptx_sreg_tid_x(); }
__device__ __forceinline__ unsigned block_x() { return __nvvm_read_ptx_sreg_ctaid_x(); }
__device__ __forceinline__ unsigned block_dim_x() { return __nvvm_read_ptx_sreg_ntid_x(); }
__device__ __forceinline__ unsigned grid_dim_x() { return __nvvm_read_ptx_sreg_nctaid_x(); }
__device__ __forceinline__ unsigned block_y() { return __nvvm_read_ptx_sreg_ctaid_y(); }
__device__ __forceinline__ unsigned block_z() { return __nvvm_read_ptx_sreg_ctaid_z(); }
#endif
#if !defined(MOJO_CPU)
__device__ __forceinline__ void sync_block() { __syncthreads(); }
#endif

// ---- storage types and conversions -------------------------------------------
// 16-bit floats are stored as raw bits; all math happens in float.
struct alignas(2) f16 {
  unsigned short bits;
};
struct alignas(2) bf16 {
  unsigned short bits;
};
template <class T> constexpr bool kIsBf16 = false;
template <> constexpr bool kIsBf16<bf16> = true;

#if defined(MOJO_CPU)
__device__ __forceinline__ float bits_to_float(unsigned u) { return cpu::bits_float(u); }
__device__ __forceinline__ unsigned float_to_bits(float f) { return cpu::float_bits(f); }
#else
__device__ __forceinline__ float bits_to_float(unsigned u) {
  float f;
  asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
  return f;
}
__device__ __forceinline__ unsigned float_to_bits(float f) {
  unsigned u;
  asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f));
  return u;
}
#endif

template <class T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<bf16>(bf16 v) {
  return bits_to_float(unsigned(v.bits) << 16);
}
template <> __device__ __forceinline__ float to_float<f16>(f16 v) {
#if defined(MOJO_CPU)
  return cpu::f16_to_f32(v.bits);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
#endif
}

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ f16 from_float<f16>(float v) {
  f16 h;
#if defined(MOJO_CPU)
  h.bits = cpu::f32_to_f16(v);
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
#endif
  return h;
}
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 b;
#if defined(MOJO_CPU)
  b.bits = cpu::f32_to_bf16(v);
#elif __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(v));
#else
  // Round to nearest even by hand; NaN stays NaN.
  unsigned u = float_to_bits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.bits = (unsigned short)((u >> 16) | 0x40u);
  } else {
    b.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
#endif
  return b;
}

// lo and hi rounded as from_float<T> (T 16-bit) and packed in one register, lo in the low half: one
// cvt.rn.{bf16,f16}x2.f32 on sm_80+, which ptxas makes one F2FP. Two conversions and a shift-or made three
// instructions a pair of LLVM's kernels (F2F, F2F, PRMT: NVVM matched the pattern, LLVM's PTX did not).
template <class T> __device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
  return unsigned(from_float<T>(lo).bits) | unsigned(from_float<T>(hi).bits) << 16;
}
#if !defined(MOJO_CPU) && __CUDA_ARCH__ >= 800
template <> __device__ __forceinline__ unsigned pack_pair<f16>(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
template <> __device__ __forceinline__ unsigned pack_pair<bf16>(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
#endif

// ---- fast math (PTX approximations; error bounds in the PTX ISA manual) -------
#if defined(MOJO_CPU)
// libm, correctly rounded or within an ulp: inside the .approx bounds.
__device__ __forceinline__ float rsqrt_approx(float x) { return 1.f / std::sqrt(x); }
__device__ __forceinline__ float exp2_approx(float x) { return cpu::ftz(std::exp2(cpu::ftz(x))); }
__device__ __forceinline__ float rcp_approx(float x) { return cpu::ftz(1.f / cpu::ftz(x)); }
__device__ __forceinline__ float log2_approx(float x) { return std::log2(cpu::ftz(x)); }
__device__ __forceinline__ float abs_f(float x) { return std::fabs(x); }
// max.f32: the other operand when one is NaN.
__device__ __forceinline__ float max_f(float a, float b) { return std::fmax(a, b); }
__device__ __forceinline__ float select_f(bool c, float a, float b) { return c ? a : b; }
#else
__device__ __forceinline__ float rsqrt_approx(float x) {
  float y;
  asm("rsqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float abs_f(float x) {
  float y;
  asm("abs.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float max_f(float a, float b) {
  float y;
  asm("max.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
// c ? a : b as one selp: LLVM turns such a select into branches where a is a product (attention's masks: 88
// branches a tile, which ptxas spilled across).
__device__ __forceinline__ float select_f(bool c, float a, float b) {
  float y;
  asm("{ .reg .pred p; setp.ne.b32 p, %3, 0; selp.f32 %0, %1, %2, p; }" : "=f"(y) : "f"(a), "f"(b), "r"(int(c)));
  return y;
}
#endif
__device__ __forceinline__ float neg_inf() { return bits_to_float(0xff800000u); }

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// e^x and ln(x) on the 2^x / log2 units: ~2 ulp, enough for every op here.
__device__ __forceinline__ float exp_approx(float x) { return exp2_approx(x * kLog2e); }
__device__ __forceinline__ float log_approx(float x) { return log2_approx(x) * kLn2; }

// tanh(x), for the soft-caps (cap * tanh(l / cap)): 1 - 2 / (e^2x + 1), which cancels near 0 (1 - e^2x loses
// the bits that make cap * tanh(l / cap) ~ l: a cap of 2^32 made every logit 0), so below 2^-5 tanh's series
// x - x^3/3 + 2x^5/15 instead, within f32's rounding there. Both are computed, then one is picked: no branch.
__device__ __forceinline__ float tanh_f(float x) {
  const float x2 = x * x;
  const float series = x * (1.f - x2 * (1.f / 3.f - x2 * (2.f / 15.f)));
  const float formula = 1.f - 2.f / (exp_approx(2.f * x) + 1.f);
  return abs_f(x) < 0.03125f ? series : formula;
}

// erfc(x), relative error < 1.2e-7 (Numerical Recipes' Chebyshev fit of
// erfc): 1 + erf(x) is erfc(-x), which keeps its digits where erf(x) is near -1.
__device__ __forceinline__ float erfc_f(float x) {
  const float z = abs_f(x);
  const float t = rcp_approx(1.f + 0.5f * z);
  const float poly =
      -z * z - 1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f +
                               t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  const float r = t * exp_approx(poly);
  return x >= 0.f ? r : 2.f - r;
}

// Activations by code (mojo::Act, mojo_activation.h), shared by the activation
// ops and fused epilogues. Each is written so that no 1 + f(x) cancels for
// negative x, where the result is a tiny fraction of x: relative accuracy
// holds on the whole line.
template <int ACT> __device__ __forceinline__ float activate(float x) {
  if constexpr (ACT == int(Act::none)) {
    return x;
  } else if constexpr (ACT == int(Act::gelu)) {
    return 0.5f * x * erfc_f(-x * 0.70710678118654752f);  // x/2 (1 + erf(x / sqrt 2))
  } else if constexpr (ACT == int(Act::gelu_tanh)) {
    // x/2 (1 + tanh(u)) = x / (1 + e^{-2u}), u = sqrt(2/pi) (x + 0.044715 x^3).
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x * rcp_approx(1.f + exp_approx(-2.f * u));
  } else {
    static_assert(ACT == int(Act::silu), "not a mojo::Act code");
    return x * rcp_approx(1.f + exp_approx(-x));
  }
}

// ---- occupancy -------------------------------------------------------------------
// The blocks of THREADS an SM holds when it is full (the CUDA guide's limits: 2048 threads and 32 blocks on
// sm_80 and sm_90, 1536 threads and 16 or 24 blocks on sm_86/sm_87 and sm_89), as __launch_bounds__'s second
// argument of a kernel that streams memory and wants every warp it can get: ptxas then fits the kernel in
// the registers that allow it (32 a thread on sm_90) whichever compiler wrote the PTX, where it would
// otherwise take what the PTX's schedule asks (moe_combine: 38 under clang, 30 under NVVM).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890)
inline constexpr int kSmThreads = 1536, kSmBlocks = __CUDA_ARCH__ == 890 ? 24 : 16;
#else
inline constexpr int kSmThreads = 2048, kSmBlocks = 32;
#endif
template <int THREADS>
inline constexpr int kFullOccupancyBlocks = kSmThreads / THREADS < kSmBlocks ? kSmThreads / THREADS : kSmBlocks;

// ---- vector loads and stores ---------------------------------------------------
// Pack<T, N> is N elements moved as one aligned load/store of N * sizeof(T) bytes.
template <int BYTES> struct Bits;
template <> struct alignas(1) Bits<1> { unsigned char x; };
template <> struct alignas(2) Bits<2> { unsigned short x; };
template <> struct alignas(4) Bits<4> { unsigned x; };
template <> struct alignas(8) Bits<8> { unsigned x, y; };
template <> struct alignas(16) Bits<16> { unsigned x, y, z, w; };

template <class T, int N> union Pack {
  Bits<sizeof(T) * N> bits;
  T v[N];
};

// N floats rounded to T as one pack: 16-bit pairs through pack_pair (one F2FP a pair under either compiler).
template <class T, int N> __device__ __forceinline__ Pack<T, N> pack_floats(const float (&f)[N]) {
  Pack<T, N> p;
  if constexpr (sizeof(T) == 2 && N == 2) {
    p.bits.x = pack_pair<T>(f[0], f[1]);
  } else if constexpr (sizeof(T) == 2 && N == 4) {
    p.bits = {pack_pair<T>(f[0], f[1]), pack_pair<T>(f[2], f[3])};
  } else if constexpr (sizeof(T) == 2 && N == 8) {
    p.bits = {pack_pair<T>(f[0], f[1]), pack_pair<T>(f[2], f[3]), pack_pair<T>(f[4], f[5]), pack_pair<T>(f[6], f[7])};
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p.v[i] = from_float<T>(f[i]);
  }
  return p;
}

// opaque(x): x as a value the optimizer cannot see into (an empty asm: no instruction). A pack used by
// two passes of a row, or at every row of a loop, stays packed in registers: without this LLVM keeps the
// floats it converted from the pack for the next pass (common subexpressions, or conversions hoisted out
// of the loop), twice the registers of a 16-bit pack (layer_norm bf16 4096: 64 registers against NVVM's
// 48). A row index through it gives loop strength reduction nothing to turn into a 64-bit pointer per
// stream. On the CPU device registers are not what limits a kernel: there it is the plain value.
template <class P>
__device__ __forceinline__ P opaque(P p) {
#if !defined(MOJO_CPU)
  if constexpr (sizeof(P) % 4 == 0) {
    unsigned* words = reinterpret_cast<unsigned*>(&p);
#pragma unroll
    for (int k = 0; k < int(sizeof(P) / 4); ++k) asm volatile("" : "+r"(words[k]));
  }
#endif
  return p;
}
__device__ __forceinline__ long long opaque(long long x) {
#if !defined(MOJO_CPU)
  asm volatile("" : "+l"(x));
#endif
  return x;
}

// On the CPU device a misaligned vector fails the launch, as a GPU's does (an x86 aligned move would crash).
template <int BYTES> __device__ __forceinline__ void expect_aligned(const void* p, int store) {
#if defined(MOJO_CPU)
  if (reinterpret_cast<unsigned long long>(p) % BYTES != 0) cpu::api().misaligned(p, BYTES, store);
#endif
}
template <class T, int N> __device__ __forceinline__ Pack<T, N> load(const T* p) {
  expect_aligned<sizeof(T) * N>(p, 0);
  Pack<T, N> r;
  r.bits = *reinterpret_cast<const Bits<sizeof(T) * N>*>(p);
  return r;
}
template <class T, int N> __device__ __forceinline__ void store(T* p, const Pack<T, N>& v) {
  expect_aligned<sizeof(T) * N>(p, 1);
#if defined(MOJO_CPU)
  cpu::api().shared_store(p, sizeof(T) * N);  // the proxy check's (a wgmma reading it needs a fence.proxy.async)
#endif
  *reinterpret_cast<Bits<sizeof(T) * N>*>(p) = v.bits;
}

// ---- reductions ------------------------------------------------------------------
__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
#if defined(MOJO_CPU)
  return bits_to_float(cpu::api().shfl_bfly(float_to_bits(v), lane_mask));
#else
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(lane_mask));
  return r;
#endif
}

__device__ __forceinline__ unsigned shfl_xor(unsigned v, int lane_mask) {
#if defined(MOJO_CPU)
  return cpu::api().shfl_bfly(v, lane_mask);
#else
  unsigned r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(lane_mask));
  return r;
#endif
}
__device__ __forceinline__ unsigned long long shfl_xor(unsigned long long v, int lane_mask) {
  const unsigned long long high = shfl_xor(unsigned(v >> 32), lane_mask);
  return high << 32 | shfl_xor(unsigned(v), lane_mask);
}

// The sum of v over the lanes up to and including this one; `total` gets the whole warp's. Every lane of
// the warp must call it. Integer sums, so exact in any order: 5 butterfly steps, where a loop of one
// lane over 32 values waits on 32 loads in turn (or, unrolled, holds 64 registers for them).
__device__ __forceinline__ unsigned long long warp_inclusive_sum(unsigned long long v, unsigned long long& total) {
  const unsigned lane = thread_x() % 32;
  unsigned long long through = v;
  total = v;  // after the step for m: the sum over this lane's aligned group of 2m lanes
#pragma unroll
  for (int m = 1; m < 32; m *= 2) {
    const unsigned long long other = shfl_xor(total, m);  // the other half of the group
    if (lane & m) through += other;                        // which lies below this lane
    total += other;
  }
  return through;
}

struct Sum {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_f(a, b); }
};

// Reduction over aligned groups of WIDTH lanes (a power of two <= 32); every
// lane of the warp must call it. Each lane gets its group's result.
template <int WIDTH, class Op = Sum> __device__ __forceinline__ float group_reduce(float v, Op op = Op()) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset));
  return v;
}
template <int WIDTH> __device__ __forceinline__ float group_sum(float v) { return group_reduce<WIDTH>(v, Sum()); }

// Reduction over a block of THREADS threads (a multiple of 32). `scratch`
// holds 32 floats of shared memory. Every thread gets the result, combined
// in the same order on every run (deterministic).
template <int THREADS, class Op = Sum>
__device__ __forceinline__ float block_reduce(float v, float* scratch, Op op = Op()) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block_reduce needs whole warps");
  v = group_reduce<32>(v, op);
  if (THREADS == 32) return v;
  const unsigned tid = thread_x();
  if (tid % 32 == 0) scratch[tid / 32] = v;
  sync_block();
  float total = scratch[0];
#pragma unroll
  for (int w = 1; w < THREADS / 32; ++w) total = op(total, scratch[w]);
  // Added up here, not where it is used: LLVM would sink the adds past the barrier into a branch, keeping
  // every warp's part live across the code between (layer_norm_backward f32: 16 registers, 72 bytes of spills).
  total = opaque(total);
  sync_block();  // scratch may be reused right after
  return total;
}
template <int THREADS> __device__ __forceinline__ float block_sum(float v, float* scratch) {
  return block_reduce<THREADS>(v, scratch, Sum());
}
// block_sum of a and of b at once: one round of barriers for both instead of one each. `scratch` holds 64
// floats of shared memory. Each sum is combined in block_sum's order (the same bits).
template <int THREADS> __device__ __forceinline__ void block_sum_pair(float& a, float& b, float* scratch) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block_sum_pair needs whole warps");
  a = group_reduce<32>(a, Sum());
  b = group_reduce<32>(b, Sum());
  if (THREADS == 32) return;
  const unsigned tid = thread_x();
  if (tid % 32 == 0) {
    scratch[tid / 32] = a;
    scratch[32 + tid / 32] = b;
  }
  sync_block();
  float total_a = scratch[0], total_b = scratch[32];
#pragma unroll
  for (int w = 1; w < THREADS / 32; ++w) {
    total_a += scratch[w];
    total_b += scratch[32 + w];
  }
  a = opaque(total_a);  // added up here, as block_reduce says why
  b = opaque(total_b);
  sync_block();  // scratch may be reused right after
}

// The reduction a row op needs over the THREADS lanes that share one row:
// shuffles within a group for narrow rows, the whole block otherwise.
template <int THREADS, class Op = Sum>
__device__ __forceinline__ float row_reduce(float v, float* scratch, Op op = Op()) {
  if constexpr (THREADS <= 32) {
    return group_reduce<THREADS>(v, op);
  } else {
    return block_reduce<THREADS>(v, scratch, op);
  }
}

// row_reduce's two sums at once (block_sum_pair over the block; `scratch`: 64 floats).
template <int THREADS> __device__ __forceinline__ void row_sum_pair(float& a, float& b, float* scratch) {
  if constexpr (THREADS <= 32) {
    a = group_reduce<THREADS>(a, Sum());
    b = group_reduce<THREADS>(b, Sum());
  } else {
    block_sum_pair<THREADS>(a, b, scratch);
  }
}

// f(i) for i = 0 .. ITEMS - 1, in order: unrolled whole where a thread holds its items in registers (a
// register array needs constant indices), else two at a time (unrolled whole, a long row's hoisted loads
// spilled).
template <int ITEMS, bool IN_REGISTERS, class F> __device__ __forceinline__ void for_items(F f) {
  if constexpr (IN_REGISTERS) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) f(i);
  } else {
#pragma unroll 2
    for (int i = 0; i < ITEMS; ++i) f(i);
  }
}

// ---- the row tile of the row ops (norms, softmax) ------------------------------
// A block of ROWS rows, THREADS threads each; a row is COLS elements in
// vectors of VEC, ITEMS vectors per thread, kept in registers when there are
// at most MAX_ITEMS of them (mojo_row_tile.h). Threads past the last row
// (active false) still take part in the row's reductions; their addresses use row 0.
template <int COLS, int VEC, int THREADS, int ROWS, int MAX_ITEMS = MOJO_ROW_REGISTER_VECTORS(THREADS * ROWS, 1)>
struct RowTile {
  static_assert(COLS % VEC == 0, "VEC must divide the row length");
  static_assert(ROWS == 1 || THREADS <= 32, "several rows per block need narrow rows");
  enum : int {  // constants without storage (a static constexpr member would be a global in the PTX)
    NV = COLS / VEC,                       // vectors per row
    ITEMS = (NV + THREADS - 1) / THREADS,  // vectors per thread
    IN_REGISTERS = ITEMS <= MAX_ITEMS,
  };
  int lane;        // this thread's place in its row
  long long row;   // its row
  bool active;     // row < rows
  // row, or 0 past the last: for addresses.
  __device__ __forceinline__ long long safe() const { return active ? row : 0; }

  __device__ __forceinline__ explicit RowTile(long long rows) {
    const unsigned tid = thread_x();
    lane = int(tid % THREADS);
    row = (long long)block_x() * ROWS + tid / THREADS;
    active = row < rows;
  }
  // f(i, v) for each of this thread's vectors v of its row (its item i), in order (for_items).
  template <class F> __device__ __forceinline__ void for_each(F f) const {
    for_items<ITEMS, IN_REGISTERS>([&](int i) {
      if (const int v = lane + i * THREADS; active && v < NV) f(i, v);
    });
  }
};

// The blocks an SM a norm's kernel asks for in its launch bounds: a full SM where each thread holds at most
// two vectors of its row (32 registers hold them without spills) and the blocks fill the SM's threads
// exactly, so that the grid's last wave is as full as the row count allows (the occupancy the registers
// left, 10 to 12 blocks of 128, gave 4096 rows 2.6 to 3.1 waves: 79-85% of copy measured on the H100);
// else what the registers allow (blocks of 384 or 640 threads cannot fill an SM, and at 32 registers
// add_rms_norm f32 spilled).
template <int COLS, int VEC, int THREADS, int ROWS>
inline constexpr int kNormBlocksPerSm =
    RowTile<COLS, VEC, THREADS, ROWS>::ITEMS <= 2 && kSmThreads % (THREADS * ROWS) == 0 ? kFullOccupancyBlocks<THREADS * ROWS>
                                                                                         : 1;

// ---- a row split over CHUNKS blocks (sample, softmax of few long rows) ----------
// Block c of a row reads the row's vectors [first, end): chunk c of CHUNKS.
template <class T, int COLS, int VEC, int THREADS, int CHUNKS>
struct RowChunk {
  static_assert(COLS % VEC == 0, "VEC must divide the row length");
  enum : int { NV = COLS / VEC, CV = (NV + CHUNKS - 1) / CHUNKS };  // vectors a row, a chunk
  int first, end;
  __device__ __forceinline__ explicit RowChunk(int c)
      : first(c * CV < NV ? c * CV : NV), end(c * CV + CV < NV ? c * CV + CV : NV) {}
  // f(column, value) for every element of the chunk of `row`, VEC at a time, spread over the block.
  template <class F> __device__ __forceinline__ void for_each(const T* row, F f) const {
#pragma unroll 4
    for (int v = first + int(thread_x()); v < end; v += THREADS) {
      const Pack<T, VEC> p = load<T, VEC>(row + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) f(v * VEC + j, to_float(p.v[j]));
    }
  }
};

// The max of some values and the sum of exp(x - max) over them, in one pass
// (the running sum is rescaled when the max grows). -inf and NaN add nothing.
struct OnlineSum {
  float max = neg_inf(), sum = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (!(x > neg_inf())) return;
    if (x > max) {
      sum *= exp_approx(max - x);
      max = x;
    }
    sum += exp_approx(x - max);
  }
  // Another part's, as if its values had been added here.
  __device__ __forceinline__ void merge(float other_max, float other_sum) {
    if (!(other_sum > 0.f)) return;
    if (other_max > max) {
      sum = sum * exp_approx(max - other_max);
      max = other_max;
    }
    sum += other_sum * exp_approx(other_max - max);
  }
  // Over the block: every thread gets the block's max and sum (in the same order on every run).
  template <int THREADS> __device__ __forceinline__ OnlineSum block(float* scratch) const {
    OnlineSum r;
    r.max = block_reduce<THREADS>(max, scratch, Max());
    r.sum = block_sum<THREADS>(sum == 0.f ? 0.f : sum * exp_approx(max - r.max), scratch);
    return r;
  }
  // The parts parts[2 * i] (max), parts[2 * i + 1] (sum) for i < n, merged in order.
  __device__ __forceinline__ static OnlineSum of_parts(const float* parts, int n) {
    OnlineSum r;
    for (int i = 0; i < n; ++i) r.merge(parts[2 * i], parts[2 * i + 1]);
    return r;
  }
};

// ---- shared memory: addresses, counters, a block-wide prefix sum ---------------
#if defined(MOJO_CPU)
__device__ __forceinline__ unsigned smem_address(const void* p) { return cpu::api().smem_address(p); }
// A block's threads are fibers of one OS thread on the CPU device, switched
// only at primitives; the add is still atomic (relaxed, as red.shared is) so
// that the TSan build's race detector knows it for one.
__device__ __forceinline__ void shared_add(unsigned* p, unsigned v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
__device__ __forceinline__ unsigned shared_fetch_add(unsigned* p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
#else
// The 32-bit shared-window address of a generic pointer into shared memory. Convert a tile's base and add
// offsets to the result (smem_address(tile) + offset), not smem_address(tile + offset): NVRTC then adds each
// offset to the 64-bit generic pointer before converting it, and ptxas kept those 64-bit sums live (the paged
// decode kernel at q_len 8 took 222 registers that way on sm_90a, 168 this way; LLVM's 32-bit shared pointers,
// -fcuda-short-ptr, spare it the same).
__device__ __forceinline__ unsigned smem_address(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// *p += v on a shared-memory counter, atomically (integers: the same sum in any order).
__device__ __forceinline__ void shared_add(unsigned* p, unsigned v) {
  asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(smem_address(p)), "r"(v) : "memory");
}
// The same, returning the old value.
__device__ __forceinline__ unsigned shared_fetch_add(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.shared.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(smem_address(p)), "r"(v) : "memory");
  return old;
}
#endif
// *p += v on a 64-bit shared-memory counter, as two 32-bit atomics: the low word's add returns the old low
// word, whose carry goes into the high word's add with v's high bits. ptxas has no native 64-bit shared add
// on sm_80/sm_90: red.shared.add.u64 becomes a compare-and-swap loop (ATOMS.CAST.SPIN.64), which retries
// once per other thread updating the same address, so a histogram whose keys all fall in one bin (ties)
// slowed down with the contention. The sum is exact in any order: the low word wraps once per carry
// counted. No reader sees the two words between the adds (readers come after a barrier).
__device__ __forceinline__ void shared_add(unsigned long long* p, unsigned long long v) {
  unsigned* const words = reinterpret_cast<unsigned*>(p);  // little-endian: low word first
  const unsigned low = unsigned(v);
  unsigned high = unsigned(v >> 32);
  if (low != 0 && shared_fetch_add(&words[0], low) > ~low) ++high;  // old + low >= 2^32
  if (high != 0) shared_add(&words[1], high);
}

// ---- blocks that pass results through global memory -----------------------------
// The last block of a group to finish a step does the group's merge: each
// block writes its part, then arrive()s at the group's counter (which starts
// at 0); the block that sees blocks - 1 is the last, and after a fence_gpu()
// it reads every part with load_gpu(). No block waits for another, so this
// needs no co-residency (unlike a grid barrier), and the CPU device, which
// runs blocks on several OS threads, gives the same result.
#if defined(MOJO_CPU)
// acq_rel: TSan sees the writes before one block's arrival happen before the last block's reads.
__device__ __forceinline__ unsigned arrive(unsigned* counter) {
  return __atomic_fetch_add(counter, 1u, __ATOMIC_ACQ_REL);
}
// A number no other caller of take_ticket on `counter` gets (its old value). Relaxed: it orders nothing (a
// block publishes what it wrote in the numbered slot with its arrive() later).
__device__ __forceinline__ unsigned take_ticket(unsigned* counter) {
  return __atomic_fetch_add(counter, 1u, __ATOMIC_RELAXED);
}
__device__ __forceinline__ void fence_gpu() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
__device__ __forceinline__ unsigned long long load_gpu(const unsigned long long* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
__device__ __forceinline__ void store_gpu(unsigned* p, unsigned v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
#else
__device__ __forceinline__ unsigned arrive(unsigned* counter) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
  return old;
}
__device__ __forceinline__ unsigned take_ticket(unsigned* counter) {
  unsigned old;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
  return old;
}
__device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// From L2, never a stale line of this SM's L1: another block wrote it during this launch.
__device__ __forceinline__ unsigned long long load_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// A store other blocks may read during this launch (a counter they wait on, say): to L2, as atomics see it.
__device__ __forceinline__ void store_gpu(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
#endif

// ---- blocks that wait for each other: cooperative launches only -------------------
// A block may wait for another only where every block of the grid is resident at once: a cooperative launch
// (LaunchOptions::cooperative; an op asks for one with LaunchGeometry::cooperative). Elsewhere the waiting
// block may hold the SM the other one needs, and the GPU hangs; the CPU device fails such a launch.
// Returns once *counter >= value (an acquire load: what the blocks that arrive()d there wrote before is then
// visible to the caller).
#if defined(MOJO_CPU)
__device__ __forceinline__ void wait_at_least(const unsigned* counter, unsigned value) {
  cpu::api().wait_at_least(counter, value);
}
#else
__device__ __forceinline__ void wait_at_least(const unsigned* counter, unsigned value) {
  for (;;) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    if (v >= value) return;
    asm volatile("nanosleep.u32 32;" ::: "memory");
  }
}
#endif
// A barrier of `blocks` blocks (of a row, say): what any of their threads wrote before it is visible to all of
// their threads after it. `counter` starts at 0 and serves one barrier. Thread 0 arrives for its block after
// the block's own barrier, as a grid barrier of cooperative groups does: its fence makes the block's writes,
// ordered before it by the barrier, visible at GPU scope.
__device__ __forceinline__ void sync_blocks(unsigned* counter, unsigned blocks) {
  sync_block();
  if (thread_x() == 0) {
    fence_gpu();
    arrive(counter);
    wait_at_least(counter, blocks);
  }
  sync_block();
}
// The end of `blocks` blocks' use of `count` sync words (OpDef::sync_words: zero when a launch starts, and left
// zero for the next launch): each block calls this once, after its last use of them, and the last to get here
// zeroes them all. The last word counts the blocks that got here: callers keep it for that. Every block's
// arrival comes after its last use (the block's barrier, then an acq_rel add), so no block still waits on a
// word the last one zeroes. (Relaxed atomic stores: the CPU device's scheduler reads a waited-on word atomically,
// unordered with its blocks, and TSan would call a plain store beside it a race.)
__device__ __forceinline__ void leave_sync_words(unsigned* words, int count, unsigned blocks) {
  sync_block();
  if (thread_x() == 0 && arrive(words + count - 1) == blocks - 1)
    for (int i = 0; i < count; ++i) store_gpu(words + i, 0u);
}

// ---- the start of every kernel: programmatic dependent launch (sm_90+) --------------
// Every kernel calls this first, before it touches global memory. Launched with programmatic dependent launch
// (RuntimeOptions::programmatic_dependent_launch), a kernel may start while the kernel before it in the stream
// is still running; griddepcontrol.wait holds it until that kernel has finished and its writes are visible
// (and that kernel waited for its own predecessor the same way). launch_dependents then lets the next kernel
// start once every block of this one has started: it takes SMs this grid's last wave leaves idle, and its
// launch latency hides under this grid's tail. Launched without it (the default), the kernel before has
// finished already and the wait returns at once. Older GPUs and the CPU device run launches one after another.
#if defined(MOJO_CPU) || __CUDA_ARCH__ < 900
__device__ __forceinline__ void after_previous_kernels() {}
#else
__device__ __forceinline__ void after_previous_kernels() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#endif

// The sum of `v` over the threads before this one (in thread order) of a
// block of THREADS threads, and in `total` over all of them. `scratch`: 2 *
// THREADS values of shared memory. Integers, so the result is exact.
template <int THREADS>
__device__ __forceinline__ unsigned long long block_exclusive_sum(unsigned long long v, unsigned long long* scratch,
                                                                  unsigned long long& total) {
  const unsigned tid = thread_x();
  unsigned long long *in = scratch, *out = scratch + THREADS;
  in[tid] = v;
  sync_block();
#pragma unroll
  for (int d = 1; d < THREADS; d *= 2) {  // Hillis-Steele: after the round for d, in[t] sums t - 2d < j <= t
    out[tid] = in[tid] + (tid >= unsigned(d) ? in[tid - d] : 0ull);
    sync_block();
    unsigned long long* t = in;
    in = out;
    out = t;
  }
  const unsigned long long inclusive = in[tid];
  total = in[THREADS - 1];
  sync_block();  // scratch may be reused right after
  return inclusive - v;
}

}  // namespace mojo
