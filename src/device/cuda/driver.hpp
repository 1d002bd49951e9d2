// The CUDA driver entry points, resolved from libcuda.so.1 with dlopen/dlsym
// on first use. cuda.h provides the types and prototypes only; nothing links
// against libcuda. Each entry is looked up under the exact symbol that cuda.h
// maps its name to (cuMemAlloc -> cuMemAlloc_v2), i.e. the same ABI a program
// linked against libcuda would bind to.
#pragma once

#include "device/hooks.hpp"

#include <cuda.h>

namespace mojo::driver {

// clang-format off: a table
#define MOJO_DRIVER_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString) X(cuDriverGetVersion) X(cuDeviceGetCount)   \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)               \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)                 \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuStreamCreate) X(cuStreamDestroy)                 \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                  \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)      \
  X(cuMemcpyDtoH) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuModuleLoadData)   \
  X(cuModuleUnload)                                                                           \
  X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel)        \
  X(cuLaunchKernelEx)                                                                         \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags)                \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuTensorMapEncodeTiled)               \
  X(cuThreadExchangeStreamCaptureMode) X(cuStreamIsCapturing)
// clang-format on

struct Api {
#define MOJO_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  MOJO_DRIVER_FUNCTIONS(MOJO_DRIVER_MEMBER)
#undef MOJO_DRIVER_MEMBER
};

// The loaded driver, cuInit'ed. Throws NoDeviceError when libcuda.so.1 is
// missing, lacks an entry point, or cuInit fails (e.g. no GPU).
const Api& api();

// Throws DeviceError("<call>: <CUDA_ERROR_NAME> (<description>)") unless r is CUDA_SUCCESS.
void check(CUresult r, const char* call);

}  // namespace mojo::driver

// MOJO_CU(cuMemAlloc(&p, n)): calls the driver, throws DeviceError on failure.
// Each call is counted (device_hooks::driver_calls).
#define MOJO_CU(call) \
  (::mojo::device_hooks::count_driver_call(), ::mojo::driver::check(::mojo::driver::api().call, #call))
