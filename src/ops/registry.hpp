// The built-in operators, one accessor each (defined beside their OpDef).
#pragma once

#include "mojo/op.hpp"

namespace mojo {

const OpDef& rms_norm_op();
const OpDef& add_rms_norm_op();
const OpDef& layer_norm_op();
const OpDef& layer_norm_backward_op();
const OpDef& softmax_op();
const OpDef& log_softmax_op();
const OpDef& softmax_backward_op();
const OpDef& silu_op();
const OpDef& gelu_op();
const OpDef& swiglu_op();
const OpDef& gelu_and_mul_op();
const OpDef& rotary_embedding_op();
const OpDef& embedding_op();
const OpDef& store_kv_cache_op();
const OpDef& gemm_op();
const OpDef& gemm_batched_op();
const OpDef& linear_op();
const OpDef& group_gemm_op();

}  // namespace mojo
