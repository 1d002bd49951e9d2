// The runtime arguments of store_kv_cache (store_kv_cache.cu), written once
// (mojo_args.h): the kernel's parameters and the struct the op
// (src/ops/store_kv_cache.cpp) fills.
#pragma once

#include "mojo_args.h"

#define MOJO_STORE_KV_CACHE_ARGS(T, I, ARG)                                                    \
  ARG(T* __restrict__, k_cache) /* [num_blocks, block_size, kv_heads, head_dim], contiguous */ \
  ARG(T* __restrict__, v_cache) /* as k_cache */                                               \
  ARG(const T* __restrict__, k) /* [tokens, kv_heads, head_dim], tokens k_stride apart */      \
  ARG(const T* __restrict__, v) /* as k, tokens v_stride apart */                              \
  ARG(const I* __restrict__, slots) /* [tokens]: block * block_size + offset; < 0 skips */     \
  ARG(long long, tokens) /* rows of k and v */                                                 \
  ARG(long long, num_slots) /* num_blocks * block_size: a slot >= num_slots is skipped */      \
  ARG(long long, k_stride) /* elements between tokens, as the next */                          \
  ARG(long long, v_stride)

namespace mojo_kv_cache {
template <class T, class I>
struct Args {
  MOJO_STORE_KV_CACHE_ARGS(T, I, MOJO_ARG_FIELD)
};
#ifndef __CUDACC_RTC__  // host only: NVRTC compiles no host functions
template <class T, class I, class F>
void for_each_arg(const Args<T, I>& a, F f) {
  MOJO_STORE_KV_CACHE_ARGS(T, I, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_kv_cache
