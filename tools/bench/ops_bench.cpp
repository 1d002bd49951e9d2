// Every op's kernel time at Qwen3-8B's shapes (hidden 4096, intermediate
// 12288, 32 query and 8 KV heads of 128, vocab 151,936, with 1 / 32 / 4096 /
// 16384 tokens; softmax on vocab rows: 1 / 32 / 512) and Qwen3-30B-A3B's MoE
// (128 experts, top 8, hidden 2048); with --smoke, every op once at tiny
// shapes. Inputs, traffic and timing: op_timing.cpp. Every op of
// mojo::all_ops() must have a case in these tables (mojo-bench fails otherwise).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "bench.hpp"

namespace bench {
namespace {

using mojo::DType;

std::vector<OpCase> qwen3_cases(bool smoke) {
  if (smoke)
    return {{"rms_norm", "x=2x256"},
            {"add_rms_norm", "x=2x256"},
            {"rms_norm_backward", "x=2x256"},
            {"layer_norm", "x=2x256"},
            {"layer_norm_backward", "x=2x256"},
            {"silu", "x=2x256"},
            {"gelu", "x=2x256"},
            {"swiglu", "x=2x512"},
            {"gelu_and_mul", "x=2x512"},
            {"rotary_embedding", "q=2x4x128 k=2x2x128 cos_sin_cache=16x128"},
            {"embedding", "ids=2 weight=64x256"},
            {"store_kv_cache", "k_cache=4x16x2x128 k=2x2x128"},
            {"softmax", "x=2x1000"},
            {"log_softmax", "x=2x1000"},
            {"softmax_backward", "out=2x1000"}};
  std::vector<OpCase> out;
  for (int t : {1, 32, 4096, 16384}) {
    for (const char* op : {"rms_norm", "add_rms_norm", "rms_norm_backward", "layer_norm", "layer_norm_backward"})
      out.push_back({op, fmt::format("x={}x4096", t)});
    for (const char* op : {"silu", "gelu"}) out.push_back({op, fmt::format("x={}x12288", t)});
    for (const char* op : {"swiglu", "gelu_and_mul"}) out.push_back({op, fmt::format("x={}x24576", t)});
    out.push_back({"rotary_embedding", fmt::format("q={0}x32x128 k={0}x8x128 cos_sin_cache=40960x128", t)});
    out.push_back({"embedding", fmt::format("ids={} weight=151936x4096", t)});
    out.push_back({"store_kv_cache", fmt::format("k_cache=2048x16x8x128 k={}x8x128", t)});
  }
  for (int rows : {1, 32, 512}) {
    for (const char* op : {"softmax", "log_softmax"}) out.push_back({op, fmt::format("x={}x151936", rows)});
    out.push_back({"softmax_backward", fmt::format("out={}x151936", rows)});
  }
  return out;
}

// Square products (f16 and bf16, b as [K, N] and as [N, K]), a batched one,
// Qwen3-8B's linears (qkv, gate+up, down) at decode and prefill sizes, plus
// gate+up with its bias and silu fused, and Qwen3-30B-A3B's experts: the
// gated gate+up and the down product of 4096 tokens x 8 as group_gemm, their
// weights' gradients (group_gemm_weight_grad), and the whole MoE MLP at 4096
// and 32 tokens.
std::vector<OpCase> gemm_cases(bool smoke) {
  if (smoke)
    return {{"gemm", "a=64x64 b=64x64"},
            {"gemm", "a=64x64 b=64x64", DType::f16, {{"trans_b", 1}}},
            {"gemm_batched", "a=2x32x64 b=2x64x32"},
            {"linear", "x=2x64 weight=64x64"},
            {"linear", "x=16x64 weight=64x64 bias=64", DType::bf16, {{"activation", 3}}},
            {"group_gemm", "x=64x64 weight=2x64x64 offsets=3"},
            {"group_gemm_weight_grad", "grad_out=64x64 x=64x64 offsets=3"},
            {"moe_mlp", "x=8x64 ids=8x2 w13=4x64x64"}};
  std::vector<OpCase> out;
  for (DType dtype : {DType::bf16, DType::f16})
    for (int n : {4096, 8192})
      for (int trans_b : {0, 1})
        out.push_back({"gemm", fmt::format("a={0}x{0} b={0}x{0}", n), dtype,
                       trans_b ? std::vector<std::pair<std::string, double>>{{"trans_b", 1}}
                               : std::vector<std::pair<std::string, double>>{}});
  out.push_back({"gemm_batched", "a=16x2048x2048 b=16x2048x2048"});
  for (int m : {1, 16, 128, 4096}) {
    out.push_back({"linear", fmt::format("x={}x4096 weight=6144x4096", m)});
    out.push_back({"linear", fmt::format("x={}x4096 weight=24576x4096", m)});
    out.push_back({"linear", fmt::format("x={}x12288 weight=4096x12288", m)});
  }
  out.push_back({"linear", "x=4096x4096 weight=24576x4096 bias=24576", DType::bf16, {{"activation", 3}}});
  out.push_back({"group_gemm", "x=32768x2048 weight=128x1536x2048 offsets=129 out=32768x768", DType::bf16,
                 {{"gated_activation", 3}}});
  out.push_back({"group_gemm", "x=32768x768 weight=128x2048x768 offsets=129"});
  out.push_back({"group_gemm_weight_grad", "grad_out=32768x1536 x=32768x2048 offsets=129"});
  out.push_back({"group_gemm_weight_grad", "grad_out=32768x2048 x=32768x768 offsets=129"});
  for (int t : {4096, 32}) out.push_back({"moe_mlp", fmt::format("x={0}x2048 ids={0}x8 w13=128x1536x2048", t)});
  return out;
}

// Attention at Qwen3-8B's heads (32 query, 8 KV, head_dim 128): causal prefill of one 4096-token sequence
// (packed keys and a paged cache) and its backward, paged decode of 32 sequences of 8k (one token each, and 8 for
// speculative verification), over full-length contexts.
std::vector<OpCase> attention_cases(bool smoke) {
  if (smoke)
    return {{"sdpa", "q=16x4x64 k=16x1x64"},
            {"sdpa_backward", "q=16x4x64 k=16x1x64"},
            {"paged_prefill_gqa", "q=32x4x64 k_cache=8x16x1x64 cu_seqlens_q=3 block_tables=2x4"},
            {"paged_decode_gqa", "q=2x4x64 k_cache=8x16x1x64 block_tables=2x4"}};
  return {{"sdpa", "q=4096x32x128 k=4096x8x128"},
          {"sdpa_backward", "q=4096x32x128 k=4096x8x128"},
          {"paged_prefill_gqa", "q=4096x32x128 k_cache=8192x16x8x128 cu_seqlens_q=2 block_tables=1x256"},
          {"paged_decode_gqa", "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512"},
          {"paged_decode_gqa", "q=256x32x128 k_cache=16384x16x8x128 block_tables=32x512"}};
}

// A server's step past the model (f32 logits, vocab 151,936, batch 1 and 256;
// speculative verification of 4 drafts) and Qwen3-30B-A3B's routing (4096
// tokens, 128 experts, top 8, hidden 2048).
std::vector<OpCase> sampling_moe_cases(bool smoke) {
  std::vector<OpCase> out;
  if (smoke) {
    out = {{"apply_penalties_temperature", "logits=2x1000 token_ids=2x40"},
           {"sample", "logits=2x1000"},
           {"reject_sample", "target_probs=2x3x1000"},
           {"moe_gate", "logits=8x128 ids=8x8"},
           {"moe_dispatch", "expert_offsets=129 ids=8x8"},
           {"moe_dispatch", "expert_offsets=129 ids=8x8 x=8x64"},
           {"moe_combine", "expert_out=64x64 positions=8x8"}};
  } else {
    for (int batch : {1, 256}) {
      out.push_back({"apply_penalties_temperature", fmt::format("logits={0}x151936 token_ids={0}x1024", batch)});
      out.push_back({"sample", fmt::format("logits={}x151936", batch)});
    }
    out.push_back({"reject_sample", "target_probs=64x5x151936"});
    for (int t : {4096, 32}) {
      out.push_back({"moe_gate", fmt::format("logits={0}x128 ids={0}x8", t)});
      out.push_back({"moe_dispatch", fmt::format("expert_offsets=129 ids={}x8", t)});
      out.push_back({"moe_dispatch", fmt::format("expert_offsets=129 ids={0}x8 x={0}x2048", t)});
      out.push_back({"moe_combine", fmt::format("expert_out={}x2048 positions={}x8", 8 * t, t)});
    }
  }
  for (OpCase& c : out) c.dtype = c.op.starts_with("moe") ? DType::bf16 : DType::f32;
  return out;
}

// The fused linear cross-entropy at Qwen3-8B's LM head in training: 8192 tokens, hidden 4096, vocab 151,936.
std::vector<OpCase> loss_cases(bool smoke) {
  if (smoke)
    return {{"linear_cross_entropy", "hidden=16x64 weight=300x64"},
            {"linear_cross_entropy_backward", "hidden=16x64 weight=300x64"}};
  return {{"linear_cross_entropy", "hidden=8192x4096 weight=151936x4096"},
          {"linear_cross_entropy_backward", "hidden=8192x4096 weight=151936x4096"}};
}

// Device-to-device copy bandwidth (read + write) over `bytes`.
double copy_bandwidth_gbs(std::size_t bytes) {
  mojo::DeviceBuffer a(bytes), b(bytes);
  a.fill_bytes(1);
  mojo::Stream stream;
  mojo::Event start, stop;
  mojo::copy_async(b.ptr(), a.ptr(), bytes, stream);
  const int reps = 10;
  start.record(stream);
  for (int r = 0; r < reps; ++r) mojo::copy_async(b.ptr(), a.ptr(), bytes, stream);
  stop.record(stream);
  stop.synchronize();
  const double s = std::max(double(mojo::Event::elapsed_ms(start, stop)) * 1e-3 / reps, 1e-9);
  return 2.0 * double(bytes) / s * 1e-9;
}

std::string path_of(const mojo::Params& p) {
  if (p.get_or("gemv", 0) != 0) return "gemv";
  const std::int64_t wgmma = p.get_or("wgmma", -1);
  return wgmma < 0 ? "-" : wgmma ? "sm_90a" : "sm_80";
}
std::string tile_of(const mojo::Params& p) {
  const std::int64_t bm = p.get_or("bm", 0), bn = p.get_or("bn", 0);
  if (p.get_or("gemv", 0) != 0) return fmt::format("{} rows, ks {}", p.get("gemv"), p.get("ks"));
  return bm && bn ? fmt::format("{}x{}", bm, bn) : "-";
}

nlohmann::json row_json(const OpCase& c, const OpTiming& t) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, value] : c.params) params[name] = value;
  nlohmann::json row = {{"op", c.op},
                        {"dtype", mojo::dtype_name(c.dtype)},
                        {"shapes", c.shapes},
                        {"params", params},
                        {"us", t.us},
                        {"bytes", t.traffic.bytes},
                        {"flops", t.traffic.flops},
                        {"kernel", t.kernel}};
  for (const char* name : {"activation", "trans_b"})  // tools/bench/torch_compare.py reads these
    if (params.contains(name)) row[name] = params[name];
  if (!t.traffic.note.empty()) row["traffic_note"] = t.traffic.note;
  return row;
}

}  // namespace

void bench_ops(mojo::Runtime& rt, const Options& options) {
  const mojo::Device& device = use_device(rt);
  const bool cpu = device.is_cpu(), smoke = options.smoke;
  const Repetitions reps = repetitions(options, cpu);
  const double copy_gbs =
      copy_bandwidth_gbs(smoke || cpu ? std::size_t(1) << 20 : std::size_t(options.quick ? 256 : 1024) << 20);
  std::set<std::string> covered;
  nlohmann::json rows = nlohmann::json::array();
  auto run = [&](const OpCase& c) {
    covered.insert(c.op);
    try {
      OpTiming t = time_op(rt, c, reps);
      rows.push_back(row_json(c, t));
      return t;
    } catch (const std::exception& e) {
      throw mojo::Error(fmt::format("{} {} {}: {}", c.op, mojo::dtype_name(c.dtype), c.label(), e.what()));
    }
  };

  // What a launch costs when it does nothing: a one-element kernel, same method.
  const double floor_us = time_op(rt, {"silu", "x=1x1", DType::f32}, reps).us;
  fmt::print("\n## Ops at Qwen3-8B shapes (bf16; {}; device copy bandwidth measured now: {:.0f} GB/s; "
             "launch floor (1-element silu): {:.2f} µs)\n\n",
             device.name(), copy_gbs, floor_us);
  fmt::print("| op | shapes | MB moved | µs | GB/s | % of measured copy | % of 3.0 TB/s |\n"
             "|---|---|---:|---:|---:|---:|---:|\n");
  for (const OpCase& c : qwen3_cases(smoke)) {
    const OpTiming t = run(c);
    const double gbs = t.traffic.bytes / (t.us * 1e-6) * 1e-9;
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.0f} | {:.0f}% | {:.0f}% |\n", c.op, c.label(), t.traffic.bytes * 1e-6,
               t.us, gbs, 100 * gbs / copy_gbs, 100 * gbs / kNominalCopyGBs);
  }

  fmt::print("\n## GEMM (random operands; path sm_90a: TMA + wgmma, warp-specialised; sm_80: mma.sync + ldmatrix + "
             "cp.async; % of {:.0f} TFLOP/s, about what cuBLAS reaches on random bf16 4096^3 on an H100 "
             "(torch_compare.py measures cuBLAS itself); MoE products count the routed rows and the experts used)\n\n",
             kNominalTensorTflops);
  fmt::print("| op | dtype | shapes | path | tile | µs | TFLOP/s | % of {:.0f} TFLOP/s | weight GB/s | "
             "% of measured copy |\n|---|---|---|---|---|---:|---:|---:|---:|---:|\n",
             kNominalTensorTflops);
  for (const OpCase& c : gemm_cases(smoke)) {
    const OpTiming t = run(c);
    const double tflops = t.traffic.flops / (t.us * 1e-6) * 1e-12;
    const double weight_gbs = t.traffic.weight_bytes / (t.us * 1e-6) * 1e-9;
    const bool weight_bound = t.traffic.weight_bytes >= 0.5 * t.traffic.bytes;  // decode: the weights dominate
    fmt::print("| {} | {} | {} | {} | {} | {:.2f} | {:.1f} | {:.0f}% | {} | {} |\n", c.op, mojo::dtype_name(c.dtype),
               c.label(), path_of(t.params), tile_of(t.params), t.us, tflops, 100 * tflops / kNominalTensorTflops,
               weight_bound ? fmt::format("{:.0f}", weight_gbs) : "",
               weight_bound ? fmt::format("{:.0f}%", 100 * weight_gbs / copy_gbs) : "");
  }

  fmt::print("\n## Attention (bf16, causal, full-length sequences; TFLOP/s of the query-key pairs each sequence sees; "
             "K/V: the keys read; decode splits over the keys when the batch leaves SMs idle)\n\n");
  fmt::print("| op | shapes | path | splits | µs | TFLOP/s | K/V GB/s | % of measured copy |\n"
             "|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const OpCase& c : attention_cases(smoke)) {
    const OpTiming t = run(c);
    const double tflops = t.traffic.flops / (t.us * 1e-6) * 1e-12, kv_gbs = t.traffic.weight_bytes / (t.us * 1e-6) * 1e-9;
    fmt::print("| {} | {} | {} | {} | {:.2f} | {:.1f} | {:.0f} | {:.0f}% |\n", c.op, c.label(), path_of(t.params),
               t.params.get_or("splits", 1), t.us, tflops, kv_gbs, 100 * kv_gbs / copy_gbs);
  }

  fmt::print("\n## Sampling (f32, random logits and probabilities) and MoE routing (bf16; moe_dispatch with x: the "
             "gather too)\n\n");
  fmt::print("| op | shapes | MB moved | µs | GB/s | % of measured copy | counted |\n"
             "|---|---|---:|---:|---:|---:|---|\n");
  for (const OpCase& c : sampling_moe_cases(smoke)) {
    const OpTiming t = run(c);
    const double gbs = t.traffic.bytes / (t.us * 1e-6) * 1e-9;
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.0f} | {:.0f}% | {} |\n", c.op, c.label(), t.traffic.bytes * 1e-6, t.us,
               gbs, 100 * gbs / copy_gbs, t.traffic.note.empty() ? "every tensor once" : t.traffic.note);
  }

  fmt::print("\n## Fused linear cross-entropy (bf16; TFLOP/s of its products: 2 N V H forward, 6 N V H backward, "
             "which recomputes the logits; % of {:.0f} TFLOP/s)\n\n",
             kNominalTensorTflops);
  fmt::print("| op | shapes | slices | µs | TFLOP/s | % of {:.0f} TFLOP/s | workspace MB |\n"
             "|---|---|---:|---:|---:|---:|---:|\n",
             kNominalTensorTflops);
  for (const OpCase& c : loss_cases(smoke)) {
    const OpTiming t = run(c);
    const double tflops = t.traffic.flops / (t.us * 1e-6) * 1e-12;
    fmt::print("| {} | {} | {} | {:.0f} | {:.1f} | {:.0f}% | {:.0f} |\n", c.op, c.label(), t.repeats, t.us, tflops,
               100 * tflops / kNominalTensorTflops, double(t.workspace) * 1e-6);
    rows.back()["workspace"] = double(t.workspace);
  }

  if (!options.json.empty()) {
    const nlohmann::json doc = {
        {"device", device.name()}, {"copy_gbs", copy_gbs}, {"launch_floor_us", floor_us}, {"ops", rows}};
    std::ofstream(options.json) << doc.dump(2) << "\n";
  }
  std::vector<std::string> missing;
  for (const mojo::OpDef* op : mojo::all_ops())
    if (!covered.count(std::string(op->name()))) missing.push_back(std::string(op->name()));
  if (!missing.empty())
    throw mojo::Error(fmt::format("bench: no ops-table case for {} (add one, full and smoke, to tools/bench/ops_bench.cpp)",
                                  fmt::join(missing, ", ")));
}

}  // namespace bench
