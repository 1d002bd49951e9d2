// The built-in operators, one accessor each (defined beside their OpDef).
#pragma once

#include "mojo/op.hpp"

namespace mojo {

#define MOJO_OP(name) const OpDef& name##_op();
#include "ops/ops.def"
#undef MOJO_OP

}  // namespace mojo
