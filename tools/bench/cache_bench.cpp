// The disk cache's table (no GPU needed): a hit, `cache verify` of many
// entries, and processes racing to prewarm one directory.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "bench.hpp"
#include "cache/entry.hpp"

namespace bench {

namespace {

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng());
  return s;
}

// One prewarm of `manifest` by each of `processes` mojo-jit processes at once.
// Returns {wall seconds, total compiled (from their summaries)}.
std::pair<double, int> race_prewarm(const std::filesystem::path& cli, const std::filesystem::path& manifest,
                                    const std::filesystem::path& dir, int processes) {
  std::filesystem::remove_all(dir);
  std::string cmd = "(";
  for (int p = 0; p < processes; ++p)
    cmd += fmt::format("{} prewarm --manifest {} -j 1 --cache-dir {} 2>/dev/null & ", cli.string(), manifest.string(),
                       dir.string());
  cmd += "wait)";
  auto t = Clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  int compiled = 0;
  char line[512];
  while (pipe && std::fgets(line, sizeof line, pipe)) {
    int c = 0;
    if (const char* at = std::strstr(line, "specializations: "); at && std::sscanf(at, "specializations: %d compiled", &c) == 1)
      compiled += c;
  }
  if (pipe) pclose(pipe);
  return {ms_since(t) / 1e3, compiled};
}

}  // namespace

void bench_cache(const Options& options) {
  const bool quick = options.quick;
  const std::filesystem::path self_dir = options.self.parent_path();
  auto dir = fresh_dir("cache");
  fmt::print("\n## Cache (CPU only)\n\n| what | result |\n|---|---:|\n");

  // A disk hit: header check, checksum and read of a 100 KB entry.
  {
    mojo::DiskCache cache(dir / "hit");
    const std::string payload = random_bytes(100 * 1024, 1);
    const mojo::KernelKey key = mojo::compute_key(mojo::KeyInputs{"hit", "k", "", "sm_90", "", mojo::Emit::cubin});
    cache.store(key, mojo::Emit::cubin, "op=bench\n", payload);
    std::vector<double> us;
    for (int i = 0; i < (options.smoke ? 200 : 2000); ++i) {
      auto t = Clock::now();
      auto got = cache.load(key, mojo::Emit::cubin);
      us.push_back(ms_since(t) * 1e3);
      if (!got || got->size() != payload.size()) throw mojo::Error("bench: disk hit returned the wrong bytes");
    }
    std::sort(us.begin(), us.end());
    fmt::print("| disk hit of a 100 KB entry (read + verify), median of {} | {:.1f} µs |\n", us.size(),
               us[us.size() / 2]);
  }

  // verify of 10,000 entries of 8 KB.
  {
    const int n = options.smoke ? 200 : quick ? 2000 : 10000;
    mojo::DiskCache cache(dir / "verify");
    const std::string payload = random_bytes(8 * 1024, 2);
    for (int i = 0; i < n; ++i) {
      mojo::KernelKey key = mojo::compute_key(mojo::KeyInputs{"verify", fmt::format("k{}", i), "", "sm_90", "", mojo::Emit::cubin});
      std::filesystem::path path = cache.entry_path(key, mojo::Emit::cubin);
      std::filesystem::create_directories(path.parent_path());
      mojo::entry::Header h = mojo::entry::make_header(key, mojo::Emit::cubin, "", payload);
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(&h), sizeof h);
      out << payload;
    }
    ::sync();
    std::vector<std::string> problems;
    auto t = Clock::now();
    std::size_t good = cache.verify(&problems, false);
    double s = ms_since(t) / 1e3;
    if (good != std::size_t(n) || !problems.empty()) throw mojo::Error("bench: verify disagreed");
    fmt::print("| `cache verify` of {} entries of 8 KB (warm page cache) | {:.2f} s |\n", n, s);
  }

  // Processes racing cold on one directory vs one process alone.
  {
    const int specs = options.smoke ? 2 : quick ? 12 : 50, processes = options.smoke ? 2 : 8;
    std::filesystem::path manifest = dir / "race.toml";
    std::string hidden;
    for (int k = 1; k <= specs; ++k) hidden += fmt::format("{}{{ x = [1, {}] }}", k > 1 ? ", " : "", 64 * k);
    std::ofstream(manifest) << fmt::format("targets = [\"sm_90\"]\n[[kernel]]\nop = \"rms_norm\"\ndtypes = [\"f32\"]\n"
                                           "shapes = [{}]\n", hidden);
    const std::filesystem::path cli = self_dir / "mojo-jit";
    if (!std::filesystem::exists(cli)) throw mojo::Error(fmt::format("bench: no {} (the race runs the CLI)", cli.string()));
    auto [alone_s, alone_compiled] = race_prewarm(cli, manifest, dir / "alone", 1);
    auto [race_s, race_compiled] = race_prewarm(cli, manifest, dir / "race", processes);
    std::vector<std::string> problems;
    std::size_t entries = mojo::DiskCache(dir / "race").list(&problems).size();
    fmt::print("| one process prewarming {} specializations | {:.2f} s ({} compiled) |\n", specs, alone_s, alone_compiled);
    fmt::print("| {} processes racing cold on the same {} | {:.2f} s = {:.2f}x ({} compiled, {} entries, {} corrupt) |\n",
               processes, specs, race_s, race_s / alone_s, race_compiled, entries, problems.size());
    if (alone_compiled != specs || entries != std::size_t(specs) || !problems.empty() || race_compiled < specs)
      fail(fmt::format("cache: prewarm of {} specializations: {} compiled alone, {} racing, {} entries, {} corrupt",
                       specs, alone_compiled, race_compiled, entries, problems.size()));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace bench
