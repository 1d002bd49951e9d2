// The runtime arguments of cross_entropy.cu's row kernels (the MOJO_CE_*
// entries; the products take gemm.cu's), written once (mojo_args.h): the
// kernels' parameters and the structs the op (src/ops/cross_entropy.cpp)
// fills. Rows are the tokens; a slice is columns [col0, col0 + n) of the
// vocabulary. The lists of the structs without an element type take an
// unused first parameter, left empty: MOJO_ARG_PARAMS(MOJO_CE_INIT_ARGS, ).
#pragma once

#include "mojo_args.h"

namespace mojo_ce {
struct State;  // a row's running state across slices (cross_entropy.cu), in the workspace
}  // namespace mojo_ce

#define MOJO_CE_INIT_ARGS(_, ARG)          \
  ARG(mojo_ce::State*, state) /* [rows] */ \
  ARG(long long, rows)

#define MOJO_CE_UPDATE_ARGS(I, ARG)                                 \
  ARG(mojo_ce::State*, state)                                       \
  ARG(const float*, logits) /* the slice's [rows, n] */             \
  ARG(long long, ld)        /* elements between the logits' rows */ \
  ARG(const I*, labels)                                             \
  ARG(long long, col0)                                              \
  ARG(int, n)                                                       \
  ARG(float, cap) /* soft-cap (0: none) */

#define MOJO_CE_FINISH_ARGS(I, ARG)       \
  ARG(float*, row_loss)                   \
  ARG(float*, lse) /* null: not wanted */ \
  ARG(const mojo_ce::State*, state)       \
  ARG(const I*, labels)                   \
  ARG(long long, rows)                    \
  ARG(long long, vocab)                   \
  ARG(long long, ignore_index)            \
  ARG(float, smoothing)                   \
  ARG(float, z_loss)

#define MOJO_CE_REDUCE_ARGS(I, ARG) \
  ARG(float*, loss) /* [1] */       \
  ARG(const float*, row_loss)       \
  ARG(const I*, labels)             \
  ARG(long long, rows)              \
  ARG(long long, ignore_index)      \
  ARG(int, mean) /* 1: the mean over the rows not ignored; 0: the sum */

#define MOJO_CE_COUNT_ARGS(I, ARG) \
  ARG(float*, scale) /* [1] */     \
  ARG(const float*, grad_loss)     \
  ARG(const I*, labels)            \
  ARG(long long, rows)             \
  ARG(long long, ignore_index)     \
  ARG(int, mean) /* 1: scale = grad_loss[0] / the rows not ignored; 0: grad_loss[0] */

#define MOJO_CE_GRAD_ARGS(T, I, ARG)                                  \
  ARG(T*, dlogits)          /* the slice's [rows, n], ld apart */     \
  ARG(const float*, logits) /* the slice's [rows, n], ld apart */     \
  ARG(long long, ld)                                                  \
  ARG(const float*, lse)                                              \
  ARG(const float*, grad_lse) /* [rows], or null */                   \
  ARG(const I*, labels)                                               \
  ARG(const float*, scale)     /* CountArgs' scale, unless per_row */ \
  ARG(const float*, grad_loss) /* [rows], when per_row */             \
  ARG(int, per_row)                                                   \
  ARG(long long, col0)                                                \
  ARG(int, n)                                                         \
  ARG(long long, vocab)                                               \
  ARG(long long, ignore_index)                                        \
  ARG(float, smoothing)                                               \
  ARG(float, z_loss)                                                  \
  ARG(float, cap) /* soft-cap (0: none) */

#define MOJO_CE_ZERO_ARGS(_, ARG) \
  ARG(float*, acc)                \
  ARG(long long, n)

#define MOJO_CE_CONVERT_ARGS(T, ARG) \
  ARG(T*, out)                       \
  ARG(const float*, acc)             \
  ARG(long long, n)

namespace mojo_ce {
struct InitArgs {
  MOJO_CE_INIT_ARGS(, MOJO_ARG_FIELD)
};

template <class I>
struct UpdateArgs {
  MOJO_CE_UPDATE_ARGS(I, MOJO_ARG_FIELD)
};

template <class I>
struct FinishArgs {
  MOJO_CE_FINISH_ARGS(I, MOJO_ARG_FIELD)
};

template <class I>
struct ReduceArgs {
  MOJO_CE_REDUCE_ARGS(I, MOJO_ARG_FIELD)
};

template <class I>
struct CountArgs {
  MOJO_CE_COUNT_ARGS(I, MOJO_ARG_FIELD)
};

template <class T, class I>
struct GradArgs {
  MOJO_CE_GRAD_ARGS(T, I, MOJO_ARG_FIELD)
};

struct ZeroArgs {
  MOJO_CE_ZERO_ARGS(, MOJO_ARG_FIELD)
};

template <class T>
struct ConvertArgs {
  MOJO_CE_CONVERT_ARGS(T, MOJO_ARG_FIELD)
};

#ifndef __CUDACC_RTC__  // host code (KernelArgs::push_args): NVRTC rejects functions without __device__
template <class F>
void for_each_arg(const InitArgs& a, F f) {
  MOJO_CE_INIT_ARGS(, MOJO_ARG_VISIT)
}
template <class I, class F>
void for_each_arg(const UpdateArgs<I>& a, F f) {
  MOJO_CE_UPDATE_ARGS(I, MOJO_ARG_VISIT)
}
template <class I, class F>
void for_each_arg(const FinishArgs<I>& a, F f) {
  MOJO_CE_FINISH_ARGS(I, MOJO_ARG_VISIT)
}
template <class I, class F>
void for_each_arg(const ReduceArgs<I>& a, F f) {
  MOJO_CE_REDUCE_ARGS(I, MOJO_ARG_VISIT)
}
template <class I, class F>
void for_each_arg(const CountArgs<I>& a, F f) {
  MOJO_CE_COUNT_ARGS(I, MOJO_ARG_VISIT)
}
template <class T, class I, class F>
void for_each_arg(const GradArgs<T, I>& a, F f) {
  MOJO_CE_GRAD_ARGS(T, I, MOJO_ARG_VISIT)
}
template <class F>
void for_each_arg(const ZeroArgs& a, F f) {
  MOJO_CE_ZERO_ARGS(, MOJO_ARG_VISIT)
}
template <class T, class F>
void for_each_arg(const ConvertArgs<T>& a, F f) {
  MOJO_CE_CONVERT_ARGS(T, MOJO_ARG_VISIT)
}
#endif
}  // namespace mojo_ce
