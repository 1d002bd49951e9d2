// Debian builds clang with Polly linked in (LINK_POLLY_INTO_TOOLS), so clang's CodeGen registers Polly's
// passes with every pass pipeline it builds, calling getPollyPluginInfo(); libPolly.a is not shipped, so a
// plugin that links clang statically defines it here. Polly's passes run only under -polly options, which
// the LLVM compiler never passes: registering none changes no output (LlvmCompiler's tests compare bytes).
#include <llvm/Passes/PassPlugin.h>

llvm::PassPluginLibraryInfo getPollyPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "Polly (not linked)", "none", [](llvm::PassBuilder&) {}};
}
