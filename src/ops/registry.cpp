#include "ops/registry.hpp"

#include <fmt/format.h>

#include <array>

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
  for (const OpDef* op : all_ops())
    if (op->name() == name) return *op;
  std::vector<std::string_view> names;
  for (const OpDef* op : all_ops()) names.push_back(op->name());
  throw UnknownOpError(fmt::format("unknown op '{}'; known ops: {}", name, fmt::join(names, ", ")));
}

}  // namespace mojo
