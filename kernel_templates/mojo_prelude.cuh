// mojo_prelude.cuh: the small portable device prelude every template includes.
//
// It needs no CUDA SDK header, so the same templates compile with NVRTC and
// with clang (-nocudainc): storage types and conversions, special registers,
// warp/block reductions, vector loads/stores and fast math are defined here
// once, on inline PTX where the two front ends would differ.
//
// Template convention: a template file `<op>.cu` defines
//   #define MOJO_KERNEL_<op>(NAME, <params in the OpDef's order>)
// which expands to one `extern "C" __global__` kernel called NAME. The runtime
// appends one such line per specialization, so several specializations (and
// several templates) can share one module.
#pragma once

#if !defined(__CUDACC_RTC__)
// clang's CUDA front end without the SDK headers: spell out what NVRTC has built in.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#endif

namespace mojo {

// ---- special registers -------------------------------------------------------
#if defined(__CUDACC_RTC__)
__device__ __forceinline__ unsigned thread_x() { return threadIdx.x; }
__device__ __forceinline__ unsigned block_x() { return blockIdx.x; }
__device__ __forceinline__ unsigned block_dim_x() { return blockDim.x; }
__device__ __forceinline__ unsigned grid_dim_x() { return gridDim.x; }
#else
__device__ __forceinline__ unsigned thread_x() { return __nvvm_read_ptx_sreg_tid_x(); }
__device__ __forceinline__ unsigned block_x() { return __nvvm_read_ptx_sreg_ctaid_x(); }
__device__ __forceinline__ unsigned block_dim_x() { return __nvvm_read_ptx_sreg_ntid_x(); }
__device__ __forceinline__ unsigned grid_dim_x() { return __nvvm_read_ptx_sreg_nctaid_x(); }
#endif
__device__ __forceinline__ void sync_block() { __syncthreads(); }

// ---- storage types and conversions -------------------------------------------
// 16-bit floats are stored as raw bits; all math happens in float.
struct alignas(2) f16 {
  unsigned short bits;
};
struct alignas(2) bf16 {
  unsigned short bits;
};

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

template <class T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<bf16>(bf16 v) {
  return bits_to_float(unsigned(v.bits) << 16);
}
template <> __device__ __forceinline__ float to_float<f16>(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ f16 from_float<f16>(float v) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 b;
#if __CUDA_ARCH__ >= 800
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

// ---- fast math (PTX approximations; error bounds in the PTX ISA manual) -------
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

template <class T, int N> __device__ __forceinline__ Pack<T, N> load(const T* p) {
  Pack<T, N> r;
  r.bits = *reinterpret_cast<const Bits<sizeof(T) * N>*>(p);
  return r;
}
template <class T, int N> __device__ __forceinline__ void store(T* p, const Pack<T, N>& v) {
  *reinterpret_cast<Bits<sizeof(T) * N>*>(p) = v.bits;
}

// ---- reductions ------------------------------------------------------------------
__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(lane_mask));
  return r;
}

// Sum over aligned groups of WIDTH lanes (a power of two <= 32); every lane of
// the warp must call it. Each lane gets its group's sum.
template <int WIDTH> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) v += shfl_xor(v, offset);
  return v;
}

// Sum over a block of THREADS threads (a multiple of 32). `scratch` holds 32
// floats of shared memory. Every thread gets the sum.
template <int THREADS> __device__ __forceinline__ float block_sum(float v, float* scratch) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block_sum needs whole warps");
  v = group_sum<32>(v);
  if (THREADS == 32) return v;
  const unsigned tid = thread_x();
  if (tid % 32 == 0) scratch[tid / 32] = v;
  sync_block();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) total += scratch[w];
  sync_block();  // scratch may be reused right after
  return total;
}

}  // namespace mojo
