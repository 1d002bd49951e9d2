// Prewarm manifests: which specializations to compile ahead of time, so that
// production machines start with a warm cache. Format (TOML): cache/README.md;
// an example is cache/qwen3-8b.toml.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mojo/op.hpp"
#include "mojo/target.hpp"

namespace mojo {

// One specialization to compile: an op on concrete tensor specs, for a target.
struct PrewarmItem {
  std::string op;
  std::vector<Tensor> tensors;  // data == 0: specs only
  std::vector<std::pair<std::string, double>> scalars;
  Target target;
  std::string label;  // "rms_norm bf16 x=1x4096 sm_90", for progress and errors

  std::vector<ScalarArg> scalar_args() const;  // views into `scalars`
};

struct Manifest {
  struct Kernel {
    std::string op;
    std::vector<DType> dtypes;
    // One map per shape: tensor name -> dims. A dim may list several values
    // (a bucket); every combination is compiled.
    std::vector<std::map<std::string, std::vector<std::vector<std::int64_t>>, std::less<>>> shapes;
    std::vector<std::pair<std::string, double>> scalars;
  };
  std::string name;
  std::vector<Target> targets;  // used when the caller names none
  std::vector<Kernel> kernels;

  // Throws InvalidArgumentError naming the file, line and problem.
  static Manifest parse(std::string_view text, std::string_view source_name = "manifest");
  static Manifest load(const std::filesystem::path& path);
  // Every dtype of each named op (none: every op) at its example shapes
  // (OpDef::example_shapes): a set with one kernel per op x dtype, for
  // `compile-all --ops` and the compile benchmark. UnknownOpError for a bad name.
  static Manifest examples(const std::vector<std::string>& ops = {});

  // Every op x dtype x shape x target, validated against the op (throws on
  // an op, dtype or shape the op rejects). `targets` empty: the manifest's.
  std::vector<PrewarmItem> items(const std::vector<Target>& targets = {}) const;
};

}  // namespace mojo
