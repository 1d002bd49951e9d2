// moe_mlp: the routed experts' MLP as one plan of kernels from other
// templates (src/ops/moe_mlp.cpp says which): moe.cu's dispatch and gather,
// gemm.cu's group GEMM twice (gate/up with act-and-mul fused, then down) and
// moe.cu's combine. Each step's entry macro is one of theirs.
#include "gemm.cu"
#include "moe.cu"
