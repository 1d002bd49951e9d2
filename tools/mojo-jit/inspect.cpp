#include "inspect.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

namespace mojo::inspect {
namespace {

// One kernel of a plan: its geometry and, from its cubin, what the performance model makes of it on `sms` SMs of
// the target's reference GPU.
nlohmann::json kernel_json(const OpDef& op, const Params& step, TensorList tensors, const SmLimits* limits, int sms,
                           const KernelResources* resources) {
  const LaunchGeometry g = op.geometry(step, tensors);
  nlohmann::json k = {{"name", op.kernel_name(step)},
                      {"params", step.str()},
                      {"grid", {g.grid.x, g.grid.y, g.grid.z}},
                      {"block", {g.block.x, g.block.y, g.block.z}},
                      {"dynamic_smem", g.dynamic_smem},
                      {"persistent", g.persistent},
                      {"cooperative", g.cooperative}};
  if (resources == nullptr) return k;
  const KernelResources& r = *resources;
  const unsigned threads = g.block.x * g.block.y * g.block.z;
  const std::uint64_t grid = std::uint64_t(g.grid.x) * g.grid.y * g.grid.z;
  // A persistent kernel's grid is clamped to one block per SM, each looping over tiles.
  const std::uint64_t blocks = g.persistent ? std::min<std::uint64_t>(grid, std::uint64_t(sms)) : grid;
  const Occupancy o = occupancy(*limits, threads, r.registers, r.static_shared_bytes + g.dynamic_smem, blocks, sms);
  k["registers"] = r.registers;
  k["stack_bytes"] = r.stack_bytes;
  k["static_smem"] = r.static_shared_bytes;
  k["blocks"] = blocks;
  k["blocks_per_sm"] = o.blocks_per_sm;
  k["limited_by"] = o.limited_by;
  k["warps_fraction"] = o.warps_fraction;
  k["waves"] = o.blocks_per_sm == 0 ? nlohmann::json(nullptr) : nlohmann::json(o.waves);
  // A cooperative grid must be resident at once: one wave at most, or the GPU refuses the launch.
  if (g.cooperative) k["resident"] = blocks <= std::uint64_t(o.blocks_per_sm) * std::uint64_t(sms);
  // How full the last wave is: of blocks on the SMs' slots, or of a persistent kernel's tiles on the SMs.
  if (g.persistent) k["tiles"] = grid;
  k["wave_fill"] = wave_fill(g.persistent ? grid : blocks, std::uint64_t(g.persistent ? 1 : o.blocks_per_sm) * sms);
  // Blocks that differ: how close the SMs come to ending together, given them in launch order (a persistent
  // grid's blocks taking them in rounds).
  if (const std::vector<double> work = op.block_work(step, tensors); !work.empty() && o.blocks_per_sm > 0)
    k["balance"] =
        g.persistent ? snake_balance(work, blocks) : in_order_balance(work, std::uint64_t(o.blocks_per_sm) * sms);
  return k;
}

// What the op's shapes need at the least, and the time that takes on the target's reference GPU.
nlohmann::json ideal_json(const IdealCost& cost, const Target& target, DType dtype, const SmLimits& limits) {
  const Roofline roof = roofline(target);
  const RooflineTime t = roofline_time(roof, cost, dtype);
  return {{"bytes", cost.bytes},
          {"flops", cost.flops},
          {"weight_bytes", cost.weight_bytes},
          {"roofline_us", t.seconds * 1e6},
          {"bound", t.compute_bound ? "compute" : "memory"},
          {"gpu", limits.gpu},
          {"copy_gb_per_s", roof.copy_bytes_per_s * 1e-9},
          {"peak_tflops",
           (dtype == DType::f16 || dtype == DType::bf16 ? roof.tensor_flops_per_s : roof.fp32_flops_per_s) * 1e-12},
          {"source", roof.source}};
}

}  // namespace

Target target_or_default(std::string_view arch) {
  if (!arch.empty()) return Target::parse(arch);
  if (device_available()) return Device::open().target();
  return Target::parse("sm_90");
}

Manifest examples_manifest(const std::vector<std::string>& ops) {
  std::vector<std::string> names;
  for (const std::string& name : ops)
    if (!name.empty() && name != "all") names.push_back(name);
  Manifest m = Manifest::examples(names);
  m.targets = {Target::parse("sm_90")};
  return m;
}

nlohmann::json describe(Runtime& rt, const OpDef& op, TensorList tensors, ScalarList scalars, const Target& target,
                        Emit key_emit, int sms, bool model) {
  const Params params = op.specialize(tensors, scalars, target);
  const Runtime::KeyParts parts = rt.key_parts(op.name(), tensors, scalars, target, key_emit);
  const std::vector<Params> plan = op.plan(params);
  std::optional<Artifact> cubin;
  std::optional<SmLimits> limits;
  if (model) {
    limits = sm_limits(target);
    if (sms == 0) sms = limits->sm_count;
    cubin = rt.compile(op.name(), tensors, scalars, target, Emit::cubin);
  }
  nlohmann::json d = {{"op", op.name()}, {"target", parts.target}, {"compiler", parts.compiler}, {"params", parts.params}};
  d["tensors"] = nlohmann::json::object();
  for (std::size_t i = 0; i < tensors.size(); ++i) d["tensors"][op.tensor_args()[i].name] = tensors[i].spec.str();
  d["kernels"] = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.size(); ++i) {
    std::optional<KernelResources> r;
    if (cubin) r = kernel_resources(*cubin->binary, cubin->kernels[i]);
    d["kernels"].push_back(kernel_json(op, plan[i], tensors, limits ? &*limits : nullptr, sms, r ? &*r : nullptr));
  }
  d["workspace_bytes"] = op.workspace_bytes(params, tensors);
  d["sync_words"] = op.sync_words(params, tensors);
  d["runs"] = op.repeats(params, tensors);
  if (model) {
    d["sms"] = sms;
    // The products' unit: tensor cores where any operand is 16-bit, else the CUDA cores.
    DType math = DType::f32;
    for (const Tensor& t : tensors)
      if (t.spec.dtype() == DType::f16 || t.spec.dtype() == DType::bf16) math = t.spec.dtype();
    d["ideal"] = ideal_json(op.ideal_cost(tensors, scalars), target, math, *limits);
  }
  d["key"] = parts.key.hex();
  return d;
}

CacheReport cache_action(const std::string& action, const std::filesystem::path& dir, std::uint64_t max_bytes,
                         std::string remote) {
  static constexpr const char* kActions[] = {"path", "stats", "ls", "list", "verify", "prune", "clear", "push", "pull"};
  if (std::find(std::begin(kActions), std::end(kActions), action) == std::end(kActions))
    throw InvalidArgumentError(fmt::format("cache: unknown action '{}'; expected one of {}", action,
                                           fmt::join(kActions, ", ")));
  DiskCache cache(dir.empty() ? DiskCache::default_dir() : dir);
  nlohmann::json j;
  j["dir"] = cache.dir().string();
  std::string text;
  if (action == "path") {
    text = cache.dir().string();
  } else if (action == "clear") {
    std::size_t n = cache.clear();
    j["removed_files"] = n;
    text = fmt::format("removed {} files from {}", n, cache.dir().string());
  } else if (action == "prune") {
    if (max_bytes == 0) max_bytes = environment::cache_max_bytes().value_or(std::uint64_t(1) << 30);
    std::size_t n = cache.prune(max_bytes);
    DiskUsage u = cache.usage();
    j["evicted"] = n;
    j["entries"] = u.entries;
    j["bytes"] = u.bytes;
    text = fmt::format("evicted {} least-recently-used entries; {} entries, {} bytes remain (cap {})", n, u.entries,
                       u.bytes, max_bytes);
  } else if (action == "push" || action == "pull") {
    if (remote.empty()) {
      remote = environment::remote_cache().value_or("");
      if (remote.empty()) throw InvalidArgumentError(fmt::format("cache {}: give --remote or MOJO_JIT_REMOTE", action));
    }
    const CacheSyncResult r = action == "push" ? push_to_remote(cache, remote) : pull_from_remote(cache, remote);
    const std::size_t copied = r.copied, skipped = r.skipped;
    j["copied"] = copied;
    j["skipped"] = skipped;
    text = fmt::format("{} {} entries {} {} ({} skipped: aliases into bundles, or not valid)",
                       action == "push" ? "pushed" : "pulled", copied, action == "push" ? "from" : "into",
                       cache.dir().string(), skipped);
  } else if (action == "verify") {
    std::vector<std::string> problems;
    std::size_t good = cache.verify(&problems, /*remove=*/true);
    j["good"] = good;
    j["bad"] = problems;
    text = fmt::format("{}: {} good entries, {} bad (removed)", cache.dir().string(), good, problems.size());
    for (const auto& p : problems) text += "\nbad: " + p;
  } else {  // stats, ls
    std::vector<std::string> problems;
    auto entries = cache.list(&problems);
    DiskUsage u = cache.usage();
    std::uint64_t bytes = 0;
    std::map<std::string, std::size_t> by_kind;
    for (const auto& e : entries) {
      bytes += e.payload_bytes;
      ++by_kind[std::string(e.kind.name())];
    }
    j["entries"] = entries.size();
    j["payload_bytes"] = bytes;
    j["file_bytes"] = u.bytes;
    j["stale_files"] = u.stale_files;
    j["by_kind"] = by_kind;
    j["bad"] = problems;
    if (action != "stats") {
      j["list"] = nlohmann::json::array();
      for (const auto& e : entries) {
        std::string meta = e.meta;
        j["list"].push_back({{"key", e.key.hex()}, {"kind", e.kind.name()}, {"bytes", e.payload_bytes},
                             {"path", e.path.string()}, {"meta", meta}});
        std::replace(meta.begin(), meta.end(), '\n', ' ');
        text += fmt::format("{} {:>5}{} {:>8} B  {}\n", e.key.hex(), e.kind.name(), e.alias ? " alias" : "",
                            e.payload_bytes, meta);
      }
    }
    std::vector<std::string> kinds;
    for (const auto& [k, n] : by_kind) kinds.push_back(fmt::format("{} {}", n, k));
    text += fmt::format("{}: {} entries ({}), {} bytes", cache.dir().string(), entries.size(),
                        kinds.empty() ? "none" : fmt::format("{}", fmt::join(kinds, ", ")), bytes);
    if (!problems.empty()) text += fmt::format(", {} bad", problems.size());
    if (u.stale_files) text += fmt::format(", {} temp/lock files", u.stale_files);
    for (const auto& p : problems) text += "\nbad: " + p;
  }
  return {std::move(j), std::move(text)};
}

std::string find_nvdisasm(const std::filesystem::path& venv_bin) {
  std::vector<std::filesystem::path> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string d; std::getline(ss, d, ':');) dirs.emplace_back(d);
  }
  if (const char* cuda = std::getenv("CUDA_HOME")) dirs.emplace_back(std::filesystem::path(cuda) / "bin");
  dirs.emplace_back("/usr/local/cuda/bin");
  dirs.push_back(venv_bin);
  for (const auto& d : dirs)
    if (::access((d / "nvdisasm").c_str(), X_OK) == 0) return (d / "nvdisasm").string();
  return {};
}

std::string disassemble(const std::string& nvdisasm, const std::string& cubin) {
  char name[] = "/tmp/mojo-jit-sass-XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd < 0) throw Error("cannot create a temp file for nvdisasm");
  bool ok = ::write(fd, cubin.data(), cubin.size()) == ssize_t(cubin.size());
  ::close(fd);
  std::string out;
  if (ok) {
    FILE* pipe = ::popen((nvdisasm + " -c -g " + name + " 2>&1").c_str(), "r");
    char buf[4096];
    while (pipe && std::fgets(buf, sizeof buf, pipe)) out += buf;
    ok = pipe && ::pclose(pipe) == 0;
  }
  ::unlink(name);
  if (!ok) throw Error("nvdisasm failed: " + out.substr(0, out.find('\n')));
  return out;
}

}  // namespace mojo::inspect
