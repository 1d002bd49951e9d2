// softmax:          out[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max))
// log_softmax:      out[r, :] = x[r, :] - max - log(sum(exp(x[r, :] - max)))
// softmax_backward: grad_x[r, :] = out[r, :] * (grad_out[r, :] - sum(grad_out[r, :] * out[r, :]))
//
// Over the last dim; storage in T, math in float.
//
// Params: T, COLS, VEC, THREADS, ROWS (as rms_norm.cu), and for the forward
// LOG (1: log_softmax); the chunked form: CHUNKS (blocks a row) and STEP. Kernel args:
//   forward:  MOJO_SOFTMAX_ARGS (softmax_args.h)
//   backward: MOJO_SOFTMAX_BACKWARD_ARGS (softmax_args.h), contiguous
// Geometry: block = THREADS * ROWS threads, grid = ceil(rows / ROWS).
//
// A row up to 16 vectors per thread stays in registers: one read, the exact
// max, then the sum. Wider rows (a vocabulary: 151,936 columns is ~19
// vectors per thread of 1,024) take one online pass that keeps a running max
// and rescales the running sum, then a second pass that writes; the second
// read of the row hits L2.
//
// Few long rows (fewer than the GPU has SMs) are split over CHUNKS blocks a
// row (mojo::RowChunk), a plan of two steps (STEP):
//   0: each block's part of its row: max and sum of exp(x - max) (forward),
//      sum(grad_out * out) (backward), into parts;
//   1: each block merges its row's parts, in chunk order (so every block of
//      the row gets the same bits), and writes its chunk; its second read of
//      the chunk hits L2.
// Geometry of that form: block = THREADS, grid = rows * CHUNKS.
#include "mojo_prelude.cuh"
#include "softmax_args.h"

namespace mojo_softmax {

// What both forms (a row in one block, or over CHUNKS) write for one element: the output at d = x - max
// (softmax: exp(d) / sum; log_softmax: d - log(sum)), and the backward's grad_x from out (y) and grad_out (dy)
// with the row's dot = sum(grad_out * out).
template <bool LOG> __device__ __forceinline__ float output_of(float d, float inv_sum, float log_sum) {
  return LOG ? d - log_sum : mojo::exp_approx(d) * inv_sum;
}
__device__ __forceinline__ float grad_x_of(float y, float dy, float dot) { return y * (dy - dot); }

template <class T, int COLS, int VEC, int THREADS, int ROWS, bool LOG>
__device__ __forceinline__ void forward(T* __restrict__ out, const T* __restrict__ x, long long rows,
                                        long long out_stride, long long x_stride) {
  using Tile = mojo::RowTile<COLS, VEC, THREADS, ROWS>;
  constexpr int NV = Tile::NV, ITEMS = Tile::ITEMS;
  constexpr bool IN_REGISTERS = Tile::IN_REGISTERS;
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];

  const Tile tile(rows);
  const int lane = tile.lane;
  const bool active = tile.active;
  const T* xr = x + tile.safe() * x_stride;
  T* outr = out + tile.safe() * out_stride;

  float max = mojo::neg_inf(), sum = 0.f;
  P cached[IN_REGISTERS ? ITEMS : 1];
  if constexpr (IN_REGISTERS) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int v = lane + i * THREADS;
      if (active && v < NV) {
        cached[i] = mojo::load<T, VEC>(xr + v * VEC);
#pragma unroll
        for (int j = 0; j < VEC; ++j) max = mojo::max_f(max, mojo::to_float(cached[i].v[j]));
      }
    }
    max = mojo::row_reduce<THREADS>(max, scratch, mojo::Max());
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int v = lane + i * THREADS;
      if (active && v < NV) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) sum += mojo::exp_approx(mojo::to_float(cached[i].v[j]) - max);
      }
    }
  } else {
#pragma unroll 4
    for (int v = lane; v < NV; v += THREADS) {
      if (!active) break;
      const P p = mojo::load<T, VEC>(xr + v * VEC);
      float vmax = mojo::to_float(p.v[0]);
#pragma unroll
      for (int j = 1; j < VEC; ++j) vmax = mojo::max_f(vmax, mojo::to_float(p.v[j]));
      if (vmax > max) {  // rescale the running sum to the new max
        sum *= mojo::exp_approx(max - vmax);
        max = vmax;
      }
      if (max == mojo::neg_inf()) continue;  // all -inf so far (masked): they add 0
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum += mojo::exp_approx(mojo::to_float(p.v[j]) - max);
    }
    const float row_max = mojo::row_reduce<THREADS>(max, scratch, mojo::Max());
    // A thread that saw nothing has max = -inf and sum = 0: it adds 0.
    sum = sum == 0.f ? 0.f : sum * mojo::exp_approx(max - row_max);
    max = row_max;
  }
  sum = mojo::row_reduce<THREADS>(sum, scratch);
  const float inv_sum = 1.f / sum;
  const float log_sum = mojo::log_approx(sum);

#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      P p;
      if constexpr (IN_REGISTERS) p = cached[i];
      else p = mojo::load<T, VEC>(xr + v * VEC);
      P o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = mojo::to_float(p.v[j]) - max;
        o.v[j] = mojo::from_float<T>(output_of<LOG>(d, inv_sum, log_sum));
      }
      mojo::store<T, VEC>(outr + v * VEC, o);
    }
  }
}

template <class T, int COLS, int VEC, int THREADS, int ROWS>
__device__ __forceinline__ void backward(T* __restrict__ grad_x, const T* __restrict__ grad_out,
                                         const T* __restrict__ out, long long rows) {
  using Tile = mojo::RowTile<COLS, VEC, THREADS, ROWS, 8>;  // two packs per item
  constexpr int NV = Tile::NV, ITEMS = Tile::ITEMS;
  constexpr bool IN_REGISTERS = Tile::IN_REGISTERS;
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];

  const Tile tile(rows);
  const int lane = tile.lane;
  const bool active = tile.active;
  const long long offset = tile.safe() * COLS;

  P dy_cached[IN_REGISTERS ? ITEMS : 1], y_cached[IN_REGISTERS ? ITEMS : 1];
  float dot = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      const P dy = mojo::load<T, VEC>(grad_out + offset + v * VEC);
      const P y = mojo::load<T, VEC>(out + offset + v * VEC);
      if constexpr (IN_REGISTERS) {
        dy_cached[i] = dy;
        y_cached[i] = y;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) dot += mojo::to_float(dy.v[j]) * mojo::to_float(y.v[j]);
    }
  }
  dot = mojo::row_reduce<THREADS>(dot, scratch);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      P dy, y;
      if constexpr (IN_REGISTERS) {
        dy = dy_cached[i];
        y = y_cached[i];
      } else {
        dy = mojo::load<T, VEC>(grad_out + offset + v * VEC);
        y = mojo::load<T, VEC>(out + offset + v * VEC);
      }
      P o;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        o.v[j] = mojo::from_float<T>(grad_x_of(mojo::to_float(y.v[j]), mojo::to_float(dy.v[j]), dot));
      mojo::store<T, VEC>(grad_x + offset + v * VEC, o);
    }
  }
}

// ---- the chunked form: few long rows, CHUNKS blocks a row --------------------------

template <class T, int COLS, int VEC, int THREADS, int CHUNKS, int STEP, bool LOG>
__device__ __forceinline__ void forward_chunks(T* __restrict__ out, const T* __restrict__ x, long long out_stride,
                                               long long x_stride, float* __restrict__ parts) {
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];
  const long long r = mojo::block_x() / CHUNKS;
  const int c = int(mojo::block_x() % CHUNKS);
  const mojo::RowChunk<T, COLS, VEC, THREADS, CHUNKS> chunk(c);
  const T* xr = x + r * x_stride;
  float* row_parts = parts + r * CHUNKS * 2;
  if constexpr (STEP == 0) {
    mojo::OnlineSum part;
    chunk.for_each(xr, [&](int, float v) { part.add(v); });
    part = part.template block<THREADS>(scratch);
    if (mojo::thread_x() == 0) {
      row_parts[2 * c] = part.max;
      row_parts[2 * c + 1] = part.sum;
    }
  } else {
    const mojo::OnlineSum row = mojo::OnlineSum::of_parts(row_parts, CHUNKS);
    const float inv_sum = 1.f / row.sum, log_sum = mojo::log_approx(row.sum);
    T* outr = out + r * out_stride;
#pragma unroll 4
    for (int v = chunk.first + int(mojo::thread_x()); v < chunk.end; v += THREADS) {
      const P p = mojo::load<T, VEC>(xr + v * VEC);
      P o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = mojo::to_float(p.v[j]) - row.max;
        o.v[j] = mojo::from_float<T>(output_of<LOG>(d, inv_sum, log_sum));
      }
      mojo::store<T, VEC>(outr + v * VEC, o);
    }
  }
}

template <class T, int COLS, int VEC, int THREADS, int CHUNKS, int STEP>
__device__ __forceinline__ void backward_chunks(T* __restrict__ grad_x, const T* __restrict__ grad_out,
                                                const T* __restrict__ out, float* __restrict__ parts) {
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];
  const long long r = mojo::block_x() / CHUNKS;
  const int c = int(mojo::block_x() % CHUNKS);
  const mojo::RowChunk<T, COLS, VEC, THREADS, CHUNKS> chunk(c);
  const long long offset = r * COLS;
  float* row_parts = parts + r * CHUNKS;
  if constexpr (STEP == 0) {
    float dot = 0.f;
#pragma unroll 4
    for (int v = chunk.first + int(mojo::thread_x()); v < chunk.end; v += THREADS) {
      const P dy = mojo::load<T, VEC>(grad_out + offset + v * VEC), y = mojo::load<T, VEC>(out + offset + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) dot += mojo::to_float(dy.v[j]) * mojo::to_float(y.v[j]);
    }
    dot = mojo::block_sum<THREADS>(dot, scratch);
    if (mojo::thread_x() == 0) row_parts[c] = dot;
  } else {
    float dot = 0.f;
    for (int i = 0; i < CHUNKS; ++i) dot += row_parts[i];
#pragma unroll 4
    for (int v = chunk.first + int(mojo::thread_x()); v < chunk.end; v += THREADS) {
      const P dy = mojo::load<T, VEC>(grad_out + offset + v * VEC), y = mojo::load<T, VEC>(out + offset + v * VEC);
      P o;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        o.v[j] = mojo::from_float<T>(grad_x_of(mojo::to_float(y.v[j]), mojo::to_float(dy.v[j]), dot));
      mojo::store<T, VEC>(grad_x + offset + v * VEC, o);
    }
  }
}

}  // namespace mojo_softmax

#define MOJO_SOFTMAX_KERNEL(NAME, T, COLS, VEC, THREADS, ROWS, LOG)                                        \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS)                                             \
      NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_ARGS, T)) {                                                        \
    mojo::after_previous_kernels();                                                                        \
    mojo_softmax::forward<T, COLS, VEC, THREADS, ROWS, LOG != 0>(out, x, rows, out_stride, x_stride);      \
  }

#define MOJO_SOFTMAX_BACKWARD_KERNEL(NAME, T, COLS, VEC, THREADS, ROWS)                                    \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS)                                             \
      NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_BACKWARD_ARGS, T)) {                                               \
    mojo::after_previous_kernels();                                                                       \
    mojo_softmax::backward<T, COLS, VEC, THREADS, ROWS>(grad_x, grad_out, out, rows);                     \
  }
#define MOJO_KERNEL_softmax(NAME, P) MOJO_SOFTMAX_KERNEL(NAME, P::dtype, P::cols, P::vec, P::threads, P::rows, P::log)
#define MOJO_KERNEL_log_softmax MOJO_KERNEL_softmax
#define MOJO_KERNEL_softmax_backward(NAME, P) \
  MOJO_SOFTMAX_BACKWARD_KERNEL(NAME, P::dtype, P::cols, P::vec, P::threads, P::rows)

// The chunked form (few long rows): P::chunks blocks a row, a plan of two steps (P::step).
#define MOJO_KERNEL_softmax_chunks(NAME, P)                                                                      \
  extern "C" __global__ void __launch_bounds__(P::threads) NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_ARGS, P::dtype)) { \
    mojo::after_previous_kernels();                                                                            \
    mojo_softmax::forward_chunks<P::dtype, P::cols, P::vec, P::threads, P::chunks, P::step, P::log != 0>(      \
        out, x, out_stride, x_stride, parts);                                                                  \
  }
#define MOJO_KERNEL_softmax_backward_chunks(NAME, P)                                                             \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                      \
      NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_BACKWARD_ARGS, P::dtype)) {                                             \
    mojo::after_previous_kernels();                                                                            \
    mojo_softmax::backward_chunks<P::dtype, P::cols, P::vec, P::threads, P::chunks, P::step>(grad_x, grad_out, \
                                                                                           out, parts);        \
  }
