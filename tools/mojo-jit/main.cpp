// mojo-jit: inspect, compile and cache kernel specializations. Needs no GPU.
//
//   mojo-jit --emit=ptx rms_norm --dtype bf16 --shape x=4096x4096 --arch sm_90
//   mojo-jit --emit=cubin rms_norm --dtype f16 --shape x=8x5120 -o k.cubin
//   mojo-jit describe rms_norm --dtype bf16 --shape x=4096x4096
//   mojo-jit run rms_norm --dtype bf16 --shape x=17x896 --device cpu
//   mojo-jit list
//   mojo-jit prewarm --manifest cache/qwen3-8b.toml --arch sm_80,sm_90 -j 8
//   mojo-jit cache path|stats|ls|verify|prune|clear [--json]
//   mojo-jit cache explain rms_norm --dtype bf16 --shape x=4096x4096
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include "inspect.hpp"
#include "mojo/check.hpp"
#include "mojo/mojo.hpp"

namespace {

constexpr const char* kUsage = R"(mojo-jit: JIT kernel compiler for LLM operators

usage:
  mojo-jit [--emit=ptx|cubin|sass|llvm|llvm-opt|host] [--compiler=nvrtc|llvm] OP --dtype DT --shape NAME=DIMS... [options]
  mojo-jit describe OP --dtype DT --shape NAME=DIMS... [--sms N] [--json]
  mojo-jit run OP --dtype DT --shape NAME=DIMS... [--param N=V] [--device cpu|cuda] [--arch A] [--seed N]
               [--offset NAME=N] [--pad NAME=N] [--in-place OUTPUT=INPUT]
  mojo-jit list
  mojo-jit prewarm --manifest FILE|--ops all|OP,.. [--arch sm_80,sm_90] [-j N] [--cache-dir DIR]
  mojo-jit compile-all --manifest FILE|--ops all|OP,.. [--arch sm_90] [--compiler llvm] [-j N] [-o FILE]
  mojo-jit cache path|stats|ls|verify|prune|clear [--json] [--cache-dir DIR]
  mojo-jit cache explain OP --dtype DT --shape NAME=DIMS... [options]

Run 'mojo-jit <command> --help' for the options of a command.
)";

// An option given an empty value ("--arch ''", "--cache-dir=") is an error naming it, never the default.
// "--name=" is caught before CLI11 sees it, which would take the next argument as its value.
void reject_empty_assignments(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--") && arg.size() > 3 && arg.back() == '=')
      throw mojo::InvalidArgumentError(fmt::format("{}: empty value", arg.substr(0, arg.size() - 1)));
  }
}
void reject_empty_values(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_type_size() == 0) continue;  // not given, or a flag
    for (const std::string& value : opt->results())
      if (value.empty()) throw mojo::InvalidArgumentError(fmt::format("{}: empty value", opt->get_name()));
  }
}
// Parses a command line: --help prints the help (exit 0); any other parse error, and an empty value, is one
// line "mojo-jit: error: ..." and exit 1 (main's handler), like every other bad input.
#define MOJO_CLI_PARSE(app, argc, argv)                   \
  try {                                                   \
    reject_empty_assignments((argc), (argv));             \
    (app).parse((argc), (argv));                          \
  } catch (const CLI::CallForHelp& e) {                   \
    return (app).exit(e);                                 \
  } catch (const CLI::CallForAllHelp& e) {                \
    return (app).exit(e);                                 \
  } catch (const CLI::ParseError& e) {                    \
    throw mojo::InvalidArgumentError(e.what());           \
  }                                                       \
  reject_empty_values(app)

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
    app.add_option("--compiler", compiler, "nvrtc or llvm (default: $MOJO_JIT_COMPILER or nvrtc)");
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

  mojo::Target target() const { return mojo::inspect::target_or_default(arch); }

  std::vector<mojo::Tensor> tensors(const mojo::OpDef& op) const {
    std::vector<std::string> storage;
    std::vector<mojo::Tensor> out;
    for (const mojo::TensorSpec& spec :
         op.specs_from_shapes(mojo::parse_dtype(dtype), mojo::parse_shapes(op, shapes), scalars(storage)))
      out.push_back({spec, 0});
    return out;
  }

  // Names live in `storage` (ScalarArg holds a string_view).
  std::vector<mojo::ScalarArg> scalars(std::vector<std::string>& storage) const {
    std::vector<mojo::ScalarArg> out;
    storage.reserve(params.size());
    for (const std::string& p : params) {
      auto [name, value] = mojo::parse_param(p);
      storage.push_back(std::move(name));
      out.push_back({storage.back(), mojo::Scalar(value)});
    }
    return out;
  }
};

// The index of `op`'s tensor `name`; `what` names the option in the error.
std::size_t tensor_index(const mojo::OpDef& op, std::string_view what, std::string_view name) {
  const auto args = op.tensor_args();
  for (std::size_t i = 0; i < args.size(); ++i)
    if (args[i].name == name) return i;
  std::vector<std::string_view> names;
  for (const mojo::TensorArgInfo& a : args) names.push_back(a.name);
  throw mojo::InvalidArgumentError(
      fmt::format("{}: {} has no tensor '{}'; its tensors: {}", what, op.name(), name, fmt::join(names, ", ")));
}

// run's --offset, --pad and --in-place, as NAME=VALUE: VALUE a count of elements >= 0, or (`names`) a tensor.
void place(const mojo::OpDef& op, std::vector<mojo::Placement>& placements, std::string_view option,
           const std::string& item, std::int64_t mojo::Placement::*field, bool names = false) {
  const auto eq = item.find('=');
  std::int64_t n = -1;
  std::size_t used = 0;
  try {
    if (eq != std::string::npos && !names) n = std::stoll(item.substr(eq + 1), &used);
  } catch (const std::exception&) {
  }
  if (eq == std::string::npos || eq == 0 || (!names && (n < 0 || used == 0 || used != item.size() - eq - 1)))
    throw mojo::InvalidArgumentError(fmt::format("bad {} '{}': expected {}", option, item,
                                                 names ? "OUTPUT=INPUT, e.g. out=x" : "NAME=N, N >= 0 elements"));
  const std::string what = fmt::format("{} {}", option, item);
  if (names) n = std::int64_t(tensor_index(op, what, item.substr(eq + 1)));
  placements[tensor_index(op, what, item.substr(0, eq))].*field = n;
}

// run: one launch on seeded random inputs, compared with the op's CPU reference.
int run_check(int argc, char** argv) {
  CLI::App app{"Launch one specialization on random inputs and compare it with the op's CPU reference; exits 1 on "
               "a mismatch",
               "mojo-jit run"};
  SpecOptions spec;
  std::string device;
  unsigned seed = 0;
  spec.add_to(app);
  app.add_option("--device", device,
                 "cuda (a GPU) or cpu (the emulator; --arch picks the GPU it emulates, sm_80 by default); default: "
                 "$MOJO_JIT_DEVICE, else cuda where there is a GPU, else cpu");
  app.add_option("--seed", seed, "seed of the random inputs")->capture_default_str();
  std::vector<std::string> offsets, pads, in_place;
  app.add_option("--offset", offsets,
                 "NAME=N: place tensor NAME N elements past an aligned start (a slice's misaligned view)");
  app.add_option("--pad", pads,
                 "NAME=N: grow tensor NAME's stride in dim 0 by N elements (a slice of a wider tensor); the gaps are "
                 "guarded and a write into them fails the run");
  app.add_option("--in-place", in_place,
                 "OUTPUT=INPUT: write OUTPUT over INPUT's memory (e.g. out=x); the op runs it if it declares it, else "
                 "refuses");
  bool graph = false;
  app.add_flag("--graph", graph,
               "make the checked launch the first, inside a CUDA graph capture (the kernel's load and workspace "
               "too), then replay the graph");
  app.footer("example: mojo-jit run gemm --dtype bf16 --shape a=100x72 --shape b=72x136 --device cpu --arch sm_90a "
             "--param path=90");
  MOJO_CLI_PARSE(app, argc, argv);

  mojo::RuntimeOptions o = spec.runtime_options();
  if (device.empty()) device = mojo::environment::device().value_or("");
  if (device.empty()) device = mojo::device_available() ? "cuda" : "cpu";
  if (device.starts_with("cpu") && !spec.arch.empty()) {
    if (device != "cpu")
      throw mojo::InvalidArgumentError(fmt::format("--device {} and --arch {} both name the target; give one", device,
                                                   spec.arch));
    device += ":" + spec.arch;
  }
  o.device = device;
  mojo::Runtime rt(o);
  if (!rt.device().is_cpu() && !spec.arch.empty() && !(mojo::Target::parse(spec.arch) == rt.device().target()))
    throw mojo::InvalidArgumentError(fmt::format("--arch {}: the GPU is {}; --arch picks the target of --device cpu",
                                                 spec.arch, rt.device().target().sm_name()));
  const mojo::OpDef& op = mojo::find_op(spec.op);
  std::vector<mojo::TensorSpec> specs;
  for (const mojo::Tensor& t : spec.tensors(op)) specs.push_back(t.spec);
  std::vector<std::string> names;
  const auto scalars = spec.scalars(names);
  std::vector<mojo::Placement> placements(specs.size());
  for (const std::string& item : offsets) place(op, placements, "--offset", item, &mojo::Placement::offset);
  for (const std::string& item : pads) place(op, placements, "--pad", item, &mojo::Placement::pad);
  for (const std::string& item : in_place)
    place(op, placements, "--in-place", item, &mojo::Placement::in_place_of, true);
  const mojo::CheckReport r = mojo::check_op(rt, spec.op, specs, scalars, seed,
                                             graph ? mojo::CheckLaunch::graph : mojo::CheckLaunch::direct, placements);
  fmt::print("{} on {}{}\n", r.kernel, rt.device().name(), graph ? ", its first launch captured in a graph" : "");
  for (const auto& out : r.outputs)
    fmt::print("  {:<12} {:<4} {:>9} elements: max abs err {:.3g}, max rel err {:.3g}; tolerance rtol {:g} + atol {:g} "
               "x max|ref|: {} outside -> {}\n",
               out.name, mojo::dtype_name(out.dtype), out.elements, out.max_abs, out.max_rel, out.tolerance.rtol,
               out.tolerance.atol, out.wrong, out.wrong == 0 ? "pass" : "FAIL");
  for (const std::string& name : r.overwritten) fmt::print("  {} written where the op must not write: FAIL\n", name);
  fmt::print("kernel time {:.3f} ms{}\n{}\n", r.kernel_ms, rt.device().is_cpu() ? " (emulated on the CPU)" : "",
             r.pass() ? "PASS" : "FAIL");
  return r.pass() ? 0 : 1;
}

void print_stats(const mojo::Runtime& rt) {
  mojo::CacheStats s = rt.stats();
  std::string dir = rt.cache_dir().empty() ? "(disk cache off)" : rt.cache_dir().string();
  fmt::print(stderr, "cache: {}: {} disk hits, {} remote hits, {} compiles ({:.1f} ms), {} bad entries\n", dir,
             s.disk_hits, s.remote_hits, s.compiles, s.compile_seconds * 1e3, s.bad_entries);
  if (s.compiles == 0) return;
  // Where the compiles' time went, the stages that took any (the first compile also loads the compiler).
  std::vector<std::string> stages;
  for (int i = 0; i < mojo::kCompileStages; ++i)
    if (s.compile_stage_seconds[i] > 0)
      stages.push_back(fmt::format("{} {:.1f}", mojo::compile_stage_name(mojo::CompileStage(i)),
                                   s.compile_stage_seconds[i] * 1e3));
  fmt::print(stderr, "compile ms: {}\n", fmt::join(stages, ", "));
}

int run_emit(int argc, char** argv) {
  CLI::App app{"Compile one specialization and print what the compiler made of it", "mojo-jit"};
  SpecOptions spec;
  std::string emit = "ptx", output;
  bool stats = false;
  app.add_option("--emit", emit,
                 "stage to stop at: llvm, llvm-opt (--compiler=llvm), ptx, cubin, sass (needs nvdisasm), host (the CPU "
                 "device's shared object)")
      ->capture_default_str();
  app.add_option("-o,--output", output, "write to FILE instead of stdout (required for cubin)");
  app.add_flag("--stats", stats, "print cache statistics to stderr");
  spec.add_to(app);
  app.footer("example: mojo-jit --emit=ptx rms_norm --dtype bf16 --shape x=4096x4096 --arch sm_90");
  MOJO_CLI_PARSE(app, argc, argv);

  const bool sass = emit == "sass";  // disassembly of the cubin, not a stage of its own
  std::string nvdisasm;
  if (sass && (nvdisasm = mojo::inspect::find_nvdisasm(MOJO_JIT_SETUP_VENV_BIN)).empty()) {
    fmt::print(stderr, "mojo-jit: error: --emit=sass needs nvdisasm (CUDA toolkit, or pip install "
                       "nvidia-cuda-nvdisasm; tools/setup.sh puts it in .venv/bin); none on PATH, in $CUDA_HOME/bin, "
                       "/usr/local/cuda/bin or .venv/bin\n");
    return 2;
  }
  mojo::Emit kind = sass ? mojo::Emit::cubin : mojo::parse_emit(emit);
  if ((kind == mojo::Emit::cubin || kind == mojo::Emit::host) && !sass && output.empty())
    throw mojo::InvalidArgumentError(fmt::format("--emit={} writes a binary: give -o FILE", emit));
  mojo::Runtime rt(spec.runtime_options());
  const mojo::OpDef& op = mojo::find_op(spec.op);
  std::vector<std::string> names;
  auto tensors = spec.tensors(op);
  auto scalars = spec.scalars(names);
  mojo::Artifact a = rt.compile(spec.op, tensors, scalars, spec.target(), kind);
  const std::string text = sass ? mojo::inspect::disassemble(nvdisasm, *a.binary) : std::string();
  const std::string& bytes = sass ? text : *a.binary;
  if (output.empty()) {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  } else {
    std::ofstream out(output, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) throw mojo::Error(fmt::format("cannot write {}", output));
  }
  if (kind == mojo::Emit::cubin && !sass) {
    // What ptxas -v would say, for each kernel of the op's plan; dynamic shared memory is the op's launch choice.
    const std::vector<mojo::Params> plan = op.plan(a.params);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const std::string& name = a.kernels[i];
      const mojo::KernelResources r = i == 0 ? a.resources : mojo::kernel_resources(*a.binary, name);
      fmt::print(stderr, "{}: {} registers, {} bytes static shared, {} bytes dynamic shared, {} bytes stack{}\n",
                 name, r.registers, r.static_shared_bytes, op.max_dynamic_smem(plan[i]), r.stack_bytes,
                 r.stack_bytes ? " (local memory: spills or arrays)" : "");
    }
  }
  if (stats) print_stats(rt);
  return 0;
}

void print_kernel(const nlohmann::json& k, const mojo::SmLimits* limits, int sms) {
  fmt::print("kernel:   {}\n", k["name"].get<std::string>());
  fmt::print("grid:     [{}, {}, {}]{}\nblock:    [{}, {}, {}]\nsmem:     {}\n", k["grid"][0].get<unsigned>(),
             k["grid"][1].get<unsigned>(), k["grid"][2].get<unsigned>(),
             k["persistent"].get<bool>()    ? " work units (persistent: at most one block per SM)"
             : k["cooperative"].get<bool>() ? " (cooperative: every block resident at once; they wait for each other)"
                                            : "",
             k["block"][0].get<unsigned>(), k["block"][1].get<unsigned>(), k["block"][2].get<unsigned>(),
             k["dynamic_smem"].get<unsigned>());
  if (!k.contains("registers")) return;
  fmt::print("regs:     {} a thread, {} bytes of stack, {} bytes of static smem (the cubin)\n", k["registers"].get<int>(),
             k["stack_bytes"].get<std::uint64_t>(), k["static_smem"].get<std::uint64_t>());
  const int per_sm = k["blocks_per_sm"].get<int>();
  const std::string limiter = k["limited_by"].get<std::string>();
  if (per_sm == 0) {
    fmt::print("occupancy: a block does not fit one SM of {} (too many {})\n", limits->gpu, limiter);
    return;
  }
  fmt::print("occupancy: {} block{} an SM (limited by {}), {:.0f}% of its warps\n", per_sm, per_sm == 1 ? "" : "s",
             limiter, 100 * k["warps_fraction"].get<double>());
  fmt::print("waves:    {:.2f} ({} blocks on {} SMs{}{})\n", k["waves"].get<double>(), k["blocks"].get<std::uint64_t>(),
             sms, sms == limits->sm_count ? ", " : "", sms == limits->sm_count ? limits->gpu : "");
  if (k.contains("resident") && !k["resident"].get<bool>())
    fmt::print("resident: NO: the cooperative grid needs {} blocks at once, the SMs hold {} (the launch would fail)\n",
               k["blocks"].get<std::uint64_t>(), std::uint64_t(per_sm) * std::uint64_t(sms));
  if (k.contains("tiles"))
    fmt::print("tiles:    {} over {} persistent blocks, the last wave of tiles {:.0f}% full\n",
               k["tiles"].get<std::uint64_t>(), k["blocks"].get<std::uint64_t>(), 100 * k["wave_fill"].get<double>());
  else
    fmt::print("fill:     the last wave {:.0f}% full\n", 100 * k["wave_fill"].get<double>());
  if (k.contains("balance"))
    fmt::print(
        "balance:  unequal {}: the SMs busy {:.1f}% of the time to the last one's end\n",
        k.contains("tiles") ? "tiles, taken by the persistent blocks in snake rounds" : "blocks, taken in launch order",
        100 * k["balance"].get<double>());
}

// describe and cache explain: one specialization, its params and the parts of its key.
int run_describe(int argc, char** argv, bool explain) {
  CLI::App app{explain ? "Print the parts of a specialization's key and which cache layers hold it"
                       : "Show the params, kernel name, key and launch geometry of one specialization",
               explain ? "mojo-jit cache explain" : "mojo-jit describe"};
  SpecOptions spec;
  std::string emit = "cubin";
  int sms = 0;
  bool json = false;
  app.add_option("--emit", emit, "stage whose key to show")->capture_default_str();
  if (!explain) {
    app.add_option("--sms", sms, "SMs the waves are counted on (default: the target's reference GPU's)")
        ->check(CLI::PositiveNumber);
    app.add_flag("--json", json, "machine-readable output: every field below, and the ideal bytes, FLOPs and time");
  }
  spec.add_to(app);
  MOJO_CLI_PARSE(app, argc, argv);

  mojo::Runtime rt(spec.runtime_options());
  const mojo::OpDef& op = mojo::find_op(spec.op);
  std::vector<std::string> names;
  auto tensors = spec.tensors(op);
  auto scalars = spec.scalars(names);
  mojo::Target target = spec.target();
  mojo::Emit kind = mojo::parse_emit(emit);
  const nlohmann::json d = mojo::inspect::describe(rt, op, tensors, scalars, target, kind, sms, !explain);
  const std::optional<mojo::SmLimits> limits =
      explain ? std::nullopt : std::optional<mojo::SmLimits>(mojo::sm_limits(target));
  if (!explain) sms = d["sms"].get<int>();
  if (json) {
    fmt::print("{}\n", d.dump(2));
    return 0;
  }

  fmt::print("op:       {}\n", op.name());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    fmt::print("tensor:   {} = {}\n", op.tensor_args()[i].name,
               tensors[i].spec.rank() == 0 ? std::string("absent") : tensors[i].spec.str());
  fmt::print("target:   {}\ncompiler: {}\nparams:   {}\n", d["target"].get<std::string>(),
             d["compiler"].get<std::string>(), d["params"].get<std::string>());
  const nlohmann::json& kernels = d["kernels"];
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    if (kernels.size() > 1) fmt::print("step {}:   {{{}}}\n", i, kernels[i]["params"].get<std::string>());
    print_kernel(kernels[i], limits ? &*limits : nullptr, sms);
  }
  fmt::print("workspace: {} bytes\n", d["workspace_bytes"].get<std::size_t>());
  if (const std::size_t words = d["sync_words"].get<std::size_t>(); words > 0)
    fmt::print("sync words: {} (zero between launches: the cooperative kernels leave them so)\n", words);
  // A plan run once per slice (the fused cross-entropy's vocabulary slices): the grids above are the first run's.
  if (const std::int64_t runs = d["runs"].get<std::int64_t>(); runs > 1)
    fmt::print("runs:     {} (the plan run again per slice or phase; the grids above are the first run's)\n", runs);
  if (!explain) {
    const nlohmann::json& ideal = d["ideal"];
    fmt::print("ideal:    {:.3f} MB, {:.3f} GFLOP: {:.2f} us at {:.0f} GB/s and {:.0f} TFLOP/s ({}-bound on {})\n",
               ideal["bytes"].get<double>() * 1e-6, ideal["flops"].get<double>() * 1e-9,
               ideal["roofline_us"].get<double>(), ideal["copy_gb_per_s"].get<double>(),
               ideal["peak_tflops"].get<double>(), ideal["bound"].get<std::string>(), limits->gpu);
    fmt::print("key:      {} ({})\n", d["key"].get<std::string>(), emit);
    return 0;
  }
  // explain: what went into the key, and which layers hold it.
  const auto parts = rt.key_parts(spec.op, tensors, scalars, target, kind);
  fmt::print("source:   {} bytes, {} (the translation unit: template + prelude + instantiation)\n",
             parts.source.size(), mojo::compute_key(mojo::KeyInputs{parts.source, "", "", "", "", kind}).hex());
  fmt::print("emit:     {}\nformat:   v{}\n", emit, mojo::kCacheFormatVersion);
  fmt::print("key:      {} ({})\n", parts.key.hex(), emit);
  auto show = [&](const std::filesystem::path& dir, const char* layer) {
    mojo::DiskCache cache(dir);
    std::string problem;
    bool hit = cache.load(parts.key, kind, &problem, /*remove_bad=*/false).has_value();
    fmt::print("{:<9} {}: {}\n", layer, cache.entry_path(parts.key, kind).string(),
               hit ? "present" : problem.empty() ? "absent" : "bad (" + problem + ")");
  };
  if (!rt.cache_dir().empty()) show(rt.cache_dir(), "cache:");
  for (const std::filesystem::path& dir : mojo::environment::readonly_cache_dirs()) show(dir, "readonly:");
  return 0;
}

int run_list(int argc, char** argv) {
  CLI::App app{"List the operators with their tensors, scalars and dtypes", "mojo-jit list"};
  MOJO_CLI_PARSE(app, argc, argv);
  for (const mojo::OpDef* op : mojo::all_ops()) {
    fmt::print("{}\n  {}\n", op->name(), op->summary());
    for (const auto& t : op->tensor_args()) fmt::print("  tensor {:<8} {:<6} {}\n", t.name, t.role, t.doc);
    for (const auto& s : op->scalar_args()) fmt::print("  scalar {:<8} {:<6} {} (default {})\n", s.name, "", s.doc, s.default_value);
    std::vector<std::string_view> dtypes;
    for (mojo::DType d : op->dtypes()) dtypes.push_back(mojo::dtype_name(d));
    fmt::print("  dtypes {}\n  template {}\n", fmt::join(dtypes, ", "), op->template_file());
    fmt::print("  example mojo-jit --emit=ptx {} --dtype {} {}\n", op->name(), dtypes.back(),
               mojo::shapes_as_options(op->example_shapes()));
  }
  return 0;
}

std::vector<mojo::Target> parse_targets(const std::string& list) {
  std::vector<mojo::Target> out;
  std::stringstream ss(list);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(mojo::Target::parse(t));
  return out;
}

// Options shared by prewarm and compile-all: a manifest compiled for targets.
struct ManifestOptions {
  std::string manifest_path, ops, arch, compiler, cache_dir, emit = "cubin";
  int jobs = 0;

  void add_to(CLI::App& app, const char* jobs_help) {
    auto* manifest = app.add_option("--manifest", manifest_path, "TOML manifest (e.g. cache/qwen3-8b.toml)");
    auto* op_list = app.add_option("--ops", ops, "instead of a manifest: 'all' or comma-separated ops, every dtype at "
                                                 "the example shapes `mojo-jit list` shows");
    manifest->excludes(op_list);
    op_list->excludes(manifest);
    app.add_option("--arch", arch, "comma-separated targets, e.g. sm_80,sm_90 (default: the manifest's)");
    app.add_option("-j,--jobs", jobs, jobs_help);
    app.add_option("--compiler", compiler, "nvrtc or llvm (default: $MOJO_JIT_COMPILER or nvrtc)");
    app.add_option("--cache-dir", cache_dir, "cache directory (default: $MOJO_JIT_CACHE_DIR, ~/.cache/mojo-jit)");
    app.add_option("--emit", emit, "stage: cubin (what launches load) or ptx")->capture_default_str();
  }
  // The items to compile, from --manifest or --ops, for --arch (else the
  // manifest's targets; --ops defaults to sm_90).
  mojo::Manifest manifest() const {
    if (!manifest_path.empty()) return mojo::Manifest::load(manifest_path);
    if (ops.empty()) throw mojo::InvalidArgumentError("give --manifest FILE or --ops all|OP,OP,...");
    std::vector<std::string> names;
    std::stringstream ss(ops);
    for (std::string name; std::getline(ss, name, ',');) names.push_back(name);
    return mojo::inspect::examples_manifest(names);
  }
  mojo::RuntimeOptions runtime_options() const {
    mojo::RuntimeOptions o;
    o.compiler = compiler;
    o.cache_dir = cache_dir;
    return o;
  }
};

int run_prewarm(int argc, char** argv) {
  CLI::App app{"Compile every specialization a manifest lists into the cache (no GPU needed)", "mojo-jit prewarm"};
  ManifestOptions opt;
  opt.add_to(app, "parallel compiles (default: one per core)");
  MOJO_CLI_PARSE(app, argc, argv);

  mojo::Manifest manifest = opt.manifest();
  std::vector<mojo::PrewarmItem> items = manifest.items(parse_targets(opt.arch));
  mojo::Runtime rt(opt.runtime_options());
  if (rt.cache_dir().empty()) throw mojo::Error("prewarm needs a usable disk cache directory");
  const bool tty = ::isatty(STDERR_FILENO);
  auto progress = [&](std::size_t done, std::size_t total, const mojo::PrewarmItem& item, bool ok) {
    if (tty) {
      int filled = int(30 * done / total);
      fmt::print(stderr, "\r[{}{}] {}/{} {:<60.60}", std::string(std::size_t(filled), '#'),
                 std::string(std::size_t(30 - filled), '.'), done, total, item.label);
      if (done == total) fmt::print(stderr, "\n");
    } else if (!ok || done == total || done % std::max<std::size_t>(1, total / 10) == 0) {
      fmt::print(stderr, "prewarm: {}/{} {}{}\n", done, total, item.label, ok ? "" : " FAILED");
    }
  };
  mojo::PrewarmResult r = rt.prewarm(items, mojo::parse_emit(opt.emit), opt.jobs, progress);
  for (const std::string& f : r.failures) fmt::print(stderr, "prewarm: failed: {}\n", f);
  fmt::print("prewarm {}: {} specializations: {} compiled, {} already cached, {} failed in {:.1f} s -> {}\n",
             manifest.name.empty() ? opt.manifest_path : manifest.name, items.size(), r.compiled, r.cached, r.failed,
             r.seconds, rt.cache_dir().string());
  return r.failed == 0 ? 0 : 1;
}

int run_compile_all(int argc, char** argv) {
  CLI::App app{"Compile every specialization of a manifest into one module per target (a bundle)", "mojo-jit compile-all"};
  ManifestOptions opt;
  std::string output;
  opt.add_to(app, "back-end threads with --compiler=llvm (default: one per core)");
  app.add_option("-o,--output", output, "also write the module to FILE (one target only)");
  MOJO_CLI_PARSE(app, argc, argv);

  std::vector<mojo::PrewarmItem> items = opt.manifest().items(parse_targets(opt.arch));
  mojo::Runtime rt(opt.runtime_options());
  auto start = std::chrono::steady_clock::now();
  std::vector<mojo::Bundle> bundles = rt.compile_all(items, mojo::parse_emit(opt.emit), opt.jobs);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const mojo::Bundle& b : bundles)
    fmt::print("{} {}: {} kernels in one module, {} bytes, {} ({})\n", b.target.sm_name(), mojo::emit_name(b.emit),
               b.kernels.size(), b.binary->size(), b.compiled ? "compiled" : "from the cache", b.key.hex());
  fmt::print("compile-all: {} bundles in {:.2f} s with {}\n", bundles.size(), seconds, rt.compiler().identity());
  if (!output.empty()) {
    if (bundles.size() != 1) throw mojo::InvalidArgumentError("-o needs exactly one target: give --arch sm_XX");
    std::ofstream out(output, std::ios::binary);
    out.write(bundles[0].binary->data(), std::streamsize(bundles[0].binary->size()));
    if (!out) throw mojo::Error(fmt::format("cannot write {}", output));
  }
  return 0;
}

int run_cache(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "explain") return run_describe(argc - 1, argv + 1, true);
  CLI::App app{"Inspect and maintain the on-disk kernel cache", "mojo-jit cache"};
  std::string action, cache_dir;
  bool json = false;
  std::uint64_t max_bytes = 0;
  std::string remote;
  app.add_option("action", action,
                 "path | stats | ls | verify | prune | clear | push | pull (to and from the remote tier) | explain OP ...")
      ->required()
      ->check(CLI::IsMember({"path", "stats", "ls", "list", "verify", "prune", "clear", "push", "pull"}));
  app.add_option("--remote", remote, "push, pull: the remote tier, redis://HOST:PORT[/DB] (default: $MOJO_JIT_REMOTE)");
  app.add_option("--cache-dir", cache_dir, "cache directory (default: $MOJO_JIT_CACHE_DIR, ~/.cache/mojo-jit)");
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--max-bytes", max_bytes, "prune: the size to prune down to (default: $MOJO_JIT_CACHE_MAX_BYTES or 1 GiB)");
  MOJO_CLI_PARSE(app, argc, argv);

  const mojo::inspect::CacheReport report = mojo::inspect::cache_action(action, cache_dir, max_bytes, remote);
  fmt::print("{}\n", json ? report.json.dump(2) : report.text);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  try {
    mojo::environment::check_log();  // a bad MOJO_JIT_LOG is one error line, like any other bad input
    std::string_view command = argv[1];
    if (command == "list") return run_list(argc - 1, argv + 1);
    if (command == "describe") return run_describe(argc - 1, argv + 1, false);
    if (command == "run") return run_check(argc - 1, argv + 1);
    if (command == "prewarm") return run_prewarm(argc - 1, argv + 1);
    if (command == "compile-all") return run_compile_all(argc - 1, argv + 1);
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
