// Compiled, never run, by the Contract.* tests (tests/CMakeLists.txt) with the
// flags src/ops/ compiles with: a kernel's Args filled as an op fills it
// compiles; with two fields swapped (-DSWAPPED) or one left out (-DMISSING)
// it must not.
#include "rms_norm_args.h"

mojo_rms_norm::Args<void> fill(void* out, void* x, void* weight) {
#if defined(SWAPPED)
  return {.out = out, .residual = nullptr, .x = x, .weight = weight, .eps = 1e-6f, .rows = 4,
          .out_stride = 64, .x_stride = 64, .residual_stride = 64};
#elif defined(MISSING)
  return {.out = out, .residual = nullptr, .x = x, .weight = weight, .eps = 1e-6f, .rows = 4,
          .out_stride = 64, .x_stride = 64};
#else
  return {.out = out, .residual = nullptr, .x = x, .weight = weight, .eps = 1e-6f, .rows = 4,
          .out_stride = 64, .residual_stride = 64, .x_stride = 64};
#endif
}
