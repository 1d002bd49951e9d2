// embedding: out[t, :] = weight[ids[t], :]
//
// Params: T (out, weight), I (ids: int or long long), HIDDEN, VEC, THREADS,
// ROWS (as rms_norm.cu: THREADS lanes per row, ROWS rows per block). Kernel
// args: MOJO_EMBEDDING_ARGS (embedding_args.h). An id outside [0, vocab) gives
// a row of zeros, never a read out of bounds (the runtime's debug checks report it).
// Geometry: block = THREADS * ROWS, grid = ceil(tokens / ROWS).
#include "mojo_prelude.cuh"
#include "embedding_args.h"

namespace mojo_embedding {

template <class T, class I, int HIDDEN, int VEC, int THREADS, int ROWS>
__device__ __forceinline__ void run(T* __restrict__ out, const I* __restrict__ ids, const T* __restrict__ weight,
                                    long long tokens, long long vocab) {
  constexpr int NV = HIDDEN / VEC;
  using P = mojo::Pack<T, VEC>;
  const unsigned tid = mojo::thread_x();
  const long long token = (long long)mojo::block_x() * ROWS + tid / THREADS;
  if (token >= tokens) return;
  const long long id = (long long)ids[token];
  const bool valid = id >= 0 && id < vocab;
  const T* src = weight + (valid ? id : 0) * HIDDEN;
  T* dst = out + token * HIDDEN;
#pragma unroll 4
  for (int v = int(tid % THREADS); v < NV; v += THREADS) {
    P p;
    if (valid) {
      p = mojo::load<T, VEC>(src + v * VEC);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) p.v[j] = mojo::from_float<T>(0.f);
    }
    mojo::store<T, VEC>(dst + v * VEC, p);
  }
}

}  // namespace mojo_embedding

#define MOJO_EMBEDDING_KERNEL(NAME, T, I, HIDDEN, VEC, THREADS, ROWS)                                          \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS)                                                 \
      NAME(MOJO_ARG_PARAMS(MOJO_EMBEDDING_ARGS, T, I)) {                                                       \
    mojo::after_previous_kernels();                                                                            \
    mojo_embedding::run<T, I, HIDDEN, VEC, THREADS, ROWS>(out, ids, weight, tokens, vocab);                    \
  }
#define MOJO_KERNEL_embedding(NAME, P) \
  MOJO_EMBEDDING_KERNEL(NAME, P::dtype, P::ids, P::hidden, P::vec, P::threads, P::rows)
