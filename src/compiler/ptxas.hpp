// The LLVM path's last stage, PTX -> cubin: the CUDA toolkit's ptxas, run as a
// program. Not nvJitLink: a linker compiles its PTX inputs as relocatable
// code, where ptxas serializes wgmma around what it must take for calls to
// other units and ignores setmaxnreg (C7509, C7504), so every sm_90a kernel
// of the LLVM path lost its asynchronous MMA. ptxas on one whole module
// compiles it as NVRTC does.
#pragma once

#include <string>
#include <string_view>

#include "mojo/target.hpp"

namespace mojo::ptxas {

// $MOJO_JIT_PTXAS, else the ptxas of the CUDA toolkit this library was built
// with when it is there, else `ptxas` on PATH.
std::string program();

struct Cubin {
  std::string binary;
  std::string log;  // ptxas's warnings and notes, if any
};
// The cubin for the exact `target` of one PTX module, ptxas -O3 on `jobs`
// threads (--split-compile). Throws CompileError with ptxas's output when it
// fails, or when it cannot run or is of another CUDA release than
// `toolkit_release` (e.g. "13.0", part of the compiler's identity).
Cubin ptx_to_cubin(std::string_view ptx, const Target& target, unsigned jobs, std::string_view toolkit_release,
                   std::string_view description);

}  // namespace mojo::ptxas
