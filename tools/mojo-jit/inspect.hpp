// What mojo-jit shows of a specialization and of the disk cache, as JSON: `mojo-jit describe --json`,
// `mojo-jit cache ACTION --json` and the Python module's describe() and cache() are these functions, so the two
// front ends never disagree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mojo/mojo.hpp"

namespace mojo::inspect {

// The target `arch` names ("sm_90a"); empty: this machine's GPU's, else sm_90 (compiling needs no GPU).
Target target_or_default(std::string_view arch);

// Every dtype of `ops` ("all" or none: every op; empty names skipped) at their example shapes, for sm_90 unless the
// caller names targets: what `prewarm --ops` and `compile-all --ops` compile.
Manifest examples_manifest(const std::vector<std::string>& ops);

// One specialization: op, target, compiler, params, tensors, every kernel of the plan with its geometry, the
// workspace, the runs and the key of `key_emit`. With `model`, also each kernel's registers, stack and occupancy from
// its cubin (compiled, or found in the cache) and waves on `sms` SMs (0: the target's reference GPU's), and the op's
// ideal bytes, FLOPs and roofline time.
nlohmann::json describe(Runtime& rt, const OpDef& op, TensorList tensors, ScalarList scalars, const Target& target,
                        Emit key_emit, int sms, bool model);

// One `mojo-jit cache` action on the disk cache at `dir`: path, stats, ls (list), verify (removes bad entries),
// prune (to `max_bytes`; 0: $MOJO_JIT_CACHE_MAX_BYTES or 1 GiB), clear, push and pull (to and from `remote`; empty:
// $MOJO_JIT_REMOTE). InvalidArgumentError for any other action.
struct CacheReport {
  nlohmann::json json;
  std::string text;  // what the CLI prints without --json
};
CacheReport cache_action(const std::string& action, const std::filesystem::path& dir, std::uint64_t max_bytes = 0,
                         std::string remote = {});

// nvdisasm: the first on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or `venv_bin` (tools/setup.sh's .venv/bin:
// the CUDA 13.0 toolkit image lacks nvdisasm, and setup puts PyPI's there); empty if none.
std::string find_nvdisasm(const std::filesystem::path& venv_bin);

// The SASS of a cubin (nvdisasm -c -g); Error with nvdisasm's first line if it fails.
std::string disassemble(const std::string& nvdisasm, const std::string& cubin);

}  // namespace mojo::inspect
