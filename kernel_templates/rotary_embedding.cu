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
// long long), HEAD_DIM, ROT_DIM, HEADS, KV_HEADS, NEOX, VEC (elements of q/k
// a load moves), CVEC (cos/sin elements a load moves), THREADS, HPB (heads a
// block rotates). Kernel args: MOJO_ROTARY_EMBEDDING_ARGS
// (rotary_embedding_args.h); the heads of a token are contiguous, tokens are
// q_stride / k_stride elements apart (q and k may be views of a fused qkv
// tensor). A position outside [0, max_pos) is skipped (the runtime's debug
// checks report it).
//
// Each thread rotates whole vectors: NeoX, VEC features of the first half and
// the VEC they pair with in the second; GPT-J, VEC neighbouring features (VEC/2
// pairs). So every element is read and written once, 16 bytes at a time, and
// a warp's loads cover whole heads (no strided two-byte accesses).
// Geometry: grid (tokens, ceil((HEADS + KV_HEADS) / HPB)), THREADS threads;
// block (t, y) rotates heads [y * HPB, y * HPB + HPB) of token t, q's heads
// first, then k's. HPB * CHUNKS is about THREADS, so a few tokens still give
// every SM a block.
#include "mojo_prelude.cuh"
#include "rotary_embedding_args.h"

namespace mojo_rotary {

// N elements at p (aligned to V elements) as floats, V at a time; and back.
template <class T, int N, int V> __device__ __forceinline__ void load_floats(const T* p, float (&out)[N]) {
  static_assert(N % V == 0, "a vector must divide the run");
#pragma unroll
  for (int j = 0; j < N / V; ++j) {
    const mojo::Pack<T, V> v = mojo::load<T, V>(p + j * V);
#pragma unroll
    for (int e = 0; e < V; ++e) out[j * V + e] = mojo::to_float(v.v[e]);
  }
}
template <class T, int N, int V> __device__ __forceinline__ void store_floats(T* p, const float (&in)[N]) {
#pragma unroll
  for (int j = 0; j < N / V; ++j) {
    mojo::Pack<T, V> v;
#pragma unroll
    for (int e = 0; e < V; ++e) v.v[e] = mojo::from_float<T>(in[j * V + e]);
    mojo::store<T, V>(p + j * V, v);
  }
}

template <class T, class C, class I, class P>
__device__ __forceinline__ void run(T* __restrict__ q, T* __restrict__ k, const I* __restrict__ positions,
                                    const C* __restrict__ cos_sin, long long q_stride, long long k_stride,
                                    long long max_pos) {
  constexpr int HEAD_DIM = P::head_dim, ROT_DIM = P::rot_dim, HEADS = P::heads, TOTAL = HEADS + P::kv_heads;
  constexpr int VEC = P::vec, THREADS = P::threads, HPB = P::hpb;
  static_assert(ROT_DIM % 2 == 0 && ROT_DIM <= HEAD_DIM, "ROT_DIM must be even and at most HEAD_DIM");
  constexpr int HALF = ROT_DIM / 2;
  // The pairs a unit of work rotates: NeoX VEC; GPT-J the VEC (at least 2) neighbours hold half as many.
  constexpr int PAIRS = P::neox ? VEC : (VEC < 2 ? 1 : VEC / 2), CHUNKS = HALF / PAIRS;
  static_assert(HALF % PAIRS == 0 && PAIRS % P::cvec == 0, "the vectors must divide the rotated features");
  const long long token = mojo::block_x();
  const long long pos = (long long)positions[token];
  if (pos < 0 || pos >= max_pos) return;
  const C* cs = cos_sin + pos * ROT_DIM;
  const int first = int(mojo::block_y()) * HPB, units = ((TOTAL - first < HPB ? TOTAL - first : HPB)) * CHUNKS;
  for (int u = int(mojo::thread_x()); u < units; u += THREADS) {
    const int head = first + u / CHUNKS, i0 = (u % CHUNKS) * PAIRS;
    T* x = head < HEADS ? q + token * q_stride + head * HEAD_DIM : k + token * k_stride + (head - HEADS) * HEAD_DIM;
    float c[PAIRS], s[PAIRS];
    load_floats<C, PAIRS, P::cvec>(cs + i0, c);
    load_floats<C, PAIRS, P::cvec>(cs + HALF + i0, s);
    if constexpr (P::neox) {
      float a[PAIRS], b[PAIRS], ra[PAIRS], rb[PAIRS];
      load_floats<T, PAIRS, VEC>(x + i0, a);
      load_floats<T, PAIRS, VEC>(x + HALF + i0, b);
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {
        ra[j] = a[j] * c[j] - b[j] * s[j];
        rb[j] = b[j] * c[j] + a[j] * s[j];
      }
      store_floats<T, PAIRS, VEC>(x + i0, ra);
      store_floats<T, PAIRS, VEC>(x + HALF + i0, rb);
    } else {
      float e[2 * PAIRS], r[2 * PAIRS];
      load_floats<T, 2 * PAIRS, VEC>(x + 2 * i0, e);
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {
        r[2 * j] = e[2 * j] * c[j] - e[2 * j + 1] * s[j];
        r[2 * j + 1] = e[2 * j + 1] * c[j] + e[2 * j] * s[j];
      }
      store_floats<T, 2 * PAIRS, VEC>(x + 2 * i0, r);
    }
  }
}

}  // namespace mojo_rotary

#define MOJO_KERNEL_rotary_embedding(NAME, P)                                                                 \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                   \
      NAME(MOJO_ARG_PARAMS(MOJO_ROTARY_EMBEDDING_ARGS, P::dtype, P::cache, P::pos)) {                         \
    mojo::after_previous_kernels();                                                                           \
    mojo_rotary::run<P::dtype, P::cache, P::pos, P>(q, k, positions, cos_sin, q_stride, k_stride, max_pos);   \
  }
