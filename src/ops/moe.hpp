// What moe_gate's scalars and shapes choose: the op validates it and the
// kernel follows it; the reference (src/reference/moe.cpp) follows it too.
#pragma once

#include <cstdint>
#include <span>

#include "mojo/op.hpp"

namespace mojo {

struct MoeGateConfig {
  std::int64_t experts, top_k;
  bool softmax = true;  // else sigmoid
  std::int64_t groups = 1, top_groups = 1;
  bool renormalize = true;
  double scaling = 1.0;
};

// moe_gate's (`op`) choice for tensors [weights, ids, logits, bias] and its scalars.
MoeGateConfig moe_gate_config(const OpDef& op, std::span<const TensorSpec> specs, ScalarList scalars);

}  // namespace mojo
