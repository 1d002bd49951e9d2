// rotary_embedding: rotates q [tokens, HEADS, HEAD_DIM] and k [tokens,
// KV_HEADS, HEAD_DIM] in place by the angle of each token's position, on the
// first ROT_DIM features of every head (partial rotary when ROT_DIM < HEAD_DIM).
//
//   cos = cos_sin[pos, i], sin = cos_sin[pos, ROT_DIM/2 + i]   (i < ROT_DIM/2)
//   NEOX 1 (rotate halves):  pair (x[i], x[i + ROT_DIM/2])
//   NEOX 0 (GPT-J, interleaved): pair (x[2i], x[2i + 1])
//   (x1, x2) <- (x1 cos - x2 sin, x2 cos + x1 sin)
//
// Params: T (q, k), C (cos_sin cache: float or T), I (positions: int or
// long long), HEAD_DIM, ROT_DIM, HEADS, KV_HEADS, NEOX, THREADS. Kernel args:
// MOJO_ROTARY_EMBEDDING_ARGS (rotary_embedding_args.h); the heads of a
// token are contiguous, tokens are q_stride / k_stride elements apart (q and
// k may be views of a fused qkv tensor). A position outside [0, max_pos) is
// skipped (the runtime's debug checks report it).
// Geometry: one block of THREADS threads per token.
#include "mojo_prelude.cuh"
#include "rotary_embedding_args.h"

namespace mojo_rotary {

template <class T, class C, class I, int HEAD_DIM, int ROT_DIM, int HEADS, int KV_HEADS, int NEOX, int THREADS>
__device__ __forceinline__ void run(T* __restrict__ q, T* __restrict__ k, const I* __restrict__ positions,
                                    const C* __restrict__ cos_sin, long long q_stride, long long k_stride,
                                    long long max_pos) {
  static_assert(ROT_DIM % 2 == 0 && ROT_DIM <= HEAD_DIM, "ROT_DIM must be even and at most HEAD_DIM");
  constexpr int HALF = ROT_DIM / 2;
  constexpr int PAIRS = (HEADS + KV_HEADS) * HALF;
  const long long token = mojo::block_x();
  const long long pos = (long long)positions[token];
  if (pos < 0 || pos >= max_pos) return;
  const C* cs = cos_sin + pos * ROT_DIM;
  for (int p = int(mojo::thread_x()); p < PAIRS; p += THREADS) {
    const int head = p / HALF, i = p % HALF;
    T* x = head < HEADS ? q + token * q_stride + head * HEAD_DIM : k + token * k_stride + (head - HEADS) * HEAD_DIM;
    const int i1 = NEOX ? i : 2 * i, i2 = NEOX ? i + HALF : 2 * i + 1;
    const float c = mojo::to_float(cs[i]), s = mojo::to_float(cs[HALF + i]);
    const float x1 = mojo::to_float(x[i1]), x2 = mojo::to_float(x[i2]);
    x[i1] = mojo::from_float<T>(x1 * c - x2 * s);
    x[i2] = mojo::from_float<T>(x2 * c + x1 * s);
  }
}

}  // namespace mojo_rotary

#define MOJO_ROTARY_KERNEL(NAME, T, C, I, HEAD_DIM, ROT_DIM, HEADS, KV_HEADS, NEOX, THREADS)                 \
  extern "C" __global__ void __launch_bounds__(THREADS)                                                      \
      NAME(MOJO_ARG_PARAMS(MOJO_ROTARY_EMBEDDING_ARGS, T, C, I)) {                                           \
    mojo_rotary::run<T, C, I, HEAD_DIM, ROT_DIM, HEADS, KV_HEADS, NEOX, THREADS>(q, k, positions, cos_sin,   \
                                                                                 q_stride, k_stride, max_pos); \
  }
#define MOJO_KERNEL_rotary_embedding(NAME, P)                                                                 \
  MOJO_ROTARY_KERNEL(NAME, P::dtype, P::cache, P::pos, P::head_dim, P::rot_dim, P::heads, P::kv_heads, P::neox, \
                     P::threads)
