// The CPU references of every op (src/reference/<op>.cpp), in plain C++ with
// float64 accumulation. Tensors here are host byte buffers of the op's dtype.
// Part of the check library (libmojo_jit_check): the op checks
// (src/check/), tests, benchmarks and examples use them; libmojo_jit does not.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/convert.hpp"
#include "mojo/tensor.hpp"
#include "ops/moe.hpp"
#include "mojo_activation.h"

namespace mojo::reference {

// The dtype conversions (src/core/convert.hpp), under the names references and tests use.
using convert::bf16_to_float;
using convert::decode;
using convert::encode;
using convert::f16_to_float;
using convert::float_to_bf16;
using convert::float_to_f16;
using convert::load;
using convert::store;

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, float64 inside,
// rounded once to dtype.
void rms_norm(DType dtype, const void* x, const void* weight, void* out, std::int64_t rows,
              std::int64_t hidden, double eps);
// residual[r, :] = round(residual + x); out = rms_norm(residual) (residual updated in place).
void add_rms_norm(DType dtype, void* residual, const void* x, const void* weight, void* out, std::int64_t rows,
                  std::int64_t hidden, double eps);
// The gradients of rms_norm: grad_x = rstd (g - xhat mean(g xhat)), g = grad_out * weight, xhat = x * rstd,
// plus grad_residual when not null (add_rms_norm's, x being its updated residual); grad_weight = sum(grad_out xhat).
void rms_norm_backward(DType dtype, const void* grad_out, const void* x, const void* weight,
                       const void* grad_residual, void* grad_x, void* grad_weight, std::int64_t rows,
                       std::int64_t hidden, double eps);
// out = (x - mean) * rstd * weight + bias; mean and rstd (float, per row) written when not null.
void layer_norm(DType dtype, const void* x, const void* weight, const void* bias, void* out, float* mean,
                float* rstd, std::int64_t rows, std::int64_t hidden, double eps);
// The gradients of layer_norm given the forward's mean and rstd.
void layer_norm_backward(DType dtype, const void* grad_out, const void* x, const void* weight, const float* mean,
                         const float* rstd, void* grad_x, void* grad_weight, void* grad_bias, std::int64_t rows,
                         std::int64_t hidden);
// softmax (or log_softmax) over rows of `cols`.
void softmax(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols, bool log);
// grad_x = out * (grad_out - sum(grad_out * out)).
void softmax_backward(DType dtype, const void* grad_out, const void* out, void* grad_x, std::int64_t rows,
                      std::int64_t cols);

double activate(Act act, double x);
// Plain: out[i] = act(x[i]) for n elements. Gated: x is [rows, 2 * d],
// out [rows, d] = act(x[:, :d]) * x[:, d:], with rows = n / d.
void activation(DType dtype, Act act, bool gated, const void* x, void* out, std::int64_t n, std::int64_t d);

// Rotary embedding in place on contiguous q [tokens, heads, head_dim] and
// k [tokens, kv_heads, head_dim]; positions are i64; cos_sin is f32
// [max_pos, rot_dim]. Positions out of range are skipped.
void rotary_embedding(DType dtype, void* q, void* k, const std::int64_t* positions, const float* cos_sin,
                      std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                      std::int64_t rot_dim, std::int64_t max_pos, bool neox);
// out[t, :] = weight[ids[t], :], zeros for an id out of [0, vocab).
void embedding(DType dtype, const std::int64_t* ids, const void* weight, void* out, std::int64_t tokens,
               std::int64_t vocab, std::int64_t hidden);
// cache[slot, :] = k[t, :] (rows of `row` elements) for slots in [0, num_slots).
void store_kv_cache(DType dtype, const void* k, const void* v, const std::int64_t* slots, void* k_cache,
                    void* v_cache, std::int64_t tokens, std::int64_t num_slots, std::int64_t row);

// ---- sampling (src/reference/sampling.cpp) ----
// Philox 4x32-10 as Random123 defines it, and the 24 random bits of a
// request's draw `stream` (kernel_templates/mojo_random.cuh's convention).
std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::uint32_t k0, std::uint32_t k1);
std::uint32_t random24(std::int64_t seed, std::int64_t offset, std::uint32_t stream);
// What `sample` draws a row's token from, unnormalized: exp(l - max) for the
// tokens top_k (0: all; ties with the k-th logit kept), then top_p (the
// fewest highest tokens holding that fraction of the top-k mass, ties kept),
// then min_p (exp(l - max) >= min_p) keep; 0 for the others. Found by sorting.
std::vector<double> sampling_weights(const std::vector<float>& logits, std::int64_t top_k, double top_p,
                                     double min_p);
// The index where r24 / 2^24 of the total weight falls, counting in index
// order; greedy: the first nonzero one; -1 when every weight is 0.
std::int64_t inverse_cdf(const std::vector<double>& weights, std::uint32_t r24, bool greedy);
// One request of apply_penalties_temperature: logits (float, in place) and its (id, count) list (id < 0 pads).
void apply_penalties_temperature(std::vector<float>& logits, const std::vector<std::int64_t>& ids,
                                 const std::vector<std::int64_t>& counts, double repetition, double presence,
                                 double frequency, double temperature);
// One request of reject_sample: draft [spec, vocab] and target [spec + 1, vocab]
// probabilities; fills out (spec + 1 tokens, -1 after the last) and returns the accepted count.
std::int64_t reject_sample(const std::vector<std::int64_t>& drafts, const std::vector<float>& draft_probs,
                           const std::vector<float>& target_probs, std::int64_t vocab, std::int64_t seed,
                           std::int64_t offset, std::int64_t* out);

// ---- MoE routing (src/reference/moe.cpp) ----
// logits [tokens, experts] (bias: [experts] or empty) -> ids and weights [tokens, top_k], kernel_templates/moe.cu's rule.
void moe_gate(const MoeGateConfig& g, const std::vector<float>& logits, const std::vector<float>& bias, std::int64_t tokens,
              std::vector<std::int64_t>& ids, std::vector<float>& weights);
// The stable counting sort of the (token, slot) pairs by expert id: offsets [experts + 1],
// sorted_ids [pairs] (-1 past the routed rows), positions [pairs] (-1 for an id outside [0, experts)).
void moe_dispatch(const std::vector<std::int64_t>& ids, std::int64_t top_k, std::int64_t experts,
                  std::vector<std::int64_t>& offsets, std::vector<std::int64_t>& sorted_ids,
                  std::vector<std::int64_t>& positions);
// out[t] = sum over k of weights[t, k] * expert_out[positions[t, k]] (negative positions skipped).
void moe_combine(DType dtype, const void* expert_out, const std::int64_t* positions, const float* weights, void* out,
                 std::int64_t tokens, std::int64_t top_k, std::int64_t hidden);

// ---- the fused linear cross-entropy (src/reference/cross_entropy.cpp) ----
struct CrossEntropy {
  std::int64_t tokens, hidden, vocab;
  int reduction = 1;  // 0 none, 1 mean over the rows not ignored, 2 sum
  std::int64_t ignore_index = -100;
  double smoothing = 0, z_loss = 0, softcap = 0;
};
// loss ([1], or [tokens] with reduction 0) and lse [tokens] of logits = hidden [tokens, hidden] x weight^T.
void linear_cross_entropy(const CrossEntropy& ce, const std::vector<float>& hidden, const std::vector<float>& weight,
                          const std::vector<std::int64_t>& labels, std::vector<float>& loss, std::vector<float>& lse);
// Their gradients for grad_loss ([1] or [tokens]) and grad_lse ([tokens], or empty: none), from the forward's lse.
void linear_cross_entropy_backward(const CrossEntropy& ce, const std::vector<float>& hidden,
                                   const std::vector<float>& weight, const std::vector<std::int64_t>& labels,
                                   const std::vector<float>& lse, const std::vector<float>& grad_loss,
                                   const std::vector<float>& grad_lse, std::vector<float>& grad_hidden,
                                   std::vector<float>& grad_weight);

// Attention for every op that has it (sdpa, paged prefill and decode): a
// float64 softmax over each query's visible keys. Sequence s's queries are
// rows [q_start, q_start + q_count) of q/out ([tokens, heads, head_dim]); its
// keys are rows key_rows[0..kv_len) of k/v ([rows, kv_heads, head_dim]: the
// paged cache flattened, or the packed keys). Query t sits at absolute
// position kv_len - q_count + t; it sees key j when j <= that (causal), and
// j >= that - window (window >= 0). Logits are scale * q.k, soft-capped as
// cap * tanh(x / cap) when softcap > 0; sinks (per head, may be empty) join
// the denominator. lse (may be null): [heads, tokens], natural log.
struct AttentionSequence {
  std::int64_t q_start, q_count;
  std::vector<std::int64_t> key_rows;
};
struct AttentionShape {
  std::int64_t tokens, heads, kv_heads, head_dim;
  double scale, softcap;
  bool causal;
  std::int64_t window;  // < 0: none
};
void attention(const AttentionShape& shape, const std::vector<AttentionSequence>& sequences, const float* q,
               const float* k, const float* v, const float* sinks, float* out, float* lse);
// Its gradients from grad_out (and lse's own, grad_lse [heads, tokens], may be null) and the forward's out and
// lse (as given): grad_q like q, grad_k and grad_v like k and v, grad_sinks [heads] (may be null; sinks then
// too), by the formulas of kernel_templates/sdpa_backward.cu.
void attention_backward(const AttentionShape& shape, const std::vector<AttentionSequence>& sequences, const float* q,
                        const float* k, const float* v, const float* sinks, const float* grad_out,
                        const float* grad_lse, const float* out, const float* lse, float* grad_q, float* grad_k,
                        float* grad_v, float* grad_sinks, std::int64_t kv_rows);

// c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for `batch` contiguous
// row-major problems; a, b are [M, K] / [K, N] ([K, M] / [N, K] transposed) of
// dtype `in`, c is [M, N] of dtype `out`; float64 accumulation, one rounding.
// With beta == 0, c is only written (its old values, even NaN, are ignored).
void gemm(DType in, DType out, const void* a, const void* b, void* c, std::int64_t batch, std::int64_t m,
          std::int64_t n, std::int64_t k, double alpha, double beta, bool trans_a, bool trans_b);
// out[M, N] = act(x[M, K] * w[N, K]^T + bias) + residual; bias and residual
// may be null.
void linear(DType dtype, const void* x, const void* w, const void* bias, const void* residual, void* out,
            std::int64_t m, std::int64_t n, std::int64_t k, Act act);

// For each group g: out[r, :] = x[r, :] * w[g]^T for r in [offsets[g], offsets[g + 1]);
// x [rows, K], w [groups, N, K], out [rows, N]; rows outside every group are left alone.
// gated: w's rows are (gate, up) pairs and out [rows, N / 2] = gated_act(gate) * up.
void group_gemm(DType dtype, const void* x, const void* w, const std::int64_t* offsets, void* out, std::int64_t groups,
                std::int64_t n, std::int64_t k, bool gated = false, Act gated_act = Act::none);
// Its weights' gradient: grad_weight[g] = grad_out[rows of g]^T x[rows of g] for each group g, grad_out [rows, N],
// x [rows, K], grad_weight [groups, N, K]; zeros for a group of no rows.
void group_gemm_weight_grad(DType dtype, const void* grad_out, const void* x, const std::int64_t* offsets,
                            void* grad_weight, std::int64_t groups, std::int64_t n, std::int64_t k);

}  // namespace mojo::reference
