// The last stage, ptx -> cubin, with nvJitLink in process (the toolkit's
// ptxas as a library): the LLVM compiler's way to a cubin.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "mojo/target.hpp"

namespace mojo::nvjitlink {

// "13.0", or "unknown": part of a compiler's identity.
std::string version();

// One cubin for the exact `target` from PTX (one text, or the parts of a split
// module), ptxas on `jobs` threads. Throws CompileError with nvJitLink's log.
std::string ptx_to_cubin(std::span<const std::string> ptx, const Target& target, unsigned jobs,
                         std::string_view description);

}  // namespace mojo::nvjitlink
