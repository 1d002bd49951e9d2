// softmax:          out[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max))
// log_softmax:      out[r, :] = x[r, :] - max - log(sum(exp(x[r, :] - max)))
// softmax_backward: grad_x[r, :] = out[r, :] * (grad_out[r, :] - sum(grad_out[r, :] * out[r, :]))
//
// Over the last dim; storage in T, math in float.
//
// Params: T, COLS, VEC, THREADS, ROWS (as rms_norm.cu), CACHE (vectors of a
// row kept in shared memory: below), and for the forward LOG (1:
// log_softmax); the chunked form: CHUNKS (blocks a row) and STEP. Kernel args:
//   forward:  MOJO_SOFTMAX_ARGS (softmax_args.h)
//   backward: MOJO_SOFTMAX_BACKWARD_ARGS (softmax_args.h), contiguous
// Geometry: block = THREADS * ROWS threads, grid = ceil(rows / ROWS), CACHE vectors of
// shared memory (the forward; the backward twice that).
//
// A row up to 16 vectors per thread (6 in blocks of 1,024 threads:
// MOJO_ROW_REGISTER_VECTORS) stays in registers: one read, the exact max, then the
// sum. Wider rows (a vocabulary: 151,936 columns is ~19 vectors per thread
// of 1,024) take one online pass that keeps a running max
// and rescales the running sum, then a second pass that writes. The online
// pass keeps the row's first CACHE vectors in dynamic shared memory (each
// thread its own, so no barrier), and the second pass reads only the rest
// again: from L2, where the rows in flight fit it. (Two 1024-thread blocks an
// SM with nothing kept put 264 rows of 304 KB in flight, 80 MB: more than an
// H200's L2, so at 512 rows the second read came from memory.) The backward
// keeps out and grad_out alike.
//
// Few long rows (fewer than the GPU has SMs) are split over CHUNKS blocks a
// row (mojo::RowChunk), a plan of two steps (STEP):
//   0: each block's part of its row: max and sum of exp(x - max) (forward),
//      sum(grad_out * out) (backward), into parts;
//   1: each block merges its row's parts, in chunk order (so every block of
//      the row gets the same bits), and writes its chunk; its second read of
//      the chunk hits L2.
// Geometry of that form: block = THREADS, grid = rows * CHUNKS.
//
// Where that grid fits on the GPU at once, both steps are one cooperative
// launch (the cooperative form): each block keeps its chunk in registers
// (at most MOJO_SOFTMAX_COOPERATIVE_VECTORS a thread), writes its part, meets its row's
// other blocks at a barrier (mojo::sync_blocks, on the row's two sync words:
// the barrier and the count of blocks done), merges the parts as step 1 does
// and writes its chunk from the registers. The same sums in the same order
// as the two steps, so the same bits; the input is read once, and one
// launch's latency is saved, which is most of a short row's time.
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

// The first CACHE vectors of a row in dynamic shared memory, `copies` arrays of them (one a tensor the row reads).
template <class P, int CACHE> struct RowCache {
  P* packs;
  __device__ __forceinline__ explicit RowCache(unsigned char* smem) : packs(reinterpret_cast<P*>(smem)) {}
  // Pack v of array `a`, loaded as `p`, kept where it falls in the cache.
  __device__ __forceinline__ const P& keep(int a, int v, const P& p) const {
    if (v < CACHE) packs[a * CACHE + v] = p;
    return p;
  }
  // Pack v of array `a`: from the cache, or loaded again from `row`.
  template <class T, int VEC> __device__ __forceinline__ P get(int a, int v, const T* row) const {
    return v < CACHE ? packs[a * CACHE + v] : mojo::load<T, VEC>(row + v * VEC);
  }
};

template <class T, int COLS, int VEC, int THREADS, int ROWS, bool LOG, int CACHE>
__device__ __forceinline__ void forward(T* __restrict__ out, const T* __restrict__ x, long long rows,
                                        long long out_stride, long long x_stride) {
  using Tile = mojo::RowTile<COLS, VEC, THREADS, ROWS>;
  constexpr int NV = Tile::NV, ITEMS = Tile::ITEMS;
  constexpr bool IN_REGISTERS = Tile::IN_REGISTERS;
  using P = mojo::Pack<T, VEC>;
  static_assert(CACHE == 0 || (!IN_REGISTERS && ROWS == 1), "a cache is for rows too long for the registers");
  __shared__ float scratch[32];
  MOJO_DYNAMIC_SMEM(smem);
  const RowCache<P, CACHE> cache(smem);

  const Tile tile(rows);
  const int lane = tile.lane;
  const bool active = tile.active;
  const T* xr = x + tile.safe() * x_stride;
  T* outr = out + tile.safe() * out_stride;

  float max = mojo::neg_inf(), sum = 0.f;
  P cached[IN_REGISTERS ? ITEMS : 1];
  if constexpr (IN_REGISTERS) {
    tile.for_each([&](int i, int v) {
      cached[i] = mojo::load<T, VEC>(xr + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) max = mojo::max_f(max, mojo::to_float(cached[i].v[j]));
    });
    max = mojo::row_reduce<THREADS>(max, scratch, mojo::Max());
    tile.for_each([&](int i, int) {
      // Packed between the passes (mojo::opaque): LLVM kept the floats the max converted, and spilled.
      const P p = mojo::opaque(cached[i]);
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum += mojo::exp_approx(mojo::to_float(p.v[j]) - max);
    });
  } else {
    // BATCH loads issued before any is used: the running max's branch kept the compiler from hoisting them,
    // which left two 16-byte loads in flight a thread.
    constexpr int BATCH = 4;
    for (int first = lane; active && first < NV; first += BATCH * THREADS) {
      P batch[BATCH];
#pragma unroll
      for (int b = 0; b < BATCH; ++b)
        if (const int v = first + b * THREADS; v < NV) batch[b] = mojo::load<T, VEC>(xr + v * VEC);
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        if (first + b * THREADS >= NV) break;
        const P& p = cache.keep(0, first + b * THREADS, batch[b]);
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
    }
    const float row_max = mojo::row_reduce<THREADS>(max, scratch, mojo::Max());
    // A thread that saw nothing has max = -inf and sum = 0: it adds 0.
    sum = sum == 0.f ? 0.f : sum * mojo::exp_approx(max - row_max);
    max = row_max;
  }
  sum = mojo::row_reduce<THREADS>(sum, scratch);
  const float inv_sum = 1.f / sum;
  const float log_sum = mojo::log_approx(sum);

  tile.for_each([&](int i, int v) {
    P p;
    if constexpr (IN_REGISTERS) p = mojo::opaque(cached[i]);
    else p = cache.template get<T, VEC>(0, v, xr);
    P o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = mojo::to_float(p.v[j]) - max;
      o.v[j] = mojo::from_float<T>(output_of<LOG>(d, inv_sum, log_sum));
    }
    mojo::store<T, VEC>(outr + v * VEC, o);
  });
}

template <class T, int COLS, int VEC, int THREADS, int ROWS, int CACHE>
__device__ __forceinline__ void backward(T* __restrict__ grad_x, const T* __restrict__ grad_out,
                                         const T* __restrict__ out, long long rows) {
  using Tile = mojo::RowTile<COLS, VEC, THREADS, ROWS, MOJO_ROW_REGISTER_VECTORS(THREADS * ROWS, 2)>;
  constexpr int NV = Tile::NV, ITEMS = Tile::ITEMS;
  constexpr bool IN_REGISTERS = Tile::IN_REGISTERS;
  using P = mojo::Pack<T, VEC>;
  static_assert(CACHE == 0 || (!IN_REGISTERS && ROWS == 1), "a cache is for rows too long for the registers");
  __shared__ float scratch[32];
  MOJO_DYNAMIC_SMEM(smem);
  const RowCache<P, CACHE> cache(smem);  // grad_out's vectors, then out's

  const Tile tile(rows);
  const int lane = tile.lane;
  const bool active = tile.active;
  const long long offset = tile.safe() * COLS;

  auto dot_of = [](const P& dy, const P& y) {
    float d = 0.f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) d += mojo::to_float(dy.v[j]) * mojo::to_float(y.v[j]);
    return d;
  };
  float dot = 0.f;
  P dy_cached[IN_REGISTERS ? ITEMS : 1], y_cached[IN_REGISTERS ? ITEMS : 1];
  if constexpr (IN_REGISTERS) {
    tile.for_each([&](int i, int v) {
      dy_cached[i] = mojo::load<T, VEC>(grad_out + offset + v * VEC);
      y_cached[i] = mojo::load<T, VEC>(out + offset + v * VEC);
      dot += dot_of(dy_cached[i], y_cached[i]);
    });
  } else {
    // Two items' loads issued before the first is kept in the cache (its store waits for the load); loops not
    // unrolled whole, whose loads hoisted over a vocabulary's ITEMS spilled.
    for (int first = lane; active && first < NV; first += 2 * THREADS) {
      P dy[2], y[2];
#pragma unroll
      for (int b = 0; b < 2; ++b)
        if (const int v = first + b * THREADS; v < NV) {
          dy[b] = mojo::load<T, VEC>(grad_out + offset + v * VEC);
          y[b] = mojo::load<T, VEC>(out + offset + v * VEC);
        }
#pragma unroll
      for (int b = 0; b < 2; ++b)
        if (const int v = first + b * THREADS; v < NV) dot += dot_of(cache.keep(0, v, dy[b]), cache.keep(1, v, y[b]));
    }
  }
  dot = mojo::row_reduce<THREADS>(dot, scratch);
  tile.for_each([&](int i, int v) {
    P dy, y;
    if constexpr (IN_REGISTERS) {  // packed between the passes (mojo::opaque), as the forward's
      dy = mojo::opaque(dy_cached[i]);
      y = mojo::opaque(y_cached[i]);
    } else {
      dy = cache.template get<T, VEC>(0, v, grad_out + offset);
      y = cache.template get<T, VEC>(1, v, out + offset);
    }
    P o;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o.v[j] = mojo::from_float<T>(grad_x_of(mojo::to_float(y.v[j]), mojo::to_float(dy.v[j]), dot));
    mojo::store<T, VEC>(grad_x + offset + v * VEC, o);
  });
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

// ---- the cooperative form: few long rows, CHUNKS blocks a row, one launch ------------

// A block's chunk in registers: Chunk::CV vectors over THREADS threads, thread t holding vectors
// first + t, first + t + THREADS, ...
template <class T, int COLS, int VEC, int THREADS, int CHUNKS, int ARRAYS>
struct ChunkInRegisters {
  using Chunk = mojo::RowChunk<T, COLS, VEC, THREADS, CHUNKS>;
  using P = mojo::Pack<T, VEC>;
  static constexpr int ITEMS = (Chunk::CV + THREADS - 1) / THREADS;
  static_assert(ITEMS <= MOJO_SOFTMAX_COOPERATIVE_VECTORS, "a thread's share of the chunk must fit its registers");
  const Chunk chunk;
  P packs[ARRAYS][ITEMS];
  __device__ __forceinline__ explicit ChunkInRegisters(int c) : chunk(c) {}
  // f(item, vector index) for this thread's vectors of the chunk.
  template <class F> __device__ __forceinline__ void for_each(F f) const {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
      if (const int v = chunk.first + int(mojo::thread_x()) + i * THREADS; v < chunk.end) f(i, v);
  }
};

// OnlineSum::of_parts over the row's CHUNKS parts (the same merges in the same order: the same bits), through
// shared memory: a thread a part loads them from global memory at once. Every thread merging all 2 * CHUNKS
// loads from global memory itself held them all in registers, and ptxas gave the kernel a stack frame.
template <int CHUNKS, int THREADS>
__device__ __forceinline__ mojo::OnlineSum merged_parts(const float* row_parts, float (&shared)[2 * CHUNKS]) {
  static_assert(2 * CHUNKS <= THREADS, "a thread a part's max or sum");
  if (const unsigned t = mojo::thread_x(); t < 2 * CHUNKS) shared[t] = row_parts[t];
  mojo::sync_block();
  return mojo::OnlineSum::of_parts(shared, CHUNKS);
}

template <class T, int COLS, int VEC, int THREADS, int CHUNKS, bool LOG>
__device__ __forceinline__ void forward_cooperative(T* __restrict__ out, const T* __restrict__ x,
                                                    long long out_stride, long long x_stride,
                                                    float* __restrict__ parts, unsigned* __restrict__ sync) {
  __shared__ float scratch[32], parts_here[2 * CHUNKS];
  const long long r = mojo::block_x() / CHUNKS;
  const int c = int(mojo::block_x() % CHUNKS);
  ChunkInRegisters<T, COLS, VEC, THREADS, CHUNKS, 1> mine(c);
  const T* xr = x + r * x_stride;
  float* row_parts = parts + r * CHUNKS * 2;
  unsigned* row_sync = sync + r * 2;
  mine.for_each([&](int i, int v) { mine.packs[0][i] = mojo::load<T, VEC>(xr + v * VEC); });
  mojo::OnlineSum part;
  mine.for_each([&](int i, int) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) part.add(mojo::to_float(mine.packs[0][i].v[j]));
  });
  part = part.template block<THREADS>(scratch);
  if (mojo::thread_x() == 0) {
    row_parts[2 * c] = part.max;
    row_parts[2 * c + 1] = part.sum;
  }
  mojo::sync_blocks(row_sync, CHUNKS);
  mojo::leave_sync_words(row_sync, 2, CHUNKS);
  const mojo::OnlineSum row = merged_parts<CHUNKS, THREADS>(row_parts, parts_here);
  const float inv_sum = 1.f / row.sum, log_sum = mojo::log_approx(row.sum);
  T* outr = out + r * out_stride;
  mine.for_each([&](int i, int v) {
    typename decltype(mine)::P o;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o.v[j] = mojo::from_float<T>(output_of<LOG>(mojo::to_float(mine.packs[0][i].v[j]) - row.max, inv_sum, log_sum));
    mojo::store<T, VEC>(outr + v * VEC, o);
  });
}

template <class T, int COLS, int VEC, int THREADS, int CHUNKS>
__device__ __forceinline__ void backward_cooperative(T* __restrict__ grad_x, const T* __restrict__ grad_out,
                                                     const T* __restrict__ out, float* __restrict__ parts,
                                                     unsigned* __restrict__ sync) {
  __shared__ float scratch[32];
  const long long r = mojo::block_x() / CHUNKS;
  const int c = int(mojo::block_x() % CHUNKS);
  ChunkInRegisters<T, COLS, VEC, THREADS, CHUNKS, 2> mine(c);  // grad_out's vectors, then out's
  const long long offset = r * COLS;
  float* row_parts = parts + r * CHUNKS;
  unsigned* row_sync = sync + r * 2;
  mine.for_each([&](int i, int v) {
    mine.packs[0][i] = mojo::load<T, VEC>(grad_out + offset + v * VEC);
    mine.packs[1][i] = mojo::load<T, VEC>(out + offset + v * VEC);
  });
  float dot = 0.f;
  mine.for_each([&](int i, int) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) dot += mojo::to_float(mine.packs[0][i].v[j]) * mojo::to_float(mine.packs[1][i].v[j]);
  });
  dot = mojo::block_sum<THREADS>(dot, scratch);
  if (mojo::thread_x() == 0) row_parts[c] = dot;
  mojo::sync_blocks(row_sync, CHUNKS);
  dot = 0.f;
  for (int i = 0; i < CHUNKS; ++i) dot += row_parts[i];
  mojo::leave_sync_words(row_sync, 2, CHUNKS);
  mine.for_each([&](int i, int v) {
    typename decltype(mine)::P o;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o.v[j] = mojo::from_float<T>(
          grad_x_of(mojo::to_float(mine.packs[1][i].v[j]), mojo::to_float(mine.packs[0][i].v[j]), dot));
    mojo::store<T, VEC>(grad_x + offset + v * VEC, o);
  });
}

}  // namespace mojo_softmax

// With a row cache (CACHE > 0) a block fills an SM's shared memory: its launch bounds say one block an SM, or
// ptxas squeezed some to 32 registers (and spills) for a second block that cannot come.
#define MOJO_SOFTMAX_KERNEL(NAME, T, COLS, VEC, THREADS, ROWS, LOG, CACHE)                                 \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS, CACHE > 0 ? 1 : 0)                            \
      NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_ARGS, T)) {                                                        \
    mojo::after_previous_kernels();                                                                        \
    mojo_softmax::forward<T, COLS, VEC, THREADS, ROWS, LOG != 0, CACHE>(out, x, rows, out_stride, x_stride); \
  }

#define MOJO_SOFTMAX_BACKWARD_KERNEL(NAME, T, COLS, VEC, THREADS, ROWS, CACHE)                             \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS, CACHE > 0 ? 1 : 0)                            \
      NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_BACKWARD_ARGS, T)) {                                               \
    mojo::after_previous_kernels();                                                                        \
    mojo_softmax::backward<T, COLS, VEC, THREADS, ROWS, CACHE>(grad_x, grad_out, out, rows);               \
  }
#define MOJO_KERNEL_softmax(NAME, P) \
  MOJO_SOFTMAX_KERNEL(NAME, P::dtype, P::cols, P::vec, P::threads, P::rows, P::log, P::cache)
#define MOJO_KERNEL_log_softmax MOJO_KERNEL_softmax
#define MOJO_KERNEL_softmax_backward(NAME, P) \
  MOJO_SOFTMAX_BACKWARD_KERNEL(NAME, P::dtype, P::cols, P::vec, P::threads, P::rows, P::cache)

// The chunked form (few long rows): P::chunks blocks a row, a plan of two steps (P::step).
#define MOJO_KERNEL_softmax_chunks(NAME, P)                                                                      \
  extern "C" __global__ void __launch_bounds__(P::threads) NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_ARGS, P::dtype)) { \
    mojo::after_previous_kernels();                                                                            \
    mojo_softmax::forward_chunks<P::dtype, P::cols, P::vec, P::threads, P::chunks, P::step, P::log != 0>(      \
        out, x, out_stride, x_stride, parts);                                                                  \
  }
// The cooperative form: the chunked form's two steps in one cooperative launch.
#define MOJO_KERNEL_softmax_cooperative(NAME, P)                                                                 \
  extern "C" __global__ void __launch_bounds__(P::threads) NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_ARGS, P::dtype)) { \
    mojo::after_previous_kernels();                                                                            \
    mojo_softmax::forward_cooperative<P::dtype, P::cols, P::vec, P::threads, P::chunks, P::log != 0>(          \
        out, x, out_stride, x_stride, parts, sync);                                                            \
  }
#define MOJO_KERNEL_softmax_backward_cooperative(NAME, P)                                                        \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                      \
      NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_BACKWARD_ARGS, P::dtype)) {                                             \
    mojo::after_previous_kernels();                                                                            \
    mojo_softmax::backward_cooperative<P::dtype, P::cols, P::vec, P::threads, P::chunks>(grad_x, grad_out, out, \
                                                                                       parts, sync);           \
  }
#define MOJO_KERNEL_softmax_backward_chunks(NAME, P)                                                             \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                      \
      NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_BACKWARD_ARGS, P::dtype)) {                                             \
    mojo::after_previous_kernels();                                                                            \
    mojo_softmax::backward_chunks<P::dtype, P::cols, P::vec, P::threads, P::chunks, P::step>(grad_x, grad_out, \
                                                                                           out, parts);        \
  }
