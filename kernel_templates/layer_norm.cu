// layer_norm:          out = (x - mean) * rstd * weight + bias, over the last dim;
//                      optionally writes mean[r] and rstd[r] (float) for the backward
// layer_norm_backward: grad_x, grad_weight, grad_bias from grad_out, x, weight, mean, rstd
//
// rstd = 1 / sqrt(var + eps), var the biased variance (as PyTorch). Storage
// in T; math, mean and rstd in float.
//
// Forward params: T, HIDDEN, VEC, THREADS, ROWS (as rms_norm.cu), STATS (1:
// write mean and rstd). Kernel args: MOJO_LAYER_NORM_ARGS (layer_norm_args.h).
// Geometry: as rms_norm.
//
// Backward params: T, HIDDEN, VEC, THREADS, ROWS, PARTIALS. Kernel args:
// MOJO_LAYER_NORM_BACKWARD_ARGS (layer_norm_args.h), all contiguous. Two
// forms, both deterministic (no atomics, the same bits on every run):
//
// PARTIALS 1, a plan of two steps (every row short enough that a thread's
// columns fit in registers, HIDDEN <= 16384): step 0, a grid of `parts`
// blocks (a full wave of the GPU), each taking rows block, block + parts, ...
// (ROWS at a time): it writes their grad_x and adds their grad_out * xhat and
// grad_out into per-thread f32 registers, then writes the block's sums as
// row `block` of partials; step 1 adds the parts' rows in order, 32 columns a
// block of 256 threads (grid ceil(HIDDEN / 32)). x and grad_out are read once.
// Block of step 0: THREADS * ROWS threads (ROWS > 1 only for THREADS <= 32).
//
// PARTIALS 0, one launch with two kinds of block (wider rows): grid =
// ceil(rows / ROWS) row blocks + ceil(HIDDEN / 32) column blocks. Row blocks
// compute grad_x a row at a time (the row's two sums need the whole row).
// Column blocks each own 32 columns of grad_weight and grad_bias: lane =
// column, warp w sums rows w, w + WARPS, ..., and the warps' sums are added in
// warp order. It reads x and grad_out twice.
#include "mojo_prelude.cuh"
#include "layer_norm_args.h"

namespace mojo_layer_norm {

template <class T, int HIDDEN, int VEC, int THREADS, int ROWS, bool STATS>
__device__ __forceinline__ void forward(T* __restrict__ out, float* __restrict__ mean_out,
                                        float* __restrict__ rstd_out, const T* __restrict__ x,
                                        const T* __restrict__ weight, const T* __restrict__ bias, float eps,
                                        long long rows, long long out_stride, long long x_stride) {
  using Tile = mojo::RowTile<HIDDEN, VEC, THREADS, ROWS>;
  constexpr int NV = Tile::NV, ITEMS = Tile::ITEMS;
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
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      const P p = mojo::load<T, VEC>(xr + v * VEC);
      if constexpr (IN_REGISTERS) cached[i] = p;
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum += mojo::to_float(p.v[j]);
    }
  }
  const float mean = mojo::row_reduce<THREADS>(sum, scratch) * (1.0f / HIDDEN);
  float sum_sq = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      P p;
      if constexpr (IN_REGISTERS) p = cached[i];
      else p = mojo::load<T, VEC>(xr + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = mojo::to_float(p.v[j]) - mean;
        sum_sq += d * d;
      }
    }
  }
  const float rstd = mojo::rsqrt_approx(mojo::row_reduce<THREADS>(sum_sq, scratch) * (1.0f / HIDDEN) + eps);
  if (STATS && active && lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      P p;
      if constexpr (IN_REGISTERS) p = cached[i];
      else p = mojo::load<T, VEC>(xr + v * VEC);
      const P w = mojo::load<T, VEC>(weight + v * VEC);
      const P b = mojo::load<T, VEC>(bias + v * VEC);
      P o;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        o.v[j] = mojo::from_float<T>((mojo::to_float(p.v[j]) - mean) * rstd * mojo::to_float(w.v[j]) +
                                     mojo::to_float(b.v[j]));
      mojo::store<T, VEC>(outr + v * VEC, o);
    }
  }
}

// One vector of grad_x = rstd (g - mean(g) - xhat mean(g xhat)), g = grad_out * weight, xhat = (x - mean) rstd;
// mean_g and mean_gx are the row's means of g and g * xhat.
template <class T, int VEC>
__device__ __forceinline__ mojo::Pack<T, VEC> grad_x_of(const mojo::Pack<T, VEC>& dy, const mojo::Pack<T, VEC>& xv,
                                                      const mojo::Pack<T, VEC>& w, float mu, float rs, float mean_g,
                                                      float mean_gx) {
  mojo::Pack<T, VEC> o;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float g = mojo::to_float(dy.v[j]) * mojo::to_float(w.v[j]);
    const float xhat = (mojo::to_float(xv.v[j]) - mu) * rs;
    o.v[j] = mojo::from_float<T>(rs * (g - mean_g - xhat * mean_gx));
  }
  return o;
}

// grad_x for ROWS rows per block.
template <class T, int HIDDEN, int VEC, int THREADS, int ROWS>
__device__ __forceinline__ void backward_rows(unsigned block, T* __restrict__ grad_x, const T* __restrict__ grad_out,
                                              const T* __restrict__ x, const T* __restrict__ weight,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              long long rows) {
  // Its own prologue rather than mojo::RowTile: through RowTile, LLVM gives the
  // bf16 kernel 63 registers instead of 56 (NVRTC's PTX is the same either way).
  constexpr int NV = HIDDEN / VEC;
  constexpr int ITEMS = (NV + THREADS - 1) / THREADS;
  constexpr bool IN_REGISTERS = ITEMS <= 8;  // two packs per item
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];

  const unsigned tid = mojo::thread_x();
  const int lane = int(tid % THREADS);
  const long long row = (long long)block * ROWS + tid / THREADS;
  const bool active = row < rows;
  const long long offset = (active ? row : 0) * HIDDEN;
  const float mu = active ? mean[row] : 0.f, rs = active ? rstd[row] : 0.f;

  // g = grad_out * weight, xhat = (x - mean) * rstd:
  // grad_x = rstd * (g - (sum(g) + xhat * sum(g * xhat)) / HIDDEN)
  P dy_cached[IN_REGISTERS ? ITEMS : 1], x_cached[IN_REGISTERS ? ITEMS : 1];
  float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      const P dy = mojo::load<T, VEC>(grad_out + offset + v * VEC);
      const P xv = mojo::load<T, VEC>(x + offset + v * VEC);
      const P w = mojo::load<T, VEC>(weight + v * VEC);
      if constexpr (IN_REGISTERS) {
        dy_cached[i] = dy;
        x_cached[i] = xv;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float g = mojo::to_float(dy.v[j]) * mojo::to_float(w.v[j]);
        sum_g += g;
        sum_gx += g * (mojo::to_float(xv.v[j]) - mu) * rs;
      }
    }
  }
  sum_g = mojo::row_reduce<THREADS>(sum_g, scratch) * (1.0f / HIDDEN);
  sum_gx = mojo::row_reduce<THREADS>(sum_gx, scratch) * (1.0f / HIDDEN);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      P dy, xv;
      if constexpr (IN_REGISTERS) {
        dy = dy_cached[i];
        xv = x_cached[i];
      } else {
        dy = mojo::load<T, VEC>(grad_out + offset + v * VEC);
        xv = mojo::load<T, VEC>(x + offset + v * VEC);
      }
      const P w = mojo::load<T, VEC>(weight + v * VEC);
      mojo::store<T, VEC>(grad_x + offset + v * VEC, grad_x_of<T, VEC>(dy, xv, w, mu, rs, sum_g, sum_gx));
    }
  }
}

// Step 0 of the plan: grad_x of this block's rows, and their partial grad_weight and grad_bias.
template <class T, int HIDDEN, int VEC, int THREADS, int ROWS>
__device__ __forceinline__ void backward_rows_and_partials(T* __restrict__ grad_x, const T* __restrict__ grad_out,
                                                           const T* __restrict__ x, const T* __restrict__ weight,
                                                           const float* __restrict__ mean,
                                                           const float* __restrict__ rstd, long long rows,
                                                           float* __restrict__ partials, long long parts) {
  static_assert(ROWS == 1 || THREADS <= 32, "several rows per block need narrow rows");
  constexpr int NV = HIDDEN / VEC;
  constexpr int ITEMS = (NV + THREADS - 1) / THREADS;
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[32];
  const unsigned tid = mojo::thread_x();
  const int lane = int(tid % THREADS), group = int(tid / THREADS);
  const long long block = mojo::block_x();

  P w[ITEMS];
  float dw[ITEMS][VEC], db[ITEMS][VEC];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (v < NV) w[i] = mojo::load<T, VEC>(weight + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) dw[i][j] = db[i][j] = 0.f;
  }
  // Every thread of the block goes round as often (the row reductions may be block-wide).
  for (long long first = block * ROWS; first < rows; first += parts * ROWS) {
    const long long row = first + group;
    const bool active = row < rows;
    const long long offset = (active ? row : 0) * HIDDEN;
    const float mu = active ? mean[row] : 0.f, rs = active ? rstd[row] : 0.f;
    P dy[ITEMS], xv[ITEMS];
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int v = lane + i * THREADS;
      if (active && v < NV) {
        dy[i] = mojo::load<T, VEC>(grad_out + offset + v * VEC);
        xv[i] = mojo::load<T, VEC>(x + offset + v * VEC);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float d = mojo::to_float(dy[i].v[j]), xhat = (mojo::to_float(xv[i].v[j]) - mu) * rs;
          const float g = d * mojo::to_float(w[i].v[j]);
          sum_g += g;
          sum_gx += g * xhat;
          dw[i][j] += d * xhat;
          db[i][j] += d;
        }
      }
    }
    sum_g = mojo::row_reduce<THREADS>(sum_g, scratch) * (1.0f / HIDDEN);
    sum_gx = mojo::row_reduce<THREADS>(sum_gx, scratch) * (1.0f / HIDDEN);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int v = lane + i * THREADS;
      if (active && v < NV) {
        mojo::store<T, VEC>(grad_x + offset + v * VEC,
                            grad_x_of<T, VEC>(dy[i], xv[i], w[i], mu, rs, sum_g, sum_gx));
      }
    }
  }

  // The block's partial: its row groups' sums added in group order (narrow rows), then row `block`.
  float* const part_w = partials + block * HIDDEN;
  float* const part_b = partials + (parts + block) * HIDDEN;
  if constexpr (ROWS == 1) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int v = lane + i * THREADS;
      if (v < NV)
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          part_w[v * VEC + j] = dw[i][j];
          part_b[v * VEC + j] = db[i][j];
        }
    }
  } else {
    __shared__ float sums[2][HIDDEN];
    for (int g = 0; g < ROWS; ++g) {
      if (group == g)
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
          const int v = lane + i * THREADS;
          if (v < NV)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
              const int c = v * VEC + j;
              sums[0][c] = g == 0 ? dw[i][j] : sums[0][c] + dw[i][j];
              sums[1][c] = g == 0 ? db[i][j] : sums[1][c] + db[i][j];
            }
        }
      mojo::sync_block();
    }
    for (int c = int(tid); c < HIDDEN; c += THREADS * ROWS) {
      part_w[c] = sums[0][c];
      part_b[c] = sums[1][c];
    }
  }
}

// grad_weight and grad_bias of the 32 columns of block `block`: warp w adds terms w, w + WARPS, ... of its
// lane's column (term(i, col) gives both), and the warps' sums are added in warp order.
struct Pair {
  float w, b;
};
template <class T, int HIDDEN, int WARPS, class Term>
__device__ __forceinline__ void column_sums(unsigned block, T* __restrict__ grad_weight, T* __restrict__ grad_bias,
                                            long long terms, Term term) {
  __shared__ float partial_w[WARPS][32], partial_b[WARPS][32];
  const unsigned tid = mojo::thread_x();
  const int lane = int(tid % 32), warp = int(tid / 32);
  const int col = int(block) * 32 + lane;
  float dw = 0.f, db = 0.f;
  if (col < HIDDEN)
    for (long long i = warp; i < terms; i += WARPS) {
      const Pair t = term(i, col);
      dw += t.w;
      db += t.b;
    }
  partial_w[warp][lane] = dw;
  partial_b[warp][lane] = db;
  mojo::sync_block();
  if (warp == 0 && col < HIDDEN) {
#pragma unroll
    for (int w = 1; w < WARPS; ++w) {
      dw += partial_w[w][lane];
      db += partial_b[w][lane];
    }
    grad_weight[col] = mojo::from_float<T>(dw);
    grad_bias[col] = mojo::from_float<T>(db);
  }
}

// Step 1 of the plan: the parts' rows of partials added in order, 32 columns a block of 256 threads.
template <class T, int HIDDEN>
__device__ __forceinline__ void backward_add_partials(T* __restrict__ grad_weight, T* __restrict__ grad_bias,
                                                      const float* __restrict__ partials, long long parts) {
  column_sums<T, HIDDEN, 8>(mojo::block_x(), grad_weight, grad_bias, parts, [&](long long p, int col) {
    return Pair{partials[p * HIDDEN + col], partials[(parts + p) * HIDDEN + col]};
  });
}

// The one-launch form's column blocks: the rows' terms, from grad_out and x again.
template <class T, int HIDDEN, int BLOCK>
__device__ __forceinline__ void backward_columns(unsigned block, T* __restrict__ grad_weight,
                                                 T* __restrict__ grad_bias, const T* __restrict__ grad_out,
                                                 const T* __restrict__ x, const float* __restrict__ mean,
                                                 const float* __restrict__ rstd, long long rows) {
  column_sums<T, HIDDEN, BLOCK / 32>(block, grad_weight, grad_bias, rows, [&](long long r, int col) {
    const float dy = mojo::to_float(grad_out[r * HIDDEN + col]);
    return Pair{dy * (mojo::to_float(x[r * HIDDEN + col]) - mean[r]) * rstd[r], dy};
  });
}

}  // namespace mojo_layer_norm

#define MOJO_LAYER_NORM_KERNEL(NAME, T, HIDDEN, VEC, THREADS, ROWS, STATS)                                   \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS)                                              \
      NAME(MOJO_ARG_PARAMS(MOJO_LAYER_NORM_ARGS, T)) {                                                      \
    mojo_layer_norm::forward<T, HIDDEN, VEC, THREADS, ROWS, STATS != 0>(out, mean, rstd, x, weight, bias,   \
                                                                        eps, rows, out_stride, x_stride);   \
  }

#define MOJO_LAYER_NORM_BACKWARD_KERNEL(NAME, T, HIDDEN, VEC, THREADS, ROWS)                                 \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS)                                               \
      NAME(MOJO_ARG_PARAMS(MOJO_LAYER_NORM_BACKWARD_ARGS, T)) {                                              \
    const unsigned row_blocks = unsigned((rows + ROWS - 1) / ROWS);                                          \
    const unsigned block = mojo::block_x();                                                                  \
    if (block < row_blocks)                                                                                  \
      mojo_layer_norm::backward_rows<T, HIDDEN, VEC, THREADS, ROWS>(block, grad_x, grad_out, x, weight, mean, \
                                                                    rstd, rows);                             \
    else                                                                                                     \
      mojo_layer_norm::backward_columns<T, HIDDEN, THREADS * ROWS>(block - row_blocks, grad_weight,         \
                                                                   grad_bias, grad_out, x, mean, rstd, rows); \
  }
#define MOJO_KERNEL_layer_norm(NAME, P) \
  MOJO_LAYER_NORM_KERNEL(NAME, P::dtype, P::hidden, P::vec, P::threads, P::rows, P::stats)
#define MOJO_KERNEL_layer_norm_backward(NAME, P) \
  MOJO_LAYER_NORM_BACKWARD_KERNEL(NAME, P::dtype, P::hidden, P::vec, P::threads, P::rows)
// The plan's steps (PARTIALS 1). Step 0 is bounded to MIN_BLOCKS blocks an SM: its grid is that many a
// SM, one wave, so the registers must allow them.
#define MOJO_LAYER_NORM_BACKWARD_PARTIALS(NAME, P)                                                             \
  extern "C" __global__ void __launch_bounds__(P::step == 0 ? P::threads * P::rows : 256,                   \
                                               P::step == 0 ? P::min_blocks : 1)                            \
      NAME(MOJO_ARG_PARAMS(MOJO_LAYER_NORM_BACKWARD_ARGS, P::dtype)) {                                       \
    if constexpr (P::step == 0)                                                                              \
      mojo_layer_norm::backward_rows_and_partials<P::dtype, P::hidden, P::vec, P::threads, P::rows>(         \
          grad_x, grad_out, x, weight, mean, rstd, rows, partials, parts);                                   \
    else                                                                                                     \
      mojo_layer_norm::backward_add_partials<P::dtype, P::hidden>(grad_weight, grad_bias, partials, parts);  \
  }
