#include "ops/registry.hpp"

#include <fmt/format.h>

#include <array>
#include <unordered_map>
#include <vector>

#include "mojo/error.hpp"

namespace mojo {

std::span<const OpDef* const> all_ops() {
  static const std::array ops = {
#define MOJO_OP(name) &name##_op(),
#include "ops/ops.def"
#undef MOJO_OP
  };
  return ops;
}

const OpDef& find_op(std::string_view name) {
  // Built once; a launch's lookup hashes the name and allocates nothing.
  static const std::unordered_map<std::string_view, const OpDef*> by_name = [] {
    std::unordered_map<std::string_view, const OpDef*> m;
    for (const OpDef* op : all_ops()) m.emplace(op->name(), op);
    return m;
  }();
  if (auto it = by_name.find(name); it != by_name.end()) return *it->second;
  std::vector<std::string_view> names;
  for (const OpDef* op : all_ops()) names.push_back(op->name());
  throw UnknownOpError(fmt::format("unknown op '{}'; known ops: {}", name, fmt::join(names, ", ")));
}

}  // namespace mojo
