#include "runtime/autotune.hpp"

#include <fmt/format.h>

#include "core/log.hpp"
#include "mojo/device.hpp"
#include "mojo/error.hpp"

namespace mojo::autotune {

const Params& fastest(KernelCache& cache, std::string_view what, std::string_view compiler,
                      std::span<const Params> candidates, StreamHandle stream,
                      const std::function<Launcher(const Params&)>& prepare) {
  const KernelKey key = compute_key(KeyInputs{"autotune", what, "", "", compiler, EntryKind::tuning()});
  const std::string meta = fmt::format("autotune={}\n", what);
  const std::string description = fmt::format("autotune {}", what);
  // The record is the winner's params ("dtype=bf16 bm=128 ..."), not its index: a
  // candidate list that changes between builds can never pick the wrong one.
  const bool capturing = is_capturing(stream);
  auto time_all = [&] {
    if (capturing)
      throw CacheMissError(fmt::format("{}: not timed inside a graph capture; this process keeps the heuristic's "
                                       "choice (launch the shape once before capturing to tune it)",
                                       description));
    std::size_t best = 0;
    float best_ms = 0;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const Launcher launch = prepare(candidates[i]);  // outside the timing: a load may compile
      for (int warm = 0; warm < 2; ++warm) launch();
      Event start, stop;
      start.record(stream);
      for (int r = 0; r < 10; ++r) launch();
      stop.record(stream);
      stop.synchronize();
      const float ms = Event::elapsed_ms(start, stop);
      log::info(fmt::format("autotune {}: {{{}}} {:.1f} us", what, candidates[i].str(), ms * 100));
      if (i == 0 || ms < best_ms) best = i, best_ms = ms;
    }
    return candidates[best].str();
  };
  std::shared_ptr<const std::string> record;
  try {
    bool timed = false;
    record = cache.get(CacheRequest{key, EntryKind::tuning(), description, meta, ""}, time_all, &timed);
  } catch (const CacheMissError& e) {
    if (capturing) log::info(e.what());
    return candidates[0];  // offline or capturing: untuned shapes keep the heuristic's choice
  }
  for (const Params& p : candidates)
    if (p.str() == *record) return p;
  log::warn(
      fmt::format("autotune {}: the record names {{{}}}, no longer a candidate; using the heuristic's", what, *record));
  return candidates[0];
}

}  // namespace mojo::autotune
