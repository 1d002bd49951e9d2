// clang's front end for the LLVM path (llvm_compiler.cpp): a CUDA translation unit to LLVM IR, in memory,
// for one GPU. The prelude every template includes first (mojo_prelude.cuh and what it includes: about
// half of a small kernel's front-end time) is parsed once per process and GPU into a precompiled header,
// from its second use on, and the compiles after that read it instead of parsing it again.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace mojo::clang_front_end {

inline constexpr const char* kNvptxTriple = "nvptx64-nvidia-cuda";

// The IR of `source` (its diagnostics name it `file`) for the GPU `cpu` ("sm_90a"), in `context`; null on
// failure. clang's diagnostics go to `log` either way.
std::unique_ptr<llvm::Module> compile(std::string_view source, const std::string& file, const std::string& cpu,
                                      llvm::LLVMContext& context, std::string* log);

}  // namespace mojo::clang_front_end
