#include "compiler/llvm_compiler.hpp"

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <fmt/format.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CrashRecoveryContext.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/Utils/SplitModule.h>
#include <nvJitLink.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "compiler/diagnostics.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";
constexpr const char* kPtxFeature = "+ptx85";  // the newest PTX ISA LLVM 19 emits
constexpr int kSupportedSms[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};

// LLVM reports fatal errors (e.g. "Cannot select" in instruction selection)
// by calling a handler and then exit(). Ours jumps back out of the
// CrashRecoveryContext the compile runs in instead, leaving the reason here.
thread_local std::string tls_fatal_error;

void fatal_error_handler(void*, const char* reason, bool) {
  tls_fatal_error = reason;
  if (auto* crc = llvm::CrashRecoveryContext::GetCurrent()) crc->HandleExit(1);  // does not return
  // Not inside a compile of ours: LLVM's default behaviour follows (print, exit).
}

void initialize_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    llvm::install_fatal_error_handler(fatal_error_handler);
    // Signals inside a compile (a crash in LLVM) unwind to RunSafely too;
    // outside one, the handlers pass signals on to the previous handlers.
    llvm::CrashRecoveryContext::Enable();
  });
}

// Collects LLVM's own diagnostics (back end) so that none of them exits the process.
struct CollectingHandler : llvm::DiagnosticHandler {
  std::string* log;
  bool* failed;
  CollectingHandler(std::string* l, bool* f) : log(l), failed(f) {}
  bool handleDiagnostics(const llvm::DiagnosticInfo& info) override {
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::DiagnosticPrinterRawOStream printer(os);
    info.print(printer);
    const char* severity = info.getSeverity() == llvm::DS_Error     ? "error"
                           : info.getSeverity() == llvm::DS_Warning ? "warning"
                                                                    : "note";
    *log += fmt::format("llvm {}: {}\n", severity, os.str());
    if (info.getSeverity() == llvm::DS_Error) *failed = true;
    return true;  // handled: LLVM must not print it or exit
  }
};

std::string nvjitlink_version() {
  unsigned major = 0, minor = 0;
  return nvJitLinkVersion(&major, &minor) == NVJITLINK_SUCCESS ? fmt::format("{}.{}", major, minor) : "unknown";
}

// PTX (one text, or the parts of a split module) -> one cubin for an exact
// sm_XX, with nvJitLink in process (its ptxas on `jobs` threads).
std::string ptx_to_cubin(const std::vector<std::string>& ptx, const Target& target, unsigned jobs,
                         std::string_view description) {
  const std::string arch = fmt::format("-arch={}", target.sm_name()), split = fmt::format("-Xptxas=--split-compile={}", jobs);
  std::vector<const char*> options{arch.c_str(), "-O3"};
  if (jobs > 1) options.push_back(split.c_str());
  nvJitLinkHandle handle = nullptr;
  if (nvJitLinkCreate(&handle, std::uint32_t(options.size()), options.data()) != NVJITLINK_SUCCESS)
    throw CompileError(fmt::format("{}: nvJitLink cannot target {}", description, target.sm_name()), "");
  auto log_of = [&] {
    std::size_t n = 0;
    std::string log;
    if (nvJitLinkGetErrorLogSize(handle, &n) == NVJITLINK_SUCCESS && n > 0) {
      log.resize(n);
      nvJitLinkGetErrorLog(handle, log.data());
      while (!log.empty() && log.back() == '\0') log.pop_back();
    }
    return log;
  };
  std::string cubin;
  nvJitLinkResult r = NVJITLINK_SUCCESS;
  for (std::size_t i = 0; i < ptx.size() && r == NVJITLINK_SUCCESS; ++i) {
    std::string name = fmt::format("part{}.ptx", i);
    r = nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, ptx[i].data(), ptx[i].size(), name.c_str());
  }
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(handle);
  std::size_t size = 0;
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkGetLinkedCubinSize(handle, &size);
  if (r == NVJITLINK_SUCCESS) {
    cubin.resize(size);
    r = nvJitLinkGetLinkedCubin(handle, cubin.data());
  }
  std::string log = r == NVJITLINK_SUCCESS ? "" : log_of();
  nvJitLinkDestroy(&handle);
  if (r != NVJITLINK_SUCCESS)
    throw CompileError(fmt::format("{}: nvJitLink failed to turn PTX into a {} cubin (error {})", description,
                                   target.sm_name(), int(r)),
                       log);
  return cubin;
}

std::unique_ptr<llvm::TargetMachine> make_machine(const std::string& cpu, std::string* error) {
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, *error);
  if (!target) return nullptr;
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;  // as NVRTC's default --fmad=true
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      kTriple, cpu, kPtxFeature, options, std::nullopt, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
}

// NVPTX code generation of `module`; false if the target cannot emit.
bool emit_ptx(llvm::Module& module, llvm::TargetMachine& machine, std::string* ptx) {
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) return false;
  passes.run(module);
  ptx->assign(text.begin(), text.end());
  return true;
}

// The back end for one part of a split module, on its own thread: its own
// context (LLVM contexts are not shared across threads), its own recovery scope.
std::string codegen_part(const llvm::SmallVector<char, 0>& bitcode, const std::string& cpu, std::string* error) {
  std::string ptx;
  auto run = [&] {
    auto context = std::make_unique<llvm::LLVMContext>();
    bool failed = false;
    context->setDiagnosticHandler(std::make_unique<CollectingHandler>(error, &failed));
    auto module = llvm::parseBitcodeFile(
        llvm::MemoryBufferRef(llvm::StringRef(bitcode.data(), bitcode.size()), "part"), *context);
    if (!module) {
      *error += llvm::toString(module.takeError());
      return;
    }
    auto machine = make_machine(cpu, error);
    if (!machine || !emit_ptx(**module, *machine, &ptx) || failed) ptx.clear();
    module->reset();
  };
  tls_fatal_error.clear();
  llvm::CrashRecoveryContext crc;
  if (!crc.RunSafely(run)) {
    *error += "LLVM ERROR: " + (tls_fatal_error.empty() ? std::string("it crashed") : tls_fatal_error) + "\n";
    return {};
  }
  return ptx;
}

}  // namespace

LlvmCompiler::LlvmCompiler() {
  initialize_llvm_once();
  identity_ = fmt::format("llvm-{} clang-cuda -O3 -ffp-contract=fast {} nvjitlink-{}", LLVM_VERSION_STRING, kPtxFeature,
                          nvjitlink_version());
}

CompileResult LlvmCompiler::compile(const CompileRequest& request) const {
  const Target& target = request.target;
  if (std::find(std::begin(kSupportedSms), std::end(kSupportedSms), target.sm) == std::end(kSupportedSms) ||
      (target.arch_specific && target.sm != 90))
    throw ArchError(fmt::format("{}: LLVM {} cannot target {} (its NVPTX back end stops at sm_90a / PTX 8.5); use "
                                "--compiler=nvrtc for it",
                                request.description, LLVM_VERSION_MAJOR, target.sm_name()));
  const std::string cpu = target.sm_name();
  const std::string file = fmt::format("/mojo/{}", request.program_name);

  // Everything LLVM allocates for this compile. On a fatal error we jump out
  // of the middle of LLVM, so these are then leaked rather than destroyed
  // in a state nobody can vouch for.
  auto context = std::make_unique<llvm::LLVMContext>();
  std::string log;
  bool backend_failed = false;
  std::unique_ptr<llvm::Module> module;
  std::string out;                     // IR text (emit llvm, llvm-opt)
  std::vector<std::string> ptx_parts;  // PTX: one, or one per part of a split module
  std::string front_end_log;

  auto run = [&] {
    // ---- front end: clang, reading only the in-memory file ----
    llvm::raw_string_ostream diag_stream(front_end_log);
    auto diag_options = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
    diag_options->ShowColors = false;
    auto* printer = new clang::TextDiagnosticPrinter(diag_stream, diag_options.get());
    clang::DiagnosticsEngine diags(llvm::makeIntrusiveRefCnt<clang::DiagnosticIDs>(), diag_options, printer);

    std::vector<const char*> args = {"-triple", kTriple, "-aux-triple", "x86_64-unknown-linux-gnu", "-fcuda-is-device",
                                     "-target-cpu", cpu.c_str(), "-target-feature", kPtxFeature, "-x", "cuda",
                                     "-std=c++17", "-O3", "-disable-llvm-passes", "-ffp-contract=fast",
                                     "-nostdsysteminc", "-nobuiltininc", "-emit-llvm",
                                     file.c_str()};
    auto invocation = std::make_shared<clang::CompilerInvocation>();
    if (!clang::CompilerInvocation::CreateFromArgs(*invocation, args, diags)) return;

    clang::CompilerInstance ci;
    ci.setInvocation(invocation);
    ci.createDiagnostics(new clang::TextDiagnosticPrinter(diag_stream, &ci.getDiagnosticOpts()), true);
    ci.setVerboseOutputStream(diag_stream);  // "N errors generated." goes to our log, not stderr
    auto files = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
    files->addFile(file, 0, llvm::MemoryBuffer::getMemBufferCopy(request.source, file));
    ci.createFileManager(files);
    ci.createSourceManager(ci.getFileManager());

    clang::EmitLLVMOnlyAction action(context.get());
    if (!ci.ExecuteAction(action)) return;
    module = action.takeModule();
    if (!module) return;
    context->setDiagnosticHandler(std::make_unique<CollectingHandler>(&log, &backend_failed));
    if (request.emit == Emit::llvm) {
      llvm::raw_string_ostream os(out);
      module->print(os, nullptr);
      return;
    }

    // ---- middle end: the O3 pipeline, with the NVPTX target's own passes ----
    std::string error;
    std::unique_ptr<llvm::TargetMachine> machine = make_machine(cpu, &error);
    if (!machine) {
      log += error;
      backend_failed = true;
      return;
    }
    module->setDataLayout(machine->createDataLayout());
    {
      llvm::LoopAnalysisManager lam;
      llvm::FunctionAnalysisManager fam;
      llvm::CGSCCAnalysisManager cgam;
      llvm::ModuleAnalysisManager mam;
      llvm::PassBuilder builder(machine.get());
      builder.registerModuleAnalyses(mam);
      builder.registerCGSCCAnalyses(cgam);
      builder.registerFunctionAnalyses(fam);
      builder.registerLoopAnalyses(lam);
      builder.crossRegisterProxies(lam, fam, cgam, mam);
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*module, mam);
    }
    if (request.emit == Emit::llvm_opt) {
      llvm::raw_string_ostream os(out);
      module->print(os, nullptr);
      return;
    }

    // ---- back end: NVPTX -> PTX, split across threads for a cubin of many kernels ----
    const unsigned kernels = unsigned(std::count_if(module->begin(), module->end(), [](const llvm::Function& f) {
      return !f.isDeclaration() && f.hasExternalLinkage();
    }));
    const unsigned parts = request.emit == Emit::cubin ? std::min(request.jobs, kernels) : 1;
    if (parts <= 1) {
      if (!emit_ptx(*module, *machine, &out)) {
        log += "the NVPTX target cannot emit assembly\n";
        backend_failed = true;
      }
      ptx_parts.push_back(std::move(out));
      out.clear();
      return;
    }
    std::vector<llvm::SmallVector<char, 0>> bitcode;
    llvm::SplitModule(*module, parts, [&](std::unique_ptr<llvm::Module> part) {
      llvm::raw_svector_ostream os(bitcode.emplace_back());
      llvm::WriteBitcodeToFile(*part, os);
    });
    ptx_parts.resize(bitcode.size());
    std::vector<std::string> errors(bitcode.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < bitcode.size(); ++i)
      threads.emplace_back([&, i] { ptx_parts[i] = codegen_part(bitcode[i], cpu, &errors[i]); });
    for (std::thread& t : threads) t.join();
    for (std::size_t i = 0; i < bitcode.size(); ++i)
      if (ptx_parts[i].empty()) {
        log += errors[i];
        backend_failed = true;
      }
  };

  tls_fatal_error.clear();
  llvm::CrashRecoveryContext crc;
  const bool survived = crc.RunSafely(run);
  if (!survived) {
    // Jumped out of LLVM: its objects may be half-way through anything.
    (void)context.release();
    (void)module.release();
    std::string reason = tls_fatal_error.empty() ? "it crashed" : tls_fatal_error.substr(0, tls_fatal_error.find('\n'));
    throw CompileError(fmt::format("{}: LLVM failed for {}: {}", request.description, cpu, reason),
                       front_end_log + log + (tls_fatal_error.empty() ? "" : "LLVM ERROR: " + tls_fatal_error + "\n"));
  }
  const bool ir = request.emit == Emit::llvm || request.emit == Emit::llvm_opt;
  if (!module || backend_failed || (ir ? out.empty() : ptx_parts.empty())) {
    std::string all = front_end_log + log;
    throw CompileError(fmt::format("{}: clang/LLVM failed for {}: {}", request.description, cpu,
                                   diagnostics::first_error(all)),
                       diagnostics::annotate(all, request.source));
  }
  module.reset();  // before its context
  context.reset();

  CompileResult result;
  result.log = front_end_log + log;
  if (ir)
    result.binary = std::move(out);
  else if (request.emit == Emit::cubin)
    result.binary = ptx_to_cubin(ptx_parts, target, request.jobs, request.description);
  else
    result.binary = std::move(ptx_parts.front());
  return result;
}

}  // namespace mojo
