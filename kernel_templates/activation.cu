// Activations, elementwise in float, stored in T:
//   silu(x) = x / (1 + e^-x)
//   gelu(x) = x/2 * (1 + erf(x / sqrt 2))
//   gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// and the gated forms over [..., 2 * D] -> [..., D] with a = the first half
// of the last dim and b = the second: swiglu = silu(a) * b, gelu_and_mul =
// gelu(a) * b.
//
// Params (P::dtype, P::act, P::d, P::vec by name in the entry macros at the end): T, ACT (a
// mojo::Act code, mojo_activation.h), GATED (0/1), D (the output's last dim when gated, else 0), VEC.
// Kernel args: MOJO_ACTIVATION_ARGS (activation_args.h).
// Geometry: 256 threads, one vector of VEC outputs each.
#include "mojo_prelude.cuh"
#include "activation_args.h"

namespace mojo_activation {

using mojo::activate;

template <class T, int ACT, int GATED, int D, int VEC>
__device__ __forceinline__ void run(T* __restrict__ out, const T* __restrict__ x, long long n) {
  using P = mojo::Pack<T, VEC>;
  const long long v = (long long)mojo::block_x() * mojo::block_dim_x() + mojo::thread_x();
  if (v * VEC >= n) return;
  P o;
  if constexpr (GATED) {
    static_assert(D % VEC == 0, "VEC must divide D");
    constexpr int NV = D / VEC;  // output vectors per row
    const long long row = v / NV, c = (v % NV) * VEC;
    const P a = mojo::load<T, VEC>(x + row * 2 * D + c);
    const P b = mojo::load<T, VEC>(x + row * 2 * D + D + c);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o.v[j] = mojo::from_float<T>(activate<ACT>(mojo::to_float(a.v[j])) * mojo::to_float(b.v[j]));
  } else {
    const P a = mojo::load<T, VEC>(x + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = mojo::from_float<T>(activate<ACT>(mojo::to_float(a.v[j])));
  }
  mojo::store<T, VEC>(out + v * VEC, o);
}

}  // namespace mojo_activation

#define MOJO_ACTIVATION_KERNEL(NAME, T, ACT, GATED, D, VEC)                                              \
  extern "C" __global__ void __launch_bounds__(256)                                                      \
      NAME(MOJO_ARG_PARAMS(MOJO_ACTIVATION_ARGS, T)) {                                                   \
    mojo::after_previous_kernels();                                                                      \
    mojo_activation::run<T, ACT, GATED, D, VEC>(out, x, n);                                              \
  }
#define MOJO_KERNEL_silu(NAME, P) MOJO_ACTIVATION_KERNEL(NAME, P::dtype, int(mojo::Act::silu), 0, 0, P::vec)
#define MOJO_KERNEL_gelu(NAME, P) MOJO_ACTIVATION_KERNEL(NAME, P::dtype, P::act, 0, 0, P::vec)
#define MOJO_KERNEL_swiglu(NAME, P) MOJO_ACTIVATION_KERNEL(NAME, P::dtype, int(mojo::Act::silu), 1, P::d, P::vec)
#define MOJO_KERNEL_gelu_and_mul(NAME, P) MOJO_ACTIVATION_KERNEL(NAME, P::dtype, P::act, 1, P::d, P::vec)
