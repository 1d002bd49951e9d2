// Autotuning (RuntimeOptions::autotune): the fastest of an op's candidate
// params for a shape bucket on one device, timed once and remembered in the
// cache as a tuning entry (EntryKind::tuning), so later processes and
// machines with the same device start tuned.
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "cache/kernel_cache.hpp"
#include "mojo/op.hpp"

namespace mojo::autotune {

// `what` names the op, the heuristic's params, the shape bucket, the device
// and the target: one record per distinct `what` and compiler. On a miss,
// `prepare` loads each candidate (compiling it if need be) before its timing
// and returns what launches it once on `stream`: 2 warm-ups, then 10 timed
// launches. Returns the winner, or candidates[0] (the heuristic's choice)
// where the record names none of them, the cache is offline, or `stream` is
// being captured into a graph (whose launches run later, and whose thread may
// not wait on an event): then only a record already made is used.
using Launcher = std::function<void()>;
const Params& fastest(KernelCache& cache, std::string_view what, std::string_view compiler,
                      std::span<const Params> candidates, StreamHandle stream,
                      const std::function<Launcher(const Params&)>& prepare);

}  // namespace mojo::autotune
