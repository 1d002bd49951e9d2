// The checks of the built-in ops, one accessor each (src/check/<op>.cpp),
// and what several of them share.
#pragma once

#include <cstdint>

#include "mojo/check.hpp"

namespace mojo {

#define MOJO_OP(name) const OpCheck& name##_check();
#include "ops/ops.def"
#undef MOJO_OP

// How far a dot product of k terms in fp32 may be from float64.
Tolerance product_tolerance(DType out, std::int64_t k, bool tf32);

}  // namespace mojo
