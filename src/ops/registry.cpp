#include "ops/registry.hpp"

#include <fmt/format.h>

#include <array>

#include "mojo/error.hpp"

namespace mojo {

std::span<const OpDef* const> all_ops() {
  static const std::array ops = {
      &rms_norm_op(),  &add_rms_norm_op(), &layer_norm_op(),   &layer_norm_backward_op(), &softmax_op(),
      &log_softmax_op(), &softmax_backward_op(), &silu_op(), &gelu_op(), &swiglu_op(), &gelu_and_mul_op(),
      &rotary_embedding_op(), &embedding_op(), &store_kv_cache_op(), &gemm_op(), &gemm_batched_op(), &linear_op(),
      &group_gemm_op()};
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
