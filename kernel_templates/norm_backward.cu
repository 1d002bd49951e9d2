// layer_norm_backward: grad_x, grad_weight, grad_bias of layer_norm (layer_norm.cu) from grad_out, x,
//                      weight and the forward's mean and rstd
// rms_norm_backward:   grad_x, grad_weight of rms_norm (rms_norm.cu) from grad_out, x and weight, rstd
//                      computed again from x (the row is read anyway). For add_rms_norm, x is the updated
//                      residual, and grad_residual (the gradient that reached it from the layers after),
//                      when given, is added to grad_x: then grad_x is the gradient of both of its inputs.
//
// With xhat = (x - mean) * rstd (rms_norm: mean 0 and rstd = 1 / sqrt(mean(x^2) + eps), as the forward
// computes it) and g = grad_out * weight, for each row:
//   grad_x      = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rms_norm: without mean(g))
//   grad_weight = the sum over rows of grad_out * xhat
//   grad_bias   = the sum over rows of grad_out                  (layer_norm)
// Storage in T, math in f32.
//
// Params: T, HIDDEN, VEC, THREADS, ROWS (as rms_norm.cu), PARTIALS, MIN_BLOCKS, STEP; rms_norm_backward's
// RESIDUAL (1: grad_residual given). Kernel args: MOJO_NORM_BACKWARD_ARGS (norm_backward_args.h).
// Two forms, each a plan of two steps, both deterministic (no atomics: the same bits on every run):
//
// PARTIALS 1 or 2 (a thread's columns fit in registers: HIDDEN up to 16384 to 24576; with 1 the thread holds
// its vectors of the weight too, with 2 it reads them again at each row): step 0 is a grid of `parts`
// blocks (at most a wave of MIN_BLOCKS an SM), each taking rows block, block + parts, ... (ROWS at a time):
// it writes their grad_x and adds their grad_out * xhat (and grad_out) into per-thread f32 registers, then
// writes the block's sums as row `block` of the workspace, partials [1 or 2][parts][HIDDEN]. Step 1 adds the
// parts' rows in order, 32 columns a block of 256 threads (grid ceil(HIDDEN / 32)). x and grad_out are read
// once. Block of step 0: THREADS * ROWS threads (ROWS > 1 only for THREADS <= 32).
//
// PARTIALS 0 (wider rows): step 0, ceil(rows / ROWS) blocks write grad_x a row at a time (a row's two sums
// need the whole row), and rms_norm's rstd into the workspace [rows]. Step 1, ceil(HIDDEN / 32) blocks of
// 256 threads, each owning 32 columns: lane = column, warp w sums rows w, w + 8, ..., and the warps' sums
// are added in warp order. It reads x and grad_out twice.
#include "mojo_prelude.cuh"
#include "norm_backward_args.h"

namespace mojo_norm_backward {

// A vector's share of its row's two sums: layer_norm's sum(g) and sum(g * xhat) (mean and rstd known),
// rms_norm's sum(x^2) and sum(g * x) (rstd not known yet).
template <bool RMS, class T, int VEC>
__device__ __forceinline__ void add_row_sums(const mojo::Pack<T, VEC>& dy, const mojo::Pack<T, VEC>& xv,
                                             const mojo::Pack<T, VEC>& w, float mu, float rs, float& s1,
                                             float& s2) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float xf = mojo::to_float(xv.v[j]), g = mojo::to_float(dy.v[j]) * mojo::to_float(w.v[j]);
    if constexpr (RMS) {
      s1 += xf * xf;
      s2 += g * xf;
    } else {
      s1 += g;
      s2 += g * (xf - mu) * rs;
    }
  }
}

// What a row's grad_x needs beside its elements.
struct RowTerms {
  float mu, rs, mean_g, mean_gx;
};
// The row's terms from its threads' sums (add_row_sums); mu and rs: layer_norm's, from the forward.
template <bool RMS, int HIDDEN, int THREADS>
__device__ __forceinline__ RowTerms row_terms(float s1, float s2, float mu, float rs, float eps, float* scratch) {
  mojo::row_sum_pair<THREADS>(s1, s2, scratch);
  if constexpr (RMS) {
    const float r = mojo::rsqrt_approx(s1 * (1.0f / HIDDEN) + eps);  // as rms_norm.cu computes it
    return {0.f, r, 0.f, r * s2 * (1.0f / HIDDEN)};
  } else {
    return {mu, rs, s1 * (1.0f / HIDDEN), s2 * (1.0f / HIDDEN)};
  }
}

// The vector of grad_x at element `at`, plus grad_residual's there when RESIDUAL.
template <bool RESIDUAL, class T, int VEC>
__device__ __forceinline__ mojo::Pack<T, VEC> grad_x_of(const mojo::Pack<T, VEC>& dy, const mojo::Pack<T, VEC>& xv,
                                                      const mojo::Pack<T, VEC>& w, const RowTerms& r,
                                                      const T* grad_residual, long long at) {
  mojo::Pack<T, VEC> o, res;
  if constexpr (RESIDUAL) res = mojo::load<T, VEC>(grad_residual + at);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float g = mojo::to_float(dy.v[j]) * mojo::to_float(w.v[j]);
    const float xhat = (mojo::to_float(xv.v[j]) - r.mu) * r.rs;
    float v = r.rs * (g - r.mean_g - xhat * r.mean_gx);
    if constexpr (RESIDUAL) v += mojo::to_float(res.v[j]);
    o.v[j] = mojo::from_float<T>(v);
  }
  return o;
}

// Step 0 of PARTIALS 0: grad_x of ROWS rows a block, and rms_norm's rstd of each into rstd_out.
template <bool RMS, bool RESIDUAL, class T, int HIDDEN, int VEC, int THREADS, int ROWS>
__device__ __forceinline__ void backward_rows(T* grad_x, const T* __restrict__ grad_out, const T* __restrict__ x,
                                              const T* __restrict__ weight, const float* __restrict__ mean,
                                              const float* __restrict__ rstd, const T* grad_residual, float eps,
                                              long long rows, float* __restrict__ rstd_out) {
  // Its own prologue rather than mojo::RowTile: through RowTile, LLVM gave the bf16 layer_norm kernel 63
  // registers instead of 56 (NVRTC's PTX is the same either way).
  constexpr int NV = HIDDEN / VEC;
  constexpr int ITEMS = (NV + THREADS - 1) / THREADS;
  constexpr bool IN_REGISTERS = ITEMS <= MOJO_ROW_REGISTER_VECTORS(THREADS * ROWS, 2);  // two packs per item
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[64];  // row_sum_pair's

  const unsigned tid = mojo::thread_x();
  const int lane = int(tid % THREADS);
  const long long row = (long long)mojo::block_x() * ROWS + tid / THREADS;
  const bool active = row < rows;
  const long long offset = (active ? row : 0) * HIDDEN;
  const float mu = !RMS && active ? mean[row] : 0.f, rs = !RMS && active ? rstd[row] : 0.f;

  P dy_cached[IN_REGISTERS ? ITEMS : 1], x_cached[IN_REGISTERS ? ITEMS : 1];
  float s1 = 0.f, s2 = 0.f;
  mojo::for_items<ITEMS, IN_REGISTERS>([&](int i) {
    const int v = lane + i * THREADS;
    if (active && v < NV) {
      const P dy = mojo::load<T, VEC>(grad_out + offset + v * VEC);
      const P xv = mojo::load<T, VEC>(x + offset + v * VEC);
      if constexpr (IN_REGISTERS) {
        dy_cached[i] = dy;
        x_cached[i] = xv;
      }
      add_row_sums<RMS>(dy, xv, mojo::load<T, VEC>(weight + v * VEC), mu, rs, s1, s2);
    }
  });
  const RowTerms terms = row_terms<RMS, HIDDEN, THREADS>(s1, s2, mu, rs, eps, scratch);
  if (RMS && active && lane == 0) rstd_out[row] = terms.rs;
  mojo::for_items<ITEMS, IN_REGISTERS>([&](int i) {
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
      mojo::store<T, VEC>(grad_x + offset + v * VEC,
                          grad_x_of<RESIDUAL, T, VEC>(dy, xv, w, terms, grad_residual, offset + v * VEC));
    }
  });
}

// Step 0 of PARTIALS 1 and 2: grad_x of this block's rows, and their partial grad_weight (and grad_bias).
template <bool RMS, bool RESIDUAL, bool WEIGHT_IN_REGISTERS, class T, int HIDDEN, int VEC, int THREADS, int ROWS>
__device__ __forceinline__ void backward_rows_and_partials(T* grad_x, const T* __restrict__ grad_out,
                                                           const T* __restrict__ x, const T* __restrict__ weight,
                                                           const float* __restrict__ mean,
                                                           const float* __restrict__ rstd, const T* grad_residual,
                                                           float eps, long long rows, float* __restrict__ partials,
                                                           long long parts) {
  static_assert(ROWS == 1 || THREADS <= 32, "several rows per block need narrow rows");
  constexpr int NV = HIDDEN / VEC;
  constexpr int ITEMS = (NV + THREADS - 1) / THREADS;
  constexpr int SUMS = RMS ? 1 : 2;  // grad_weight's, then grad_bias's
  using P = mojo::Pack<T, VEC>;
  __shared__ float scratch[64];  // row_sum_pair's
  const unsigned tid = mojo::thread_x();
  const int lane = int(tid % THREADS), group = int(tid / THREADS);
  const long long block = mojo::block_x();

  P w[WEIGHT_IN_REGISTERS ? ITEMS : 1];
  float sums[SUMS][ITEMS][VEC];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int v = lane + i * THREADS;
    if (WEIGHT_IN_REGISTERS && v < NV) w[i] = mojo::load<T, VEC>(weight + v * VEC);
#pragma unroll
    for (int s = 0; s < SUMS; ++s)
#pragma unroll
      for (int j = 0; j < VEC; ++j) sums[s][i][j] = 0.f;
  }
  // Every thread of the block goes round as often (the row reductions may be block-wide).
  for (long long first = block * ROWS; first < rows; first += parts * ROWS) {
    const long long row = mojo::opaque(first + group);
    const bool active = row < rows;
    const long long offset = (active ? row : 0) * HIDDEN;
    const float mu = !RMS && active ? mean[row] : 0.f, rs = !RMS && active ? rstd[row] : 0.f;
    // Item i's weight: held, or read again (an address the optimizer cannot hoist out of the row loop, where
    // the loads would hold it in registers after all).
    const T* const weight_now = weight + mojo::opaque(0ll);
    auto weight_of = [&](int i, int v) {
      return WEIGHT_IN_REGISTERS ? mojo::opaque(w[i]) : mojo::load<T, VEC>(weight_now + v * VEC);
    };
    P dy[ITEMS], xv[ITEMS];
    // Item i's grad_out * xhat (and grad_out) into the columns' sums: layer_norm's as it loads (rstd is
    // known; 0 bytes of stack where accumulating later spilled), rms_norm's once the row's rstd is.
    auto add_to_columns = [&](int i, float mu_i, float rs_i) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = mojo::to_float(dy[i].v[j]);
        sums[0][i][j] += d * (mojo::to_float(xv[i].v[j]) - mu_i) * rs_i;
        if constexpr (!RMS) sums[SUMS - 1][i][j] += d;
      }
    };
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int v = lane + i * THREADS;
      if (active && v < NV) {
        dy[i] = mojo::load<T, VEC>(grad_out + offset + v * VEC);
        xv[i] = mojo::load<T, VEC>(x + offset + v * VEC);
        add_row_sums<RMS>(dy[i], xv[i], weight_of(i, v), mu, rs, s1, s2);
        if constexpr (!RMS) add_to_columns(i, mu, rs);
      }
    }
    const RowTerms terms = row_terms<RMS, HIDDEN, THREADS>(s1, s2, mu, rs, eps, scratch);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int v = lane + i * THREADS;
      if (active && v < NV) {
        mojo::store<T, VEC>(grad_x + offset + v * VEC,
                            grad_x_of<RESIDUAL, T, VEC>(mojo::opaque(dy[i]), mojo::opaque(xv[i]), weight_of(i, v),
                                                        terms, grad_residual, offset + v * VEC));
        if constexpr (RMS) add_to_columns(i, terms.mu, terms.rs);
      }
    }
  }

  // The block's partial, row `block` of each sum: the thread's own sums (ROWS 1), or its row groups' added in
  // group order in shared memory first (narrow rows).
  __shared__ float block_sums[ROWS == 1 ? 1 : SUMS][ROWS == 1 ? 1 : HIDDEN];
  for (int g = 0; g < ROWS; ++g) {
    if (ROWS == 1 || group == g)
#pragma unroll
      for (int s = 0; s < SUMS; ++s)
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
          const int v = lane + i * THREADS;
          if (v < NV)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
              const int c = v * VEC + j;
              if constexpr (ROWS == 1)
                partials[(s * parts + block) * HIDDEN + c] = sums[s][i][j];
              else
                block_sums[s][c] = g == 0 ? sums[s][i][j] : block_sums[s][c] + sums[s][i][j];
            }
        }
    if constexpr (ROWS > 1) mojo::sync_block();
  }
  if constexpr (ROWS > 1)
    for (int s = 0; s < SUMS; ++s)
      for (int c = int(tid); c < HIDDEN; c += THREADS * ROWS) partials[(s * parts + block) * HIDDEN + c] = block_sums[s][c];
}

// Step 1: grad_weight (and grad_bias when BIAS) of the 32 columns of this block: warp w of 8 adds terms w,
// w + 8, ... of its lane's column (term(i, col) gives both), and the warps' sums are added in warp order.
struct Pair {
  float w, b;
};
template <bool BIAS, class T, int HIDDEN, class Term>
__device__ __forceinline__ void column_sums(T* __restrict__ grad_weight, T* __restrict__ grad_bias, long long terms,
                                            Term term) {
  constexpr int WARPS = 8;
  __shared__ float partial_w[WARPS][32], partial_b[BIAS ? WARPS : 1][32];
  const unsigned tid = mojo::thread_x();
  const int lane = int(tid % 32), warp = int(tid / 32);
  const int col = int(mojo::block_x()) * 32 + lane;
  float dw = 0.f, db = 0.f;
  if (col < HIDDEN)
    for (long long i = warp; i < terms; i += WARPS) {
      const Pair t = term(i, col);
      dw += t.w;
      db += t.b;
    }
  partial_w[warp][lane] = dw;
  if constexpr (BIAS) partial_b[warp][lane] = db;
  mojo::sync_block();
  if (warp == 0 && col < HIDDEN) {
#pragma unroll
    for (int w = 1; w < WARPS; ++w) {
      dw += partial_w[w][lane];
      if constexpr (BIAS) db += partial_b[w][lane];
    }
    grad_weight[col] = mojo::from_float<T>(dw);
    if constexpr (BIAS) grad_bias[col] = mojo::from_float<T>(db);
  }
}

// Step 1 of PARTIALS 1 and 2: the parts' rows of partials added in order.
template <bool BIAS, class T, int HIDDEN>
__device__ __forceinline__ void add_partials(T* __restrict__ grad_weight, T* __restrict__ grad_bias,
                                             const float* __restrict__ partials, long long parts) {
  column_sums<BIAS, T, HIDDEN>(grad_weight, grad_bias, parts, [&](long long p, int col) {
    return Pair{partials[p * HIDDEN + col], BIAS ? partials[(parts + p) * HIDDEN + col] : 0.f};
  });
}

// Step 1 of PARTIALS 0: the rows' terms, from grad_out and x again (mean: null for rms_norm).
template <bool RMS, class T, int HIDDEN>
__device__ __forceinline__ void add_rows(T* __restrict__ grad_weight, T* __restrict__ grad_bias,
                                         const T* __restrict__ grad_out, const T* __restrict__ x,
                                         const float* __restrict__ mean, const float* __restrict__ rstd,
                                         long long rows) {
  column_sums<!RMS, T, HIDDEN>(grad_weight, grad_bias, rows, [&](long long r, int col) {
    const float dy = mojo::to_float(grad_out[r * HIDDEN + col]);
    const float mu = RMS ? 0.f : mean[r];
    return Pair{dy * (mojo::to_float(x[r * HIDDEN + col]) - mu) * rstd[r], dy};
  });
}

}  // namespace mojo_norm_backward

// Step 0 is bounded to MIN_BLOCKS blocks an SM: with PARTIALS its grid is that many on each SM, one wave, so
// the registers must allow them.
#define MOJO_NORM_BACKWARD_KERNEL(NAME, P, RMS, RESIDUAL)                                                        \
  extern "C" __global__ void __launch_bounds__(P::step == 0 ? P::threads * P::rows : 256,                       \
                                               P::step == 0 ? P::min_blocks : 1)                                \
      NAME(MOJO_ARG_PARAMS(MOJO_NORM_BACKWARD_ARGS, P::dtype)) {                                                 \
    mojo::after_previous_kernels();                                                                              \
    using T = P::dtype;                                                                                          \
    if constexpr (P::step == 1 && P::partials != 0)                                                              \
      mojo_norm_backward::add_partials<!RMS, T, P::hidden>(grad_weight, grad_bias, workspace, parts);           \
    else if constexpr (P::step == 1)                                                                             \
      mojo_norm_backward::add_rows<RMS, T, P::hidden>(grad_weight, grad_bias, grad_out, x, mean,                \
                                                      RMS ? workspace : rstd, rows);                             \
    else if constexpr (P::partials != 0)                                                                         \
      mojo_norm_backward::backward_rows_and_partials<RMS, RESIDUAL, P::partials == 1, T, P::hidden, P::vec,     \
                                                     P::threads, P::rows>(                                       \
          grad_x, grad_out, x, weight, mean, rstd, grad_residual, eps, rows, workspace, parts);                  \
    else                                                                                                         \
      mojo_norm_backward::backward_rows<RMS, RESIDUAL, T, P::hidden, P::vec, P::threads, P::rows>(              \
          grad_x, grad_out, x, weight, mean, rstd, grad_residual, eps, rows, workspace);                         \
  }
#define MOJO_KERNEL_layer_norm_backward(NAME, P) MOJO_NORM_BACKWARD_KERNEL(NAME, P, false, false)
#define MOJO_KERNEL_rms_norm_backward(NAME, P) MOJO_NORM_BACKWARD_KERNEL(NAME, P, true, P::residual != 0)
