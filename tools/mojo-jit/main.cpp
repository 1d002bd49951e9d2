// mojo-jit: inspect, compile and cache kernel specializations. Needs no GPU.
//
//   mojo-jit --emit=ptx rms_norm --dtype bf16 --shape x=4096x4096 --arch sm_90
//   mojo-jit --emit=cubin rms_norm --dtype f16 --shape x=8x5120 -o k.cubin
//   mojo-jit describe rms_norm --dtype bf16 --shape x=4096x4096
//   mojo-jit list
//   mojo-jit cache stats|list|clear|path
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "mojo/mojo.hpp"

namespace {

constexpr const char* kUsage = R"(mojo-jit: JIT kernel compiler for LLM operators

usage:
  mojo-jit [--emit=ptx|cubin|llvm|llvm-opt] OP --dtype DT --shape NAME=DIMS... [options]
  mojo-jit describe OP --dtype DT --shape NAME=DIMS... [options]
  mojo-jit list
  mojo-jit cache path|stats|list|clear [--cache-dir DIR]

Run 'mojo-jit <command> --help' for the options of a command.
)";

// Options shared by emit and describe: one specialization of one op.
struct SpecOptions {
  std::string op;
  std::string dtype = "f32";
  std::vector<std::string> shapes, params;
  std::string arch;
  std::string compiler;
  std::string cache_dir;
  bool no_cache = false;

  void add_to(CLI::App& app) {
    app.add_option("op", op, "operator name (see 'mojo-jit list')")->required();
    app.add_option("--dtype", dtype, "element type: f32, f16, bf16, ...")->capture_default_str();
    app.add_option("--shape", shapes, "NAME=DIMS, e.g. x=4096x4096; repeat once per tensor")->required();
    app.add_option("--param", params, "scalar NAME=VALUE, e.g. eps=1e-5");
    app.add_option("--arch", arch, "target: sm_80, sm_90, sm_90a, ... (default: this machine's GPU, else sm_90)");
    app.add_option("--compiler", compiler, "nvrtc (default: $MOJO_JIT_COMPILER or nvrtc)");
    app.add_option("--cache-dir", cache_dir, "cache directory (default: $MOJO_JIT_CACHE_DIR, ~/.cache/mojo-jit)");
    app.add_flag("--no-cache", no_cache, "do not read or write the disk cache");
  }

  mojo::RuntimeOptions runtime_options() const {
    mojo::RuntimeOptions o;
    o.compiler = compiler;
    o.cache_dir = cache_dir;
    o.disk_cache = !no_cache;
    return o;
  }

  mojo::Target target() const {
    if (!arch.empty()) return mojo::Target::parse(arch);
    if (mojo::device_available()) return mojo::Device::open().target();
    return mojo::Target::parse("sm_90");
  }

  std::vector<mojo::Tensor> tensors(const mojo::OpDef& op) const {
    std::map<std::string, std::vector<std::int64_t>, std::less<>> named;
    for (const std::string& s : shapes) {
      auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
        throw mojo::ShapeError(fmt::format("bad --shape '{}': expected NAME=DIMS, e.g. x=4096x4096", s));
      std::string name = s.substr(0, eq);
      auto args = op.tensor_args();
      if (std::none_of(args.begin(), args.end(), [&](const mojo::TensorArgInfo& a) { return a.name == name; })) {
        std::vector<std::string_view> names;
        for (const auto& a : args) names.push_back(a.name);
        throw mojo::ShapeError(fmt::format("{} has no tensor '{}'; its tensors: {}", op.name(), name, fmt::join(names, ", ")));
      }
      std::vector<std::int64_t> dims;
      std::stringstream in(s.substr(eq + 1));
      for (std::string dim; std::getline(in, dim, 'x');) {
        std::size_t used = 0;
        long long v = -1;
        try {
          v = std::stoll(dim, &used);
        } catch (const std::exception&) {
        }
        if (used != dim.size() || v < 0)
          throw mojo::ShapeError(fmt::format("bad --shape '{}': '{}' is not a dimension; expected e.g. x=4096x4096", s, dim));
        dims.push_back(v);
      }
      named[name] = dims;
    }
    std::vector<mojo::Tensor> out;
    for (const mojo::TensorSpec& spec : op.specs_from_shapes(mojo::parse_dtype(dtype), named)) out.push_back({spec, 0});
    return out;
  }

  // Names live in `storage` (ScalarArg holds a string_view).
  std::vector<mojo::ScalarArg> scalars(std::vector<std::string>& storage) const {
    std::vector<mojo::ScalarArg> out;
    storage.reserve(params.size());
    for (const std::string& p : params) {
      auto eq = p.find('=');
      double value = 0;
      std::size_t used = 0;
      try {
        if (eq != std::string::npos) value = std::stod(p.substr(eq + 1), &used);
      } catch (const std::exception&) {
      }
      if (eq == std::string::npos || eq == 0 || used == 0 || used != p.size() - eq - 1)
        throw mojo::InvalidArgumentError(fmt::format("bad --param '{}': expected NAME=NUMBER, e.g. eps=1e-5", p));
      storage.push_back(p.substr(0, eq));
      out.push_back({storage.back(), mojo::Scalar(value)});
    }
    return out;
  }
};

void print_stats(const mojo::Runtime& rt) {
  mojo::CacheStats s = rt.stats();
  std::string dir = rt.cache_dir().empty() ? "(disk cache off)" : rt.cache_dir().string();
  fmt::print(stderr, "cache: {}: {} disk hits, {} compiles ({:.1f} ms), {} bad entries\n", dir, s.disk_hits,
             s.compiles, s.compile_seconds * 1e3, s.bad_entries);
}

int run_emit(int argc, char** argv) {
  CLI::App app{"Compile one specialization and print what the compiler made of it", "mojo-jit"};
  SpecOptions spec;
  std::string emit = "ptx", output;
  bool stats = false;
  app.add_option("--emit", emit, "stage to stop at: ptx, cubin (llvm, llvm-opt need --compiler=llvm)")->capture_default_str();
  app.add_option("-o,--output", output, "write to FILE instead of stdout (required for cubin)");
  app.add_flag("--stats", stats, "print cache statistics to stderr");
  spec.add_to(app);
  app.footer("example: mojo-jit --emit=ptx rms_norm --dtype bf16 --shape x=4096x4096 --arch sm_90");
  CLI11_PARSE(app, argc, argv);

  mojo::Emit kind = mojo::parse_emit(emit);
  if (kind == mojo::Emit::cubin && output.empty())
    throw mojo::InvalidArgumentError("--emit=cubin writes a binary: give -o FILE");
  mojo::Runtime rt(spec.runtime_options());
  const mojo::OpDef& op = mojo::find_op(spec.op);
  std::vector<std::string> names;
  auto tensors = spec.tensors(op);
  auto scalars = spec.scalars(names);
  mojo::Artifact a = rt.compile(spec.op, tensors, scalars, spec.target(), kind);
  if (output.empty()) {
    std::fwrite(a.binary->data(), 1, a.binary->size(), stdout);
  } else {
    std::ofstream out(output, std::ios::binary);
    out.write(a.binary->data(), std::streamsize(a.binary->size()));
    out.close();
    if (!out) throw mojo::Error(fmt::format("cannot write {}", output));
  }
  if (stats) print_stats(rt);
  return 0;
}

int run_describe(int argc, char** argv) {
  CLI::App app{"Show the params, kernel name, key and launch geometry of one specialization", "mojo-jit describe"};
  SpecOptions spec;
  std::string emit = "cubin";
  app.add_option("--emit", emit, "stage whose key to show")->capture_default_str();
  spec.add_to(app);
  CLI11_PARSE(app, argc, argv);

  mojo::Runtime rt(spec.runtime_options());
  const mojo::OpDef& op = mojo::find_op(spec.op);
  std::vector<std::string> names;
  auto tensors = spec.tensors(op);
  auto scalars = spec.scalars(names);
  mojo::Target target = spec.target();
  mojo::Params params = op.specialize(tensors, scalars, target);
  mojo::LaunchGeometry g = op.geometry(params, tensors);
  fmt::print("op:       {}\n", op.name());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    fmt::print("tensor:   {} = {}\n", op.tensor_args()[i].name, tensors[i].spec.str());
  fmt::print("target:   {}\ncompiler: {}\nparams:   {}\nkernel:   {}\n", target.sm_name(), rt.compiler().identity(),
             params.str(), op.kernel_name(params));
  fmt::print("grid:     [{}, {}, {}]\nblock:    [{}, {}, {}]\nsmem:     {}\n", g.grid.x, g.grid.y, g.grid.z, g.block.x,
             g.block.y, g.block.z, g.dynamic_smem);
  fmt::print("key:      {} ({})\n", rt.key(spec.op, tensors, scalars, target, mojo::parse_emit(emit)).hex(), emit);
  return 0;
}

int run_list(int argc, char** argv) {
  CLI::App app{"List the operators with their tensors, scalars and dtypes", "mojo-jit list"};
  CLI11_PARSE(app, argc, argv);
  for (const mojo::OpDef* op : mojo::all_ops()) {
    fmt::print("{}\n  {}\n", op->name(), op->summary());
    for (const auto& t : op->tensor_args()) fmt::print("  tensor {:<8} {:<6} {}\n", t.name, t.role, t.doc);
    for (const auto& s : op->scalar_args()) fmt::print("  scalar {:<8} {:<6} {} (default {})\n", s.name, "", s.doc, s.default_value);
    std::vector<std::string_view> dtypes;
    for (mojo::DType d : op->dtypes()) dtypes.push_back(mojo::dtype_name(d));
    fmt::print("  dtypes {}\n  template {}\n", fmt::join(dtypes, ", "), op->template_file());
  }
  return 0;
}

int run_cache(int argc, char** argv) {
  CLI::App app{"Inspect or clear the on-disk kernel cache", "mojo-jit cache"};
  std::string action, cache_dir;
  app.add_option("action", action, "path | stats | list | clear")->required()->check(CLI::IsMember({"path", "stats", "list", "clear"}));
  app.add_option("--cache-dir", cache_dir, "cache directory (default: $MOJO_JIT_CACHE_DIR, ~/.cache/mojo-jit)");
  CLI11_PARSE(app, argc, argv);

  mojo::DiskCache cache(cache_dir.empty() ? mojo::DiskCache::default_dir() : std::filesystem::path(cache_dir));
  if (action == "path") {
    fmt::print("{}\n", cache.dir().string());
  } else if (action == "clear") {
    fmt::print("removed {} files from {}\n", cache.clear(), cache.dir().string());
  } else {
    std::vector<std::string> problems;
    auto entries = cache.list(&problems);
    std::uint64_t bytes = 0;
    for (const auto& e : entries) bytes += e.payload_bytes;
    if (action == "list")
      for (const auto& e : entries) {
        std::string meta = e.meta;
        std::replace(meta.begin(), meta.end(), '\n', ' ');
        fmt::print("{} {:>5} {:>8} B  {}\n", e.key.hex(), mojo::emit_name(e.kind), e.payload_bytes, meta);
      }
    fmt::print("{}: {} entries, {} bytes", cache.dir().string(), entries.size(), bytes);
    fmt::print("{}\n", problems.empty() ? "" : fmt::format(", {} bad", problems.size()));
    for (const auto& p : problems) fmt::print("bad: {}\n", p);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  try {
    std::string_view command = argv[1];
    if (command == "list") return run_list(argc - 1, argv + 1);
    if (command == "describe") return run_describe(argc - 1, argv + 1);
    if (command == "cache") return run_cache(argc - 1, argv + 1);
    return run_emit(argc, argv);
  } catch (const mojo::CompileError& e) {
    fmt::print(stderr, "mojo-jit: error: {}\n{}", e.what(), e.log());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mojo-jit: error: {}\n", e.what());
    return 1;
  }
}
