// store_kv_cache: writes the keys and values of new tokens into a paged KV
// cache through a slot mapping (slot = block * block_size + offset):
//   k_cache.flat[slot, :] = k[t, :],  v_cache.flat[slot, :] = v[t, :]
// where a row is kv_heads * head_dim elements; a slot < 0 (padding) is skipped.
//
// Params: T, I (slots: int or long long), ROW (kv_heads * head_dim), VEC,
// THREADS, ROWS (tokens per block). Kernel args: MOJO_STORE_KV_CACHE_ARGS
// (store_kv_cache_args.h): caches contiguous [num_blocks, block_size,
// kv_heads, head_dim]; k and v rows k_stride / v_stride elements apart
// (views of a fused qkv tensor). A slot >= num_slots is skipped (the
// runtime's debug checks report it).
// Geometry: block = THREADS * ROWS, grid = ceil(tokens / ROWS).
#include "mojo_prelude.cuh"
#include "store_kv_cache_args.h"

namespace mojo_kv_cache {

template <class T, class I, int ROW, int VEC, int THREADS, int ROWS>
__device__ __forceinline__ void run(T* __restrict__ k_cache, T* __restrict__ v_cache, const T* __restrict__ k,
                                    const T* __restrict__ v, const I* __restrict__ slots, long long tokens,
                                    long long num_slots, long long k_stride, long long v_stride) {
  constexpr int NV = ROW / VEC;
  using P = mojo::Pack<T, VEC>;
  const unsigned tid = mojo::thread_x();
  const long long token = (long long)mojo::block_x() * ROWS + tid / THREADS;
  if (token >= tokens) return;
  const long long slot = (long long)slots[token];
  if (slot < 0 || slot >= num_slots) return;
  const T* ks = k + token * k_stride;
  const T* vs = v + token * v_stride;
  T* kd = k_cache + slot * ROW;
  T* vd = v_cache + slot * ROW;
#pragma unroll 4
  for (int i = int(tid % THREADS); i < NV; i += THREADS) {
    mojo::store<T, VEC>(kd + i * VEC, mojo::load<T, VEC>(ks + i * VEC));
    mojo::store<T, VEC>(vd + i * VEC, mojo::load<T, VEC>(vs + i * VEC));
  }
}

}  // namespace mojo_kv_cache

#define MOJO_STORE_KV_CACHE_KERNEL(NAME, T, I, ROW, VEC, THREADS, ROWS)                                        \
  extern "C" __global__ void __launch_bounds__(THREADS * ROWS)                                                 \
      NAME(MOJO_ARG_PARAMS(MOJO_STORE_KV_CACHE_ARGS, T, I)) {                                                  \
    mojo::after_previous_kernels();                                                                            \
    mojo_kv_cache::run<T, I, ROW, VEC, THREADS, ROWS>(k_cache, v_cache, k, v, slots, tokens, num_slots,        \
                                                      k_stride, v_stride);                                     \
  }
#define MOJO_KERNEL_store_kv_cache(NAME, P) \
  MOJO_STORE_KV_CACHE_KERNEL(NAME, P::dtype, P::slots, P::row, P::vec, P::threads, P::rows)
