#include "compiler/llvm_compiler.hpp"

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
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/CrashRecoveryContext.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "compiler/clang_front_end.hpp"
#include "compiler/diagnostics.hpp"
#include "compiler/identity.hpp"
#include "compiler/ptxas.hpp"
#include "mojo/error.hpp"

namespace mojo {
namespace {

constexpr const char* kTriple = clang_front_end::kNvptxTriple;
constexpr const char* kPtxFeature = compiler_identity::kLlvmPtxFeature;
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

// 32-bit pointers into shared, constant and local memory, as the front end's data layout has them
// (-fcuda-short-ptr; Triton sets the same option): a shared address the kernel keeps (a ring, a histogram's
// base) then takes one register, not two. The NVPTX back end of LLVM 19 reads it from an option alone; the
// option is this plugin's own, since LLVM is linked into it with every symbol local (plugin.map). sample bf16
// at B 1: 143 registers -> 128 (NVRTC, whose PTX keeps 64-bit shared addresses: 106).
// Without the option (not LLVM 19) the back end keeps 64-bit ones: the same code as before, more registers.
void use_short_pointers() {
  if (llvm::cl::Option* option = llvm::cl::getRegisteredOptions().lookup("nvptx-short-ptr"))
    option->addOccurrence(0, "nvptx-short-ptr", "true");
}

void initialize_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    use_short_pointers();
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
    auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(llvm::StringRef(bitcode.data(), bitcode.size()), "part"),
                                         *context);
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

// A kernel: a function the module defines for the outside (a bundle's other functions are its kernels' helpers).
bool is_kernel(const llvm::GlobalValue& g) {
  return llvm::isa<llvm::Function>(g) && !g.isDeclaration() && g.hasExternalLinkage();
}

// Instructions of `f` and of every function it calls, each counted once: the work its code generation takes.
std::size_t code_size(const llvm::Function& f, std::set<const llvm::Function*>& seen) {
  if (f.isDeclaration() || !seen.insert(&f).second) return 0;
  std::size_t n = f.getInstructionCount();
  for (const llvm::BasicBlock& block : f)
    for (const llvm::Instruction& i : block)
      if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&i))
        if (const llvm::Function* callee = call->getCalledFunction()) n += code_size(*callee, seen);
  return n;
}

// `module`'s kernels in at most `parts` modules for code generation on as many threads. Each part holds whole
// kernels with its own copy of every function they call, so no call crosses parts: ptxas serializes wgmma
// around a call to another unit and ignores setmaxnreg there. (LLVM's SplitModule spreads the helpers over
// the parts by name, making them such calls.) The largest kernels are placed first, each on the part with
// the least code so far.
std::vector<std::unique_ptr<llvm::Module>> split_by_kernel(llvm::Module& module, unsigned parts) {
  std::vector<std::pair<std::size_t, const llvm::Function*>> kernels;
  for (llvm::Function& f : module) {
    if (is_kernel(f)) continue;
    if (!f.isDeclaration()) f.setLinkage(llvm::GlobalValue::InternalLinkage), f.setComdat(nullptr);
  }
  for (llvm::GlobalVariable& g : module.globals())
    if (!g.isDeclaration() && g.isConstant()) g.setLinkage(llvm::GlobalValue::InternalLinkage), g.setComdat(nullptr);
  for (const llvm::Function& f : module) {
    std::set<const llvm::Function*> seen;
    if (is_kernel(f)) kernels.emplace_back(code_size(f, seen), &f);
  }
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  parts = std::min<unsigned>(parts, unsigned(kernels.size()));
  std::vector<std::size_t> load(parts, 0);
  std::map<const llvm::GlobalValue*, unsigned> part_of;
  for (const auto& [size, kernel] : kernels) {
    const unsigned lightest = unsigned(std::min_element(load.begin(), load.end()) - load.begin());
    load[lightest] += size;
    part_of[kernel] = lightest;
  }
  std::vector<std::unique_ptr<llvm::Module>> out;
  for (unsigned p = 0; p < parts; ++p) {
    llvm::ValueToValueMapTy map;
    // A mutable variable the module exports is defined once, in the first part.
    auto mine = [&](const llvm::GlobalValue* g) {
      if (is_kernel(*g)) return part_of.at(g) == p;
      return g->hasLocalLinkage() || p == 0;
    };
    std::unique_ptr<llvm::Module> part = llvm::CloneModule(module, map, mine);
    // The parts' PTX is joined into one module (merge_ptx): each part's copies of the helpers get names of their own.
    if (p > 0) {
      for (llvm::Function& f : *part)
        if (f.hasLocalLinkage()) f.setName(fmt::format("{}.part{}", f.getName().str(), p));
      for (llvm::GlobalVariable& g : part->globals())
        if (g.hasLocalLinkage()) g.setName(fmt::format("{}.part{}", g.getName().str(), p));
    }
    // Drop the other parts' kernels and what only they used.
    auto unused = [&](const llvm::Function& f) {
      const llvm::Function* original = module.getFunction(f.getName());
      const bool other_kernel = f.isDeclaration() && original && is_kernel(*original);
      return f.use_empty() && (f.hasLocalLinkage() || other_kernel);
    };
    for (bool erased = true; erased;) {
      erased = false;
      for (llvm::Function& f : llvm::make_early_inc_range(*part))
        if (unused(f)) f.eraseFromParent(), erased = true;
      for (llvm::GlobalVariable& g : llvm::make_early_inc_range(part->globals()))
        if (g.use_empty() && g.hasLocalLinkage()) g.eraseFromParent(), erased = true;
    }
    out.push_back(std::move(part));
  }
  return out;
}

// The PTX of a split module's parts as one module: the first part whole, then each other part without its
// header (.version, .target, .address_size) and without the .extern declarations already made. ptxas must see
// one module: it compiles several as relocatable units, serializing wgmma and ignoring setmaxnreg there.
std::string merge_ptx(const std::vector<std::string>& parts) {
  std::string out;
  std::set<std::string_view> declared;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const std::string_view text = parts[p];
    bool in_header = p > 0;
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t end = std::min(text.find('\n', at), text.size());
      const std::string_view line = text.substr(at, end - at);
      at = end + 1;
      if (in_header) {
        in_header = !line.starts_with(".address_size");
        continue;
      }
      if (line.starts_with(".extern") && !declared.insert(line).second) continue;
      out.append(line).push_back('\n');
    }
  }
  return out;
}

// One compile, stage by stage: front_end (clang: source -> IR), optimize
// (the O3 pipeline with the NVPTX target's passes), codegen (NVPTX: IR ->
// PTX, split across threads for a module of many kernels). Each returns
// false on failure, the reason in the logs. They run inside one
// CrashRecoveryContext: a fatal LLVM error jumps out of any of them.
class Compilation {
 public:
  explicit Compilation(const CompileRequest& request)
      : request_(request), cpu_(request.target.sm_name()), file_(fmt::format("/mojo/{}", request.program_name)) {}

  bool front_end() {
    module = clang_front_end::compile(request_.source, file_, cpu_, *context, &front_end_log);
    if (!module) return false;
    context->setDiagnosticHandler(std::make_unique<CollectingHandler>(&back_end_log, &back_end_failed));
    return true;
  }

  bool optimize() {
    std::string error;
    machine_ = make_machine(cpu_, &error);
    if (!machine_) return fail(error);
    module->setDataLayout(machine_->createDataLayout());
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder builder(machine_.get());
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*module, mam);
    return !back_end_failed;
  }

  bool codegen() {
    const unsigned kernels = unsigned(std::count_if(module->begin(), module->end(), is_kernel));
    const unsigned parts = request_.emit == Emit::cubin ? std::min(request_.jobs, kernels) : 1;
    if (parts <= 1) {
      if (!emit_ptx(*module, *machine_, &ptx.emplace_back())) return fail("the NVPTX target cannot emit assembly\n");
      return !back_end_failed;
    }
    std::vector<llvm::SmallVector<char, 0>> bitcode;
    for (const std::unique_ptr<llvm::Module>& part : split_by_kernel(*module, parts)) {
      llvm::raw_svector_ostream os(bitcode.emplace_back());
      llvm::WriteBitcodeToFile(*part, os);
    }
    ptx.resize(bitcode.size());
    std::vector<std::string> errors(bitcode.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < bitcode.size(); ++i)
      threads.emplace_back([&, i] { ptx[i] = codegen_part(bitcode[i], cpu_, &errors[i]); });
    for (std::thread& t : threads) t.join();
    for (std::size_t i = 0; i < bitcode.size(); ++i)
      if (ptx[i].empty()) fail(errors[i]);
    return !back_end_failed;
  }

  // The module as IR text, kept as `stage` when asked for or when it is the result.
  void keep_ir(Emit stage) {
    if (!request_.keep_stages && request_.emit != stage) return;
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os, nullptr);
    stages.emplace_back(stage, std::move(text));
  }

  std::unique_ptr<llvm::LLVMContext> context = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> module;
  std::string front_end_log, back_end_log;
  bool back_end_failed = false;
  std::vector<std::string> ptx;  // one, or one per part of a split module
  std::vector<std::pair<Emit, std::string>> stages;

 private:
  bool fail(const std::string& why) {
    back_end_log += why;
    back_end_failed = true;
    return false;
  }
  const CompileRequest& request_;
  const std::string cpu_, file_;
  std::unique_ptr<llvm::TargetMachine> machine_;
};

}  // namespace

LlvmCompiler::LlvmCompiler() {
  initialize_llvm_once();
  identity_ = compiler_identity::llvm(LLVM_VERSION_STRING, MOJO_CUDA_RELEASE);
}

CompileResult LlvmCompiler::compile(const CompileRequest& request) const {
  const Target& target = request.target;
  if (std::find(std::begin(kSupportedSms), std::end(kSupportedSms), target.sm) == std::end(kSupportedSms) ||
      (target.arch_specific && target.sm != 90))
    throw ArchError(
        fmt::format("{}: LLVM {} cannot target {} (its NVPTX back end stops at sm_90a / PTX 8.5); use "
                    "--compiler=nvrtc for it",
                    request.description, LLVM_VERSION_MAJOR, target.sm_name()));
  // Everything LLVM allocates lives in `c`. On a fatal error we jump out of
  // the middle of LLVM, so its context and module are then leaked rather
  // than destroyed in a state nobody can vouch for.
  auto c = std::make_unique<Compilation>(request);
  CompileResult result;
  // Each stage timed, the time it takes to keep its IR included.
  auto timed = [&](CompileStage stage, auto f) {
    const auto start = std::chrono::steady_clock::now();
    const bool ok = f();
    result.stage_ms[int(stage)] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return ok;
  };
  bool done = false;
  auto run = [&] {
    if (!timed(CompileStage::front_end, [&] { return c->front_end() && (c->keep_ir(Emit::llvm), true); })) return;
    if (request.emit == Emit::llvm) return void(done = true);
    if (!timed(CompileStage::optimize, [&] { return c->optimize() && (c->keep_ir(Emit::llvm_opt), true); })) return;
    if (request.emit == Emit::llvm_opt) return void(done = true);
    done = timed(CompileStage::codegen, [&] { return c->codegen(); });
  };
  tls_fatal_error.clear();
  llvm::CrashRecoveryContext crc;
  if (!crc.RunSafely(run)) {
    std::string log = c->front_end_log + c->back_end_log;
    (void)c->context.release();
    (void)c->module.release();
    (void)c.release();
    std::string reason = tls_fatal_error.empty() ? "it crashed" : tls_fatal_error.substr(0, tls_fatal_error.find('\n'));
    throw CompileError(fmt::format("{}: LLVM failed for {}: {}", request.description, target.sm_name(), reason),
                       log + (tls_fatal_error.empty() ? "" : "LLVM ERROR: " + tls_fatal_error + "\n"));
  }
  const std::string log = c->front_end_log + c->back_end_log;
  if (!done || c->back_end_failed)
    throw CompileError(fmt::format("{}: clang/LLVM failed for {}: {}", request.description, target.sm_name(),
                                   diagnostics::first_error(log)),
                       diagnostics::annotate(log, request.source));

  result.log = log;
  result.stages = std::move(c->stages);
  if (request.emit == Emit::llvm || request.emit == Emit::llvm_opt) {
    result.binary = std::move(result.stages.back().second);  // the last stage kept is the result
    result.stages.pop_back();
  } else if (request.emit == Emit::ptx) {
    result.binary = std::move(c->ptx.front());
  } else {
    const std::string ptx = c->ptx.size() == 1 ? std::move(c->ptx.front()) : merge_ptx(c->ptx);
    ptxas::Cubin cubin;
    timed(CompileStage::ptxas, [&] {
      cubin = ptxas::ptx_to_cubin(ptx, target, request.jobs, MOJO_CUDA_RELEASE, request.description);
      return true;
    });
    result.binary = std::move(cubin.binary);
    result.log += cubin.log;
    if (request.keep_stages) result.stages.emplace_back(Emit::ptx, ptx);
  }
  return result;
}

std::string LlvmCompiler::repro_command(const CompileRequest& request, std::string_view source_path) const {
  // clang's driver for the same front end and pipeline, then ptxas.
  const std::string stem(source_path.substr(0, source_path.rfind('.')));
  std::string cmd = fmt::format(
      "clang++-{} -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch={} -Xclang -target-feature -Xclang "
      "{} -fcuda-short-ptr -std=c++17 -O3 -ffp-contract=fast -S",
      LLVM_VERSION_MAJOR, request.target.sm_name(), kPtxFeature);
  switch (request.emit) {
    case Emit::llvm:
      return fmt::format("{} -emit-llvm -Xclang -disable-llvm-passes -o {}.ll {}", cmd, stem, source_path);
    case Emit::llvm_opt:
      return fmt::format("{} -emit-llvm -o {}.ll {}", cmd, stem, source_path);
    case Emit::ptx:
      return fmt::format("{} -o {}.ptx {}", cmd, stem, source_path);
    default:
      return fmt::format("{} -o {}.ptx {} && ptxas -arch={} -O3 -o {}.cubin {}.ptx", cmd, stem, source_path,
                         request.target.sm_name(), stem, stem);
  }
}

}  // namespace mojo

// The plugin's entry point (libmojo_jit_llvm.so, loaded by compiler/on_demand.cpp).
extern "C" __attribute__((visibility("default"))) mojo::Compiler* mojo_jit_make_compiler() {
  return new mojo::LlvmCompiler();
}
