// A specialization as a value (an op, the params specialize() derived, the
// steps of its plan, computed once), and the translation unit that compiles
// it or a bundle of many: source, kernel names, and the key, description
// and meta the cache keeps it under. launch, get_kernel, compile, key_parts,
// prewarm and compile_all all build their units here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mojo/cache.hpp"
#include "mojo/compiler.hpp"
#include "mojo/op.hpp"

namespace mojo {

struct Specialization {
  const OpDef* op;
  Params params;
  std::vector<Params> steps;  // op->plan(params): the kernels a launch runs, in order

  Specialization(const OpDef& o, const Params& p) : op(&o), params(p), steps(o.plan(p)) {}
};

struct Unit {
  std::string source;                // the templates, then one entry per kernel
  std::vector<std::string> kernels;  // in launch order
  std::string description, meta, components;
  KernelKey key;
};

// The lines that instantiate one kernel (and, for a host build, its entry point).
std::string entry_text(const OpDef& op, const Params& step, Emit emit);

// The unit of one specialization: `templates` (its template file expanded) and its steps' entries.
Unit specialization_unit(const Specialization& s, std::string templates, const Target& target,
                         std::string_view compiler, Emit emit);

// The unit of a bundle: `source` holds the templates and one entry per kernel of `kernels`, built from `params`
// (one Params::str() per kernel).
Unit bundle_unit(std::string source, std::vector<std::string> kernels, const std::vector<std::string>& params,
                 const Target& target, std::string_view compiler, Emit emit);

}  // namespace mojo
