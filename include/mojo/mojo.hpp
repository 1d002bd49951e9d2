// mojo-jit: JIT-compiled LLM operator kernels for NVIDIA GPUs (libmojo_jit). Checking ops against their
// references is a library of its own: mojo/check.hpp, libmojo_jit_check.
#pragma once

#include "mojo/cache.hpp"
#include "mojo/compiler.hpp"
#include "mojo/device.hpp"
#include "mojo/environment.hpp"
#include "mojo/error.hpp"
#include "mojo/op.hpp"
#include "mojo/perf_model.hpp"
#include "mojo/runtime.hpp"
#include "mojo/target.hpp"
#include "mojo/templates.hpp"
#include "mojo/tensor.hpp"
