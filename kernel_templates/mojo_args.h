// mojo_args.h: a kernel's runtime arguments, written once. Each
// kernel_templates/<op>_args.h lists them, in parameter order, as
//
//   #define MOJO_SOFTMAX_ARGS(T, ARG) ARG(T* __restrict__, out) ARG(const T* __restrict__, x) ARG(long long, rows)
//
// and from that one list come
//   - the struct the op fills, with designated initialisers: a field out of
//     order does not compile, nor one left out (src/ops/ builds with
//     -Werror=missing-field-initializers):
//       template <class T> struct Args { MOJO_SOFTMAX_ARGS(T, MOJO_ARG_FIELD) };
//   - a visitor over its fields, which KernelArgs::push_args pushes one by one
//     (host code, in #ifndef __CUDACC_RTC__: NVRTC takes no host function):
//       template <class T, class F> void for_each_arg(const Args<T>& a, F f) { MOJO_SOFTMAX_ARGS(T, MOJO_ARG_VISIT) }
//   - the kernel's parameter list, in the entry macro:
//       NAME(MOJO_ARG_PARAMS(MOJO_SOFTMAX_ARGS, T))
//
// Why parameters and not the struct by value: a pointer that is a
// `const T* __restrict__` kernel parameter is provably read-only for the whole
// kernel, so NVRTC and LLVM load through it on the non-coherent path
// (ld.global.nc) and may move those loads above stores; read out of a struct
// parameter, neither compiler proves it (compiled here with NVRTC 13.0 for
// sm_90a, every one of the 135 example kernels that had ld.global.nc lost
// them all, and sample's spill stores grew by 20 bytes). The host
// instantiates the struct with void element types: the same fields, opaque
// pointers. Plain types only: NVRTC has no standard headers.
#pragma once

// A constexpr function that an op (host C++) and its kernel both call, so that the two share one formula: NVRTC
// takes no unannotated function; host C++, the CPU device's build and clang's CUDA (which takes a constexpr
// function as both host and device) need none.
#if defined(__CUDACC_RTC__)
#define MOJO_HOST_DEVICE __host__ __device__
#else
#define MOJO_HOST_DEVICE
#endif

#define MOJO_ARG_FIELD(type, name) type name;
#define MOJO_ARG_VISIT(type, name) f(a.name);
#define MOJO_ARG_PARAM_(type, name) , type name
#define MOJO_ARG_DROP_FIRST_(first, ...) __VA_ARGS__
#define MOJO_ARG_LIST_(...) MOJO_ARG_DROP_FIRST_(__VA_ARGS__)
// LIST's parameters, comma-separated: LIST(TYPES..., ARG) with each ARG(type, name) as ", type name", the first comma dropped.
#define MOJO_ARG_PARAMS(LIST, ...) MOJO_ARG_LIST_(LIST(__VA_ARGS__, MOJO_ARG_PARAM_))
#define MOJO_ARG_ONE_(type, name) +1
// How many parameters LIST has, a constant: the index of a parameter that follows them (a TMA descriptor's,
// which MOJO_PARAM_ADDRESS takes as a literal).
#define MOJO_ARG_COUNT(LIST, ...) (0 LIST(__VA_ARGS__, MOJO_ARG_ONE_))
