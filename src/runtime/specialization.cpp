#include "runtime/specialization.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace mojo {
namespace {

// The key of `u` (its source and kernels, built from `params`), and what the cache records beside it; `what`
// starts the meta.
void seal(Unit& u, const std::string& params, const Target& target, std::string_view compiler, Emit emit,
          const std::string& what) {
  const std::string target_name = target.sm_name();
  const std::string kernels = fmt::format("{}", fmt::join(u.kernels, "\n"));
  u.key = compute_key(KeyInputs{u.source, kernels, params, target_name, compiler, emit});
  u.components = fmt::format("source={:016x}\ncompiler={}\nformat={}\n", XXH3_64bits(u.source.data(), u.source.size()),
                             compiler, kCacheFormatVersion);
  u.meta = fmt::format("{}target={}\ncompiler={}\nemit={}\n", what, target_name, compiler, emit_name(emit));
}

}  // namespace

std::string entry_text(const OpDef& op, const Params& step, Emit emit) {
  std::string text = fmt::format("\n#line 1 \"<specialization>\"\n{}\n", op.entry_line(step));
  if (emit == Emit::host) text += fmt::format("MOJO_CPU_ENTRY({})\n", op.kernel_name(step));
  return text;
}

Unit specialization_unit(const Specialization& s, std::string templates, const Target& target,
                         std::string_view compiler, Emit emit) {
  Unit u;
  u.source = std::move(templates);
  for (const Params& step : s.steps) {
    u.kernels.push_back(s.op->kernel_name(step));
    u.source += entry_text(*s.op, step, emit);
  }
  const std::string params = s.params.str();
  u.description = fmt::format("{} {{{}}} for {} ({})", s.op->name(), params, target.sm_name(), emit_name(emit));
  seal(u, params, target, compiler, emit,
       fmt::format("op={}\nkernel={}\nparams={}\n", s.op->name(), u.kernels.front(), params));
  return u;
}

Unit bundle_unit(std::string source, std::vector<std::string> kernels, const std::vector<std::string>& params,
                 const Target& target, std::string_view compiler, Emit emit) {
  Unit u;
  u.source = std::move(source);
  u.kernels = std::move(kernels);
  const std::size_t n = u.kernels.size();
  u.description = fmt::format("bundle of {} kernels for {} ({})", n, target.sm_name(), emit_name(emit));
  seal(u, fmt::format("{}", fmt::join(params, "\n")), target, compiler, emit,
       fmt::format("bundle={} kernels\nkernels={}\n", n, fmt::join(u.kernels, ",")));
  return u;
}

}  // namespace mojo
