// rms_norm:     out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight
// add_rms_norm: residual[r, :] += x[r, :]; out[r, :] = rms_norm(residual[r, :])
//               (the residual is rounded to T first, and that value normalised)
//
// Over the last dim of [rows, HIDDEN] tensors whose rows are evenly strided;
// storage in T, math and accumulation in float, one rounding at the store.
//
// Params (read by name, P::dtype, P::hidden, ..., in the entry macros at the end):
//   T        f32, f16 or bf16 storage for every tensor
//   HIDDEN   row length, a compile-time constant so the row loop unrolls and
//            the row can live in registers
//   VEC      elements per load/store: 16 bytes when the pointers, strides and
//            HIDDEN allow, else smaller (1 for odd hidden sizes)
//   THREADS  threads per row: a power of two <= 32, or a multiple of 32
//   ROWS     rows per block; > 1 only when THREADS <= 32 (narrow rows)
// Kernel args: MOJO_RMS_NORM_ARGS (rms_norm_args.h).
// Geometry: block = THREADS * ROWS threads, grid = ceil(rows / ROWS).
//
// Why this shape: the op moves 2 (add: 4) * rows * HIDDEN elements and does
// almost no math, so it is a single pass over HBM. Each thread loads its
// ITEMS vectors of the row once and keeps them in registers across the
// reduction (rows of up to 16 vectors per thread); wider rows re-read the
// row, which then hits L2.
#include "mojo_prelude.cuh"
#include "rms_norm_args.h"

namespace mojo_rms_norm {

template <class T, int HIDDEN, int VEC, int THREADS, int ROWS, bool ADD>
__device__ __forceinline__ void run(T* __restrict__ out, T* __restrict__ residual, const T* __restrict__ x,
                                    const T* __restrict__ weight, float eps, long long rows, long long out_stride,
                                    long long residual_stride, long long x_stride) {
  using Tile = mojo::RowTile<HIDDEN, VEC, THREADS, ROWS>;
  constexpr int ITEMS = Tile::ITEMS;
  constexpr bool IN_REGISTERS = Tile::IN_REGISTERS;
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];

  const Tile tile(rows);
  const long long r = tile.safe();
  const T* xr = x + r * x_stride;
  T* outr = out + r * out_stride;
  T* resr = ADD ? residual + r * residual_stride : nullptr;
  // The row the norm reads: x, or the updated residual.
  const T* in = ADD ? resr : xr;

  P cached[IN_REGISTERS ? ITEMS : 1];
  float sum_sq = 0.f;
  tile.for_each([&](int i, int v) {
    P p = mojo::load<T, VEC>(xr + v * VEC);
    if constexpr (ADD) {
      const P res = mojo::load<T, VEC>(resr + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) p.v[j] = mojo::from_float<T>(mojo::to_float(p.v[j]) + mojo::to_float(res.v[j]));
      mojo::store<T, VEC>(resr + v * VEC, p);
    }
    if constexpr (IN_REGISTERS) cached[i] = p;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float f = mojo::to_float(p.v[j]);
      sum_sq += f * f;
    }
  });

  sum_sq = mojo::row_reduce<THREADS>(sum_sq, scratch);
  const float scale = mojo::rsqrt_approx(sum_sq * (1.0f / HIDDEN) + eps);

  tile.for_each([&](int i, int v) {
    P p;
    if constexpr (IN_REGISTERS) p = cached[i];
    else p = mojo::load<T, VEC>(in + v * VEC);  // this thread wrote it: no barrier needed
    const P w = mojo::load<T, VEC>(weight + v * VEC);
    P o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = mojo::from_float<T>(mojo::to_float(p.v[j]) * scale * mojo::to_float(w.v[j]));
    mojo::store<T, VEC>(outr + v * VEC, o);
  });
}

}  // namespace mojo_rms_norm

#define MOJO_RMS_NORM_KERNEL(NAME, T, HIDDEN, VEC, THREADS, ROWS, ADD)                                    \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS, mojo::kNormBlocksPerSm<HIDDEN, VEC, THREADS, ROWS>) \
      NAME(MOJO_ARG_PARAMS(MOJO_RMS_NORM_ARGS, T)) {                                                     \
    mojo::after_previous_kernels();                                                                         \
    mojo_rms_norm::run<T, HIDDEN, VEC, THREADS, ROWS, ADD>(out, residual, x, weight, eps, rows, out_stride, \
                                                           residual_stride, x_stride);                    \
  }
#define MOJO_KERNEL_rms_norm(NAME, P) MOJO_RMS_NORM_KERNEL(NAME, P::dtype, P::hidden, P::vec, P::threads, P::rows, false)
#define MOJO_KERNEL_add_rms_norm(NAME, P) \
  MOJO_RMS_NORM_KERNEL(NAME, P::dtype, P::hidden, P::vec, P::threads, P::rows, true)
