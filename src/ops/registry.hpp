// One accessor per built-in op; all_ops() (registry.cpp) lists them.
#pragma once

#include "mojo/op.hpp"

namespace mojo {
const OpDef& rms_norm_op();
}  // namespace mojo
