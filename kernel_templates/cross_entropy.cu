// The fused linear cross-entropy (src/ops/cross_entropy.cpp): logits =
// hidden [N, H] x weight [V, H]^T, never all at once. Both ops run their plan
// once per slice of VC vocabulary columns ("repeat" r: columns [r VC, r VC + n)),
// with the products on gemm.cu's kernels and the row work here:
//
// forward, per slice: logits [N, n] (f32, workspace) = hidden x weight[slice]^T,
//   then `update` folds each row's slice into its running state (max, sum of
//   exp, the label's logit, the sum of logits); after the last, `finish`
//   gives each row's lse and loss and `reduce` the mean or sum.
// backward, per slice: the same logits, `grad` turns them into
//   dlogits [N, n] (T) = g (softmax - target) (+ grad_lse softmax, when given;
//   times the soft-cap's slope),
//   then grad_weight[slice] = dlogits^T x hidden and
//   grad_hidden (f32 accumulator) += dlogits x weight[slice]; `zero` and
//   `count` run before the first slice, `convert` after the last.
//
// Per row i with label y, logits l (soft-capped first when softcap > 0:
// l = cap tanh(l / cap)), lse = log sum exp l:
//   loss_i = lse - (1 - s) l_y - (s / V) sum_j l_j + z lse^2     (s: label smoothing, z: z-loss)
//   dloss_i / dl_j = p_j (1 + 2 z lse) - (1 - s) [j = y] - s / V (p = softmax)
// A row whose label is ignore_index has loss 0 and gradient 0; a label
// outside [0, V) otherwise gives NaN (the debug checks name it). The mean
// divides by the rows not ignored. Row work: one block of THREADS per row,
// float math, sums in a fixed order.
// Kernel args: MOJO_CE_X_ARGS for row kernel MOJO_CE_X (cross_entropy_args.h).
#include "gemm.cu"
#include "mojo_prelude.cuh"
#include "cross_entropy_args.h"

namespace mojo_ce {

// A row's running state across slices, in the workspace.
struct State {
  float max, sum, label_logit, logit_sum;
};

__device__ __forceinline__ float capped(float l, float cap) { return cap > 0.f ? cap * mojo::tanh_f(l / cap) : l; }

template <class I>
__device__ __forceinline__ bool ignored(const I* labels, long long row, long long ignore_index) {
  return (long long)labels[row] == ignore_index;
}

template <int THREADS>
__device__ __forceinline__ void init(State* state, long long rows) {
  const long long i = (long long)mojo::block_x() * THREADS + mojo::thread_x();
  if (i < rows) state[i] = State{mojo::neg_inf(), 0.f, mojo::bits_to_float(0x7fc00000u), 0.f};
}

// Folds columns [col0, col0 + n) of each row (logits: rows ld apart) into its state.
template <class I, int THREADS>
__device__ __forceinline__ void update(State* state, const float* logits, long long ld, const I* labels,
                                       long long col0, int n, float cap) {
  __shared__ float scratch[64];  // block_sum_pair's
  const long long row = mojo::block_x();
  const float* l = logits + row * ld;
  float m = mojo::neg_inf(), s = 0.f, sum = 0.f;
  for (int j = int(mojo::thread_x()); j < n; j += THREADS) {
    const float v = capped(l[j], cap);
    sum += v;
    if (v > m) {
      s = s * mojo::exp_approx(m - v);
      m = v;
    }
    s += mojo::exp_approx(v - m);
  }
  const float slice_max = mojo::block_reduce<THREADS>(m, scratch, mojo::Max());
  s = s == 0.f ? 0.f : s * mojo::exp_approx(m - slice_max);
  mojo::block_sum_pair<THREADS>(s, sum, scratch);
  if (mojo::thread_x() == 0) {
    State st = state[row];
    const float new_max = mojo::max_f(st.max, slice_max);
    st.sum = (st.sum == 0.f ? 0.f : st.sum * mojo::exp_approx(st.max - new_max)) +
             (s == 0.f ? 0.f : s * mojo::exp_approx(slice_max - new_max));
    st.max = new_max;
    st.logit_sum += sum;
    const long long y = (long long)labels[row];
    if (y >= col0 && y < col0 + n) st.label_logit = capped(l[y - col0], cap);
    state[row] = st;
  }
}

// Each row's lse and loss from its state; the loss per row, and its lse when wanted.
template <class I, int THREADS>
__device__ __forceinline__ void finish(float* row_loss, float* lse, const State* state, const I* labels,
                                       long long rows, long long vocab, long long ignore_index, float smoothing,
                                       float z_loss) {
  const long long i = (long long)mojo::block_x() * THREADS + mojo::thread_x();
  if (i >= rows) return;
  const State st = state[i];
  const float row_lse = st.max + mojo::log_approx(st.sum);
  if (lse != nullptr) lse[i] = row_lse;
  // label_logit stays NaN when the label is outside [0, V): the loss says so.
  row_loss[i] = ignored(labels, i, ignore_index)
                    ? 0.f
                    : row_lse - (1.f - smoothing) * st.label_logit - smoothing / float(vocab) * st.logit_sum +
                          z_loss * row_lse * row_lse;
}

// loss[0] = the sum of the rows' losses, or their mean over the rows not ignored. One block.
template <class I, int THREADS>
__device__ __forceinline__ void reduce(float* loss, const float* row_loss, const I* labels, long long rows,
                                       long long ignore_index, int mean) {
  __shared__ float scratch[64];  // block_sum_pair's
  float sum = 0.f, count = 0.f;
  for (long long i = mojo::thread_x(); i < rows; i += THREADS) {
    sum += row_loss[i];
    count += ignored(labels, i, ignore_index) ? 0.f : 1.f;
  }
  mojo::block_sum_pair<THREADS>(sum, count, scratch);
  if (mojo::thread_x() == 0) loss[0] = mean ? sum / count : sum;
}

// The scale of each row's gradient: grad_loss[0] (sum), grad_loss[0] / rows not ignored (mean), or
// grad_loss[row] (none); written to scale[0] for the first two. One block.
template <class I, int THREADS>
__device__ __forceinline__ void count(float* scale, const float* grad_loss, const I* labels, long long rows,
                                      long long ignore_index, int mean) {
  __shared__ float scratch[32];
  float n = 0.f;
  for (long long i = mojo::thread_x(); i < rows; i += THREADS) n += ignored(labels, i, ignore_index) ? 0.f : 1.f;
  n = mojo::block_sum<THREADS>(n, scratch);
  if (mojo::thread_x() == 0) scale[0] = mean ? grad_loss[0] / n : grad_loss[0];
}

// dlogits for columns [col0, col0 + n) of each row (one block per row): g dloss_i / dl_j, plus
// grad_lse[i] p_j where the caller's loss used the lse too (a row ignored still has an lse).
template <class T, class I, int THREADS>
__device__ __forceinline__ void grad(T* dlogits, const float* logits, long long ld, const float* lse,
                                     const float* grad_lse, const I* labels, const float* scale,
                                     const float* grad_loss, int per_row, long long col0, int n, long long vocab,
                                     long long ignore_index, float smoothing, float z_loss, float cap) {
  const long long row = mojo::block_x();
  const float* l = logits + row * ld;
  T* d = dlogits + row * ld;
  const long long y = (long long)labels[row];
  const bool skip = y == ignore_index;
  const float g = skip ? 0.f : per_row ? grad_loss[row] : scale[0], row_lse = lse[row];
  const float g_lse = grad_lse != nullptr ? grad_lse[row] : 0.f;
  const float p_scale = g * (1.f + 2.f * z_loss * row_lse) + g_lse, uniform = g * smoothing / float(vocab),
              label = g * (1.f - smoothing);
  const float bad = !skip && (y < 0 || y >= vocab) ? mojo::bits_to_float(0x7fc00000u) : 0.f;  // NaN: a bad label
  for (int j = int(mojo::thread_x()); j < n; j += THREADS) {
    float v = 0.f;
    if (!skip || g_lse != 0.f) {
      const float c = capped(l[j], cap);
      v = mojo::exp_approx(c - row_lse) * p_scale - uniform - (col0 + j == y ? label : 0.f) + bad;
      if (cap > 0.f) v *= 1.f - (c / cap) * (c / cap);
    }
    d[j] = mojo::from_float<T>(v);
  }
  // The products that read dlogits load 16-byte chunks (their src-size trimmed at column n): the columns the
  // last chunk spans past n are zeros here, not memory nothing wrote (initcheck counts the whole chunk).
  const long long padded = (n + 7) / 8 * 8 < ld ? (n + 7) / 8 * 8 : ld;
  for (long long j = n + mojo::thread_x(); j < padded; j += THREADS) d[j] = mojo::from_float<T>(0.f);
}

template <int THREADS>
__device__ __forceinline__ void zero(float* acc, long long n) {
  const long long i = (long long)mojo::block_x() * THREADS + mojo::thread_x();
  if (i < n) acc[i] = 0.f;
}

template <class T, int THREADS>
__device__ __forceinline__ void convert(T* out, const float* acc, long long n) {
  const long long i = (long long)mojo::block_x() * THREADS + mojo::thread_x();
  if (i < n) out[i] = mojo::from_float<T>(acc[i]);
}

}  // namespace mojo_ce

// One entry per row kernel; the products enter by gemm.cu's macros.
#define MOJO_CE_INIT(NAME, P)                                                                        \
  extern "C" __global__ void __launch_bounds__(P::threads) NAME(MOJO_ARG_PARAMS(MOJO_CE_INIT_ARGS, )) { \
    mojo::after_previous_kernels();                                                                  \
    mojo_ce::init<P::threads>(state, rows);                                                          \
  }
#define MOJO_CE_UPDATE(NAME, P)                                                                              \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                   \
      NAME(MOJO_ARG_PARAMS(MOJO_CE_UPDATE_ARGS, P::index)) {                                                 \
    mojo::after_previous_kernels();                                                                         \
    mojo_ce::update<P::index, P::threads>(state, logits, ld, labels, col0, n, cap);                         \
  }
#define MOJO_CE_FINISH(NAME, P)                                                                              \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                   \
      NAME(MOJO_ARG_PARAMS(MOJO_CE_FINISH_ARGS, P::index)) {                                                 \
    mojo::after_previous_kernels();                                                                           \
    mojo_ce::finish<P::index, P::threads>(row_loss, lse, state, labels, rows, vocab, ignore_index, smoothing, \
                                          z_loss);                                                           \
  }
#define MOJO_CE_REDUCE(NAME, P)                                                                             \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                  \
      NAME(MOJO_ARG_PARAMS(MOJO_CE_REDUCE_ARGS, P::index)) {                                                \
    mojo::after_previous_kernels();                                                                         \
    mojo_ce::reduce<P::index, P::threads>(loss, row_loss, labels, rows, ignore_index, mean);                \
  }
#define MOJO_CE_COUNT(NAME, P)                                                                              \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                  \
      NAME(MOJO_ARG_PARAMS(MOJO_CE_COUNT_ARGS, P::index)) {                                                 \
    mojo::after_previous_kernels();                                                                         \
    mojo_ce::count<P::index, P::threads>(scale, grad_loss, labels, rows, ignore_index, mean);               \
  }
#define MOJO_CE_GRAD(NAME, P)                                                                                     \
  extern "C" __global__ void __launch_bounds__(P::threads)                                                        \
      NAME(MOJO_ARG_PARAMS(MOJO_CE_GRAD_ARGS, P::dtype, P::index)) {                                              \
    mojo::after_previous_kernels();                                                                              \
    mojo_ce::grad<P::dtype, P::index, P::threads>(dlogits, logits, ld, lse, grad_lse, labels, scale, grad_loss,  \
                                                  per_row, col0, n, vocab, ignore_index, smoothing, z_loss, cap); \
  }
#define MOJO_CE_ZERO(NAME, P)                                                                            \
  extern "C" __global__ void __launch_bounds__(P::threads) NAME(MOJO_ARG_PARAMS(MOJO_CE_ZERO_ARGS, )) {  \
    mojo::after_previous_kernels();                                                                      \
    mojo_ce::zero<P::threads>(acc, n);                                                                   \
  }
#define MOJO_CE_CONVERT(NAME, P)                                                                         \
  extern "C" __global__ void __launch_bounds__(P::threads)                                               \
      NAME(MOJO_ARG_PARAMS(MOJO_CE_CONVERT_ARGS, P::dtype)) {                                            \
    mojo::after_previous_kernels();                                                                      \
    mojo_ce::convert<P::dtype, P::threads>(out, acc, n);                                                 \
  }
