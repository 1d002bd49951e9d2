#include "compiler/clang_front_end.hpp"

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/FrontendActions.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Serialization/ASTWriter.h>
#include <clang/Serialization/PCHContainerOperations.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "compiler/identity.hpp"

namespace mojo::clang_front_end {
namespace {

// The precompiled prelude and the text it was built from, as files of every compile that reads it (clang
// checks that the header it was built from is still there, the same).
constexpr const char* kPreludeFile = "/mojo/mojo_prelude.cuh";
constexpr const char* kPchFile = "/mojo/mojo_prelude.pch";

// The front end's options; only the in-memory files are read: no system or CUDA SDK headers. The
// precompiled header and the compiles that read it must agree on every one.
std::vector<const char*> options(const std::string& cpu) {
  return {"-triple",
          kNvptxTriple,
          "-aux-triple",
          "x86_64-unknown-linux-gnu",
          "-fcuda-is-device",
          "-fcuda-short-ptr",  // 32-bit shared, constant and local pointers: the back end's too (llvm_compiler.cpp)
          "-target-cpu",
          cpu.c_str(),
          "-target-feature",
          compiler_identity::kLlvmPtxFeature,
          "-x",
          "cuda",
          "-std=c++17",
          "-O3",
          "-disable-llvm-passes",
          "-ffp-contract=fast",
          "-nostdsysteminc",
          "-nobuiltininc"};
}

// Runs `action` on `main_file` of `files`; clang's diagnostics to `log`.
bool run(clang::FrontendAction& action, std::vector<const char*> args, const char* main_file,
         llvm::IntrusiveRefCntPtr<llvm::vfs::InMemoryFileSystem> files, std::string* log) {
  llvm::raw_string_ostream diag_stream(*log);
  auto diag_options = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
  diag_options->ShowColors = false;
  auto* printer = new clang::TextDiagnosticPrinter(diag_stream, diag_options.get());
  clang::DiagnosticsEngine diags(llvm::makeIntrusiveRefCnt<clang::DiagnosticIDs>(), diag_options, printer);
  args.push_back(main_file);
  auto invocation = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(*invocation, args, diags)) return false;
  clang::CompilerInstance ci;
  ci.setInvocation(invocation);
  ci.createDiagnostics(new clang::TextDiagnosticPrinter(diag_stream, &ci.getDiagnosticOpts()), true);
  ci.setVerboseOutputStream(diag_stream);  // "N errors generated." goes to the log, not stderr
  ci.createFileManager(files);
  ci.createSourceManager(ci.getFileManager());
  return ci.ExecuteAction(action);
}

// GeneratePCHAction, into memory: the PCH's bytes in `buffer`, no file and no container around them (the
// reader's default container is the raw bytes).
class InMemoryPchAction : public clang::GeneratePCHAction {
 public:
  explicit InMemoryPchAction(std::shared_ptr<clang::PCHBuffer> buffer) : buffer_(std::move(buffer)) {}

 protected:
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& ci, llvm::StringRef) override {
    return std::make_unique<clang::PCHGenerator>(ci.getPreprocessor(), ci.getModuleCache(), kPchFile, "", buffer_,
                                                 llvm::ArrayRef<std::shared_ptr<clang::ModuleFileExtension>>{},
                                                 /*AllowASTWithErrors=*/false, /*IncludeTimestamps=*/false);
  }

 private:
  std::shared_ptr<clang::PCHBuffer> buffer_;
};

// The prelude `text` for `cpu` as a precompiled header; null if clang could not build one.
std::shared_ptr<const std::string> precompile(const std::string& cpu, std::string_view text) {
  auto files = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  files->addFile(kPreludeFile, 0, llvm::MemoryBuffer::getMemBufferCopy(text, kPreludeFile));
  auto buffer = std::make_shared<clang::PCHBuffer>();
  InMemoryPchAction action(buffer);
  std::string log;  // unread: without a PCH the compile parses the prelude itself and reports its errors
  if (!run(action, options(cpu), kPreludeFile, files, &log) || !buffer->IsComplete) return nullptr;
  return std::make_shared<const std::string>(buffer->Data.begin(), buffer->Data.end());
}

// The precompiled preludes of this process, by GPU and prelude text (a template path may change the text).
class Preludes {
 public:
  // The PCH of `text` for `cpu`, or null: the second use builds it, so that a process that compiles once
  // does not pay for it; uses while it is being built go without, and so do all if building it failed.
  // Built with no lock held: a fatal LLVM error jumps out of the compile (llvm_compiler.cpp) without
  // unwinding, and must not leave the lock taken.
  std::shared_ptr<const std::string> get(const std::string& cpu, std::string_view text) {
    {
      std::lock_guard lock(mutex_);
      Entry& e = entries_[{cpu, std::string(text)}];
      if (++e.uses != 2) return e.pch;
    }
    std::shared_ptr<const std::string> pch = precompile(cpu, text);
    std::lock_guard lock(mutex_);
    return entries_[{cpu, std::string(text)}].pch = std::move(pch);
  }

 private:
  struct Entry {
    int uses = 0;
    std::shared_ptr<const std::string> pch;
  };
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Entry, std::less<>> entries_;
};

Preludes& preludes() {
  static Preludes* p = new Preludes;  // never destroyed: compiles may run on other threads at exit
  return *p;
}

bool is_comment_or_line(std::string_view line) {
  const std::size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return true;
  line.remove_prefix(first);
  return line.starts_with("//") || line.starts_with("#line ");
}

// `source` cut where its prelude can come from a precompiled header: the prelude's block (from its first
// #line to the #line that returns to the template's own text: the rest of a header that includes the
// prelude first, such as mojo_mma.cuh, comes with it), and the source without it. Empty when the source
// has no such block or has anything but comments before it (which the prelude might depend on).
struct PreludeSplit {
  std::string_view prelude;
  std::string rest;
};
PreludeSplit split_prelude(std::string_view source) {
  constexpr std::string_view kStart = "#line 1 \"mojo_prelude.cuh\"\n", kLine = "#line 1 \"";
  if (!source.starts_with(kLine)) return {};
  const std::size_t name_end = source.find('"', kLine.size());
  if (name_end == std::string_view::npos) return {};
  const std::string_view outer = source.substr(kLine.size(), name_end - kLine.size());  // the including file
  const std::size_t start = source.find(kStart);
  if (start == std::string_view::npos || (start > 0 && source[start - 1] != '\n')) return {};
  for (std::size_t at = 0; at < start;) {  // nothing but comments before it
    const std::size_t eol = source.find('\n', at);
    if (!is_comment_or_line(source.substr(at, eol - at))) return {};
    at = eol + 1;
  }
  // Its end: the first line "#line N \"outer\"" after it.
  for (std::size_t at = start + kStart.size(); at < source.size();) {
    const std::size_t eol = std::min(source.find('\n', at), source.size());
    const std::string_view line = source.substr(at, eol - at);
    if (line.starts_with("#line ") && line.ends_with(std::string("\"") + std::string(outer) + "\""))
      return {source.substr(start, at - start), std::string(source.substr(0, start)) + std::string(source.substr(at))};
    at = eol + 1;
  }
  return {};
}

}  // namespace

std::unique_ptr<llvm::Module> compile(std::string_view source, const std::string& file, const std::string& cpu,
                                      llvm::LLVMContext& context, std::string* log) {
  auto files = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  std::vector<const char*> args = options(cpu);
  const PreludeSplit split = split_prelude(source);
  const std::shared_ptr<const std::string> pch = split.prelude.empty() ? nullptr : preludes().get(cpu, split.prelude);
  if (pch) {
    files->addFile(kPreludeFile, 0, llvm::MemoryBuffer::getMemBufferCopy(split.prelude, kPreludeFile));
    files->addFile(kPchFile, 0, llvm::MemoryBuffer::getMemBuffer(*pch, kPchFile, false));
    files->addFile(file, 0, llvm::MemoryBuffer::getMemBufferCopy(split.rest, file));
    args.insert(args.end(), {"-include-pch", kPchFile});
  } else {
    files->addFile(file, 0, llvm::MemoryBuffer::getMemBufferCopy(source, file));
  }
  clang::EmitLLVMOnlyAction action(&context);
  if (!run(action, args, file.c_str(), files, log)) return nullptr;
  return action.takeModule();
}

}  // namespace mojo::clang_front_end
