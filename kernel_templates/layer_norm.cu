// layer_norm: out = (x - mean) * rstd * weight + bias, over the last dim;
//             optionally writes mean[r] and rstd[r] (float) for the backward
//             (norm_backward.cu)
//
// rstd = 1 / sqrt(var + eps), var the biased variance (as PyTorch). Storage
// in T; math, mean and rstd in float.
//
// Params: T, HIDDEN, VEC, THREADS, ROWS (as rms_norm.cu), STATS (1: write
// mean and rstd). Kernel args: MOJO_LAYER_NORM_ARGS (layer_norm_args.h).
// Geometry: as rms_norm.
#include "mojo_prelude.cuh"
#include "layer_norm_args.h"

namespace mojo_layer_norm {

template <class T, int HIDDEN, int VEC, int THREADS, int ROWS, bool STATS>
__device__ __forceinline__ void forward(T* __restrict__ out, float* __restrict__ mean_out,
                                        float* __restrict__ rstd_out, const T* __restrict__ x,
                                        const T* __restrict__ weight, const T* __restrict__ bias, float eps,
                                        long long rows, long long out_stride, long long x_stride) {
  using Tile = mojo::RowTile<HIDDEN, VEC, THREADS, ROWS>;
  constexpr int ITEMS = Tile::ITEMS;
  constexpr bool IN_REGISTERS = Tile::IN_REGISTERS;
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];

  const Tile tile(rows);
  const int lane = tile.lane;
  const long long row = tile.row;
  const bool active = tile.active;
  const T* xr = x + tile.safe() * x_stride;
  T* outr = out + tile.safe() * out_stride;

  // Two passes (mean, then the squares around it): exact where the
  // one-pass sum of squares cancels.
  P cached[IN_REGISTERS ? ITEMS : 1];
  float sum = 0.f;
  tile.for_each([&](int i, int v) {
    const P p = mojo::load<T, VEC>(xr + v * VEC);
    if constexpr (IN_REGISTERS) cached[i] = p;
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum += mojo::to_float(p.v[j]);
  });
  const float mean = mojo::row_reduce<THREADS>(sum, scratch) * (1.0f / HIDDEN);
  float sum_sq = 0.f;
  tile.for_each([&](int i, int v) {
    P p;
    if constexpr (IN_REGISTERS) p = mojo::opaque(cached[i]);
    else p = mojo::load<T, VEC>(xr + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = mojo::to_float(p.v[j]) - mean;
      sum_sq += d * d;
    }
  });
  const float rstd = mojo::rsqrt_approx(mojo::row_reduce<THREADS>(sum_sq, scratch) * (1.0f / HIDDEN) + eps);
  if (STATS && active && lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  tile.for_each([&](int i, int v) {
    P p;
    if constexpr (IN_REGISTERS) p = mojo::opaque(cached[i]);
    else p = mojo::load<T, VEC>(xr + v * VEC);
    const P w = mojo::load<T, VEC>(weight + v * VEC);
    const P b = mojo::load<T, VEC>(bias + v * VEC);
    P o;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o.v[j] = mojo::from_float<T>((mojo::to_float(p.v[j]) - mean) * rstd * mojo::to_float(w.v[j]) +
                                   mojo::to_float(b.v[j]));
    mojo::store<T, VEC>(outr + v * VEC, o);
  });
}

}  // namespace mojo_layer_norm

#define MOJO_LAYER_NORM_KERNEL(NAME, T, HIDDEN, VEC, THREADS, ROWS, STATS)                                   \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS, mojo::kNormBlocksPerSm<HIDDEN, VEC, THREADS, ROWS>) \
      NAME(MOJO_ARG_PARAMS(MOJO_LAYER_NORM_ARGS, T)) {                                                      \
    mojo::after_previous_kernels();                                                                         \
    mojo_layer_norm::forward<T, HIDDEN, VEC, THREADS, ROWS, STATS != 0>(out, mean, rstd, x, weight, bias,   \
                                                                        eps, rows, out_stride, x_stride);   \
  }

#define MOJO_KERNEL_layer_norm(NAME, P) \
  MOJO_LAYER_NORM_KERNEL(NAME, P::dtype, P::hidden, P::vec, P::threads, P::rows, P::stats)
