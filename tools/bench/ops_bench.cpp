// Every op's kernel time at Qwen3-8B's shapes (GPU): hidden 4096,
// intermediate 12288, 32 query and 8 KV heads of 128, vocab 151,936, with
// 1 / 32 / 4096 / 16384 tokens (softmax on vocab rows: 1 / 32 / 512).
//
// Bandwidth counts the minimal traffic: each input read once, each output
// written once, an in-place tensor both; a gathered tensor (embedding rows,
// rotary cos/sin rows, KV-cache slots) counts only the rows touched.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "bench.hpp"

namespace bench {
namespace {

struct Case {
  std::string op, shapes;  // shapes in the command line's form: "x=32x4096"
  double activation = 0;   // linear's fused activation
  int trans_b = 0;         // gemm: b is [N, K] (the sm_90a path's layout)
  mojo::DType dtype = mojo::DType::bf16;
};

std::vector<Case> qwen3_cases() {
  std::vector<Case> out;
  for (int t : {1, 32, 4096, 16384}) {
    for (const char* op : {"rms_norm", "add_rms_norm", "layer_norm", "layer_norm_backward"})
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

// Square products (f16 and bf16, b as [K, N] and as [N, K]) and Qwen3-8B's
// linears (qkv, gate+up, down) at decode and prefill sizes, plus gate+up
// with its bias and silu fused.
std::vector<Case> gemm_cases() {
  std::vector<Case> out;
  for (mojo::DType dtype : {mojo::DType::bf16, mojo::DType::f16})
    for (int n : {4096, 8192})
      for (int trans_b : {0, 1}) out.push_back({"gemm", fmt::format("a={0}x{0} b={0}x{0}", n), 0, trans_b, dtype});
  for (int m : {1, 16, 128, 4096}) {
    out.push_back({"linear", fmt::format("x={}x4096 weight=6144x4096", m)});
    out.push_back({"linear", fmt::format("x={}x4096 weight=24576x4096", m)});
    out.push_back({"linear", fmt::format("x={}x12288 weight=4096x12288", m)});
  }
  out.push_back({"linear", "x=4096x4096 weight=24576x4096 bias=24576", 3});
  return out;
}

// Attention at Qwen3-8B's heads (32 query, 8 KV, head_dim 128): causal prefill of one 4096-token sequence
// (packed keys and a paged cache), paged decode of 32 sequences of 8k (one token each, and 8 for speculative
// verification), over full-length contexts.
std::vector<Case> attention_cases() {
  return {{"sdpa", "q=4096x32x128 k=4096x8x128"},
          {"paged_prefill_gqa", "q=4096x32x128 k_cache=8192x16x8x128 cu_seqlens_q=2 block_tables=1x256"},
          {"paged_decode_gqa", "q=32x32x128 k_cache=16384x16x8x128 block_tables=32x512"},
          {"paged_decode_gqa", "q=256x32x128 k_cache=16384x16x8x128 block_tables=32x512"}};
}
// A server's step past the model (f32 logits, vocab 151,936, batch 1 and 256;
// speculative verification of 4 drafts) and Qwen3-30B-A3B's routing (4096
// tokens, 128 experts, top 8, hidden 2048).
std::vector<Case> sampling_moe_cases() {
  std::vector<Case> out;
  for (int batch : {1, 256}) {
    out.push_back({"apply_penalties_temperature", fmt::format("logits={}x151936 token_ids={}x1024", batch, batch)});
    out.push_back({"sample", fmt::format("logits={}x151936", batch)});
  }
  out.push_back({"reject_sample", "target_probs=64x5x151936"});
  out.push_back({"moe_gate", "logits=4096x128 ids=4096x8"});
  out.push_back({"moe_dispatch", "expert_offsets=129 ids=4096x8"});
  out.push_back({"moe_dispatch", "expert_offsets=129 ids=4096x8 x=4096x2048"});
  out.push_back({"moe_combine", "expert_out=32768x2048 positions=4096x8"});
  for (Case& c : out) c.dtype = c.op.starts_with("moe") ? mojo::DType::bf16 : mojo::DType::f32;
  return out;
}

// The fused linear cross-entropy at Qwen3-8B's LM head in training: 8192 tokens, hidden 4096, vocab 151,936.
std::vector<Case> loss_cases() {
  return {{"linear_cross_entropy", "hidden=8192x4096 weight=151936x4096"},
          {"linear_cross_entropy_backward", "hidden=8192x4096 weight=151936x4096"}};
}

// 2 M N K of a gemm or linear case: out is [.., M, N] and a (or x) [.., M, K].
double flops(const std::vector<mojo::TensorSpec>& specs) {
  const mojo::TensorSpec &out = specs[0], &a = specs[1];
  return 2.0 * double(out.numel()) * double(a.dim(a.rank() - 1));
}

bool is_index(mojo::DType d) { return d == mojo::DType::i32 || d == mojo::DType::i64; }

const mojo::TensorSpec& spec_named(const mojo::OpDef& op, const std::vector<mojo::TensorSpec>& specs,
                                   std::string_view name) {
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (op.tensor_args()[i].name == name) return specs[i];
  throw mojo::Error(fmt::format("bench: {} has no tensor {}", op.name(), name));
}

// The bytes the computation must move at least (see the file comment).
double minimal_bytes(const mojo::OpDef& op, const std::vector<mojo::TensorSpec>& specs) {
  double bytes = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const mojo::TensorArgInfo& arg = op.tensor_args()[i];
    if (specs[i].rank() == 0) continue;  // an optional tensor left out
    const double n = double(specs[i].nbytes());
    if (op.name() == "embedding" && arg.name == "weight") {
      bytes += double(spec_named(op, specs, "out").nbytes());  // the rows gathered
    } else if (op.name() == "rotary_embedding" && arg.name == "cos_sin_cache") {
      bytes += double(spec_named(op, specs, "positions").numel() * specs[i].dim(1) * mojo::dtype_size(specs[i].dtype()));
    } else if (op.name() == "store_kv_cache" && (arg.name == "k_cache" || arg.name == "v_cache")) {
      bytes += double(spec_named(op, specs, "k").nbytes());  // the slots written
    } else {
      bytes += arg.role == "inout" ? 2 * n : n;
    }
  }
  return bytes;
}

bool is_attention(std::string_view op) { return op == "sdpa" || op.starts_with("paged_"); }

// Attention: 4 T_q T_k H D (halved when causal over one sequence) and the K/V bytes read.
double attention_flops(const mojo::OpDef& op, const std::vector<mojo::TensorSpec>& specs) {
  const mojo::TensorSpec& q = specs[1];
  if (op.name() == "paged_decode_gqa") {
    const mojo::TensorSpec& table = spec_named(op, specs, "block_tables");
    const double context = double(table.dim(1) * specs[2].dim(1));
    return 4.0 * double(q.dim(0)) * context * double(q.dim(1) * q.dim(2));
  }
  return 2.0 * double(q.dim(0)) * double(q.dim(0)) * double(q.dim(1) * q.dim(2));  // causal, T_k = T_q
}
double attention_kv_bytes(const mojo::OpDef& op, const std::vector<mojo::TensorSpec>& specs) {
  const mojo::TensorSpec& k = specs[2];
  const std::int64_t per_token = k.dim(k.rank() - 2) * k.dim(k.rank() - 1) * std::int64_t(mojo::dtype_size(k.dtype()));
  if (op.name() == "sdpa") return 2.0 * double(k.dim(0) * per_token);
  const mojo::TensorSpec& table = spec_named(op, specs, "block_tables");
  return 2.0 * double(table.numel() * k.dim(1) * per_token);
}
// Full-length attention index data: every sequence the same length, every context the whole block table,
// distinct blocks.
std::vector<std::int64_t> attention_indices(const mojo::OpDef& op, const std::vector<mojo::TensorSpec>& specs,
                                            std::size_t i, std::mt19937& rng) {
  const std::string_view name = op.tensor_args()[i].name;
  const mojo::TensorSpec& s = specs[i];
  std::vector<std::int64_t> v;
  if (name == "cu_seqlens_q") {
    const std::int64_t batch = s.dim(0) - 1, each = specs[1].dim(0) / batch;
    for (std::int64_t b = 0; b <= batch; ++b) v.push_back(b * each);
  } else if (name == "context_lens") {
    const mojo::TensorSpec& table = spec_named(op, specs, "block_tables");
    v.assign(std::size_t(s.numel()), table.dim(1) * specs[2].dim(1));
  } else {  // block_tables
    v.resize(std::size_t(specs[2].dim(0)));
    std::iota(v.begin(), v.end(), 0);
    std::shuffle(v.begin(), v.end(), rng);
    v.resize(std::size_t(s.numel()));
  }
  return v;
}

// Index tensors hold distinct in-range values: token ids < vocab, positions
// < max_pos, slots < num_blocks * block_size.
std::int64_t index_bound(const mojo::OpDef& op, const std::vector<mojo::TensorSpec>& specs) {
  if (op.name() == "embedding") return spec_named(op, specs, "weight").dim(0);
  if (op.name() == "rotary_embedding") return spec_named(op, specs, "cos_sin_cache").dim(0);
  if (op.name() == "sample") return 64;  // top_k (and the seeds and offsets)
  if (op.name() == "apply_penalties_temperature") return spec_named(op, specs, "logits").dim(1);  // token ids
  if (op.name() == "reject_sample") return spec_named(op, specs, "target_probs").dim(2);
  if (op.name() == "moe_dispatch") return spec_named(op, specs, "expert_offsets").numel() - 1;
  if (op.name() == "moe_combine") return spec_named(op, specs, "expert_out").dim(0);
  if (op.name().starts_with("linear_cross_entropy")) return spec_named(op, specs, "weight").dim(0);  // labels
  const mojo::TensorSpec& cache = spec_named(op, specs, "k_cache");
  return cache.dim(0) * cache.dim(1);
}

double copy_bandwidth_gbs(bool quick) {
  const std::size_t bytes = std::size_t(quick ? 256 : 1024) << 20;
  mojo::DeviceBuffer a(bytes), b(bytes);
  mojo::Stream stream;
  mojo::Event start, stop;
  mojo::copy_async(b.ptr(), a.ptr(), bytes, stream);
  const int reps = 10;
  start.record(stream);
  for (int r = 0; r < reps; ++r) mojo::copy_async(b.ptr(), a.ptr(), bytes, stream);
  stop.record(stream);
  stop.synchronize();
  double s = mojo::Event::elapsed_ms(start, stop) * 1e-3 / reps;
  return 2.0 * double(bytes) / s * 1e-9;
}

struct Result {
  double us = 0, bytes = 0, flops = 0, weight_bytes = 0;
  mojo::Params params;  // the specialization timed
};

// Median µs per launch of `c` over CUDA-graph replays that cycle through
// enough buffer sets to stream > 256 MiB (more than the L2) per replay.
Result time_case(mojo::Runtime& rt, const Case& c, mojo::DType dtype, bool quick) {
  const mojo::OpDef& op = mojo::find_op(c.op);
  const std::vector<mojo::TensorSpec> specs = op.specs_from_shapes(dtype, mojo::parse_shapes(op, c.shapes));
  const double bytes = minimal_bytes(op, specs);
  const int copies = int(std::clamp<double>(std::ceil(256.0 * (1 << 20) / bytes), 1, 64));
  constexpr std::size_t kShareAbove = 16u << 20;

  std::vector<mojo::DeviceBuffer> owned;
  // One set of tensors per copy; a big table the op only partly touches
  // (more than kShareAbove and more than the whole traffic) is shared.
  auto sets = std::vector<std::vector<mojo::Tensor>>(std::size_t(copies));
  std::mt19937 rng(7);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const mojo::TensorSpec& s = specs[i];
    for (int k = 0; k < copies; ++k) {
      if (s.rank() == 0) {  // an optional tensor left out
        sets[std::size_t(k)].push_back({s, 0});
        continue;
      }
      if (k > 0 && s.nbytes() > kShareAbove && double(s.nbytes()) > bytes) {
        sets[std::size_t(k)].push_back(sets[0][i]);
        continue;
      }
      mojo::DeviceBuffer& b = owned.emplace_back(std::max<std::size_t>(s.nbytes(), 1));
      if (is_index(s.dtype())) {
        std::vector<std::int64_t> values;
        if (is_attention(c.op)) {
          values = attention_indices(op, specs, i, rng);
        } else {
          const std::int64_t bound = index_bound(op, specs);
          if (bound >= s.numel()) {  // distinct values
            values.resize(std::size_t(bound));
            std::iota(values.begin(), values.end(), 0);
            std::shuffle(values.begin(), values.end(), rng);
            values.resize(std::size_t(s.numel()));
          } else {  // uniform (expert ids)
            for (std::int64_t j = 0; j < s.numel(); ++j) values.push_back(std::int64_t(rng() % std::uint64_t(bound)));
          }
        }
        if (s.dtype() == mojo::DType::i32) {
          std::vector<std::int32_t> narrow(values.begin(), values.end());
          b.copy_from_host(narrow.data(), s.nbytes());
        } else {
          b.copy_from_host(values.data(), s.nbytes());
        }
      } else {
        b.fill_bytes(0x3c);  // a small finite value in every float type
      }
      sets[std::size_t(k)].push_back(b.as(s));
    }
  }
  mojo::Stream stream;
  std::vector<mojo::ScalarArg> scalars;
  if (c.op == "linear") scalars.push_back({"activation", mojo::Scalar(c.activation)});
  if (c.op == "gemm") scalars.push_back({"trans_b", mojo::Scalar(c.trans_b)});
  mojo::KernelHandle h = rt.get_kernel(c.op, sets[0], scalars);
  h.launch(sets[0], scalars, stream);  // the first launch on this stream sizes its workspace (plans), before capture
  const int per_graph = std::max(copies, 20);
  mojo::Graph graph = mojo::Graph::capture(stream, [&] {
    for (int i = 0; i < per_graph; ++i) h.launch(sets[std::size_t(i % copies)], scalars, stream);
  });
  graph.launch(stream);  // warm-up
  stream.synchronize();
  mojo::Event start, stop;
  std::vector<double> us;
  for (int rep = 0; rep < (quick ? 3 : 10); ++rep) {
    start.record(stream);
    graph.launch(stream);
    stop.record(stream);
    stop.synchronize();
    us.push_back(mojo::Event::elapsed_ms(start, stop) * 1e3 / per_graph);
  }
  const bool product = c.op == "gemm" || c.op == "linear";
  if (is_attention(c.op)) return {median(us), bytes, attention_flops(op, specs), attention_kv_bytes(op, specs), h.params()};
  return {median(us), bytes, product ? flops(specs) : 0, product ? double(specs[2].nbytes()) : 0, h.params()};
}

}  // namespace

void bench_ops(mojo::Runtime& rt, const Options& options) {
  const double copy_gbs = copy_bandwidth_gbs(options.quick);
  const mojo::DType dtype = mojo::DType::bf16;
  // What a launch costs when it does nothing: a one-element kernel, same method.
  const double floor_us = time_case(rt, {"silu", "x=1x1"}, mojo::DType::f32, options.quick).us;
  fmt::print("\n## Ops at Qwen3-8B shapes ({}; device copy bandwidth measured now: {:.0f} GB/s; "
             "launch floor (1-element silu in a graph): {:.2f} µs)\n\n",
             mojo::dtype_name(dtype), copy_gbs, floor_us);
  fmt::print("| op | shapes | MB moved | µs | GB/s | % of measured copy | % of 3.0 TB/s |\n"
             "|---|---|---:|---:|---:|---:|---:|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const Case& c : qwen3_cases()) {
    Result r = time_case(rt, c, dtype, options.quick);
    const double gbs = r.bytes / (r.us * 1e-6) * 1e-9;
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.0f} | {:.0f}% | {:.0f}% |\n", c.op, c.shapes, r.bytes * 1e-6, r.us, gbs,
               100 * gbs / copy_gbs, 100 * gbs / kNominalCopyGBs);
    rows.push_back({{"op", c.op}, {"dtype", mojo::dtype_name(dtype)}, {"shapes", c.shapes}, {"us", r.us},
                    {"bytes", r.bytes}});
  }
  constexpr double kCublasTflops = 680;  // cuBLAS, bf16 4096^3 on the project's H100
  fmt::print("\n## GEMM (path sm_90a: TMA + wgmma, warp-specialised; sm_80: mma.sync + ldmatrix + cp.async; % of "
             "the {:.0f} TFLOP/s cuBLAS reaches on bf16 4096^3 on an H100; torch_compare.py measures cuBLAS itself)\n\n",
             kCublasTflops);
  fmt::print("| op | dtype | shapes | path | tile | µs | TFLOP/s | % of cuBLAS 4096^3 | weight GB/s (M <= 16) | "
             "% of measured copy |\n|---|---|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const Case& c : gemm_cases()) {
    Result r = time_case(rt, c, c.dtype, options.quick);
    const double tflops = r.flops / (r.us * 1e-6) * 1e-12;
    const mojo::TensorSpec x = mojo::find_op(c.op).specs_from_shapes(c.dtype, mojo::parse_shapes(mojo::find_op(c.op), c.shapes))[1];
    const bool decode = x.numel() / x.dim(x.rank() - 1) <= 16;
    const double weight_gbs = r.weight_bytes / (r.us * 1e-6) * 1e-9;
    std::string shapes = c.shapes;
    if (c.activation != 0) shapes += " activation=silu";
    if (c.trans_b) shapes += " trans_b=1";
    fmt::print("| {} | {} | {} | {} | {}x{} | {:.2f} | {:.1f} | {:.0f}% | {} | {} |\n", c.op, mojo::dtype_name(c.dtype),
               shapes, r.params.get("wgmma") ? "sm_90a" : "sm_80", r.params.get("bm"), r.params.get("bn"), r.us, tflops,
               100 * tflops / kCublasTflops, decode ? fmt::format("{:.0f}", weight_gbs) : "",
               decode ? fmt::format("{:.0f}%", 100 * weight_gbs / copy_gbs) : "");
    rows.push_back({{"op", c.op}, {"dtype", mojo::dtype_name(c.dtype)}, {"shapes", c.shapes}, {"us", r.us},
                    {"bytes", r.bytes}, {"flops", r.flops}, {"activation", c.activation}, {"trans_b", c.trans_b}});
  }
  fmt::print("\n## Attention (bf16, GQA 32/8, head_dim 128, causal; prefill: TFLOP/s of the causal half, "
             "sm_90a: TMA + wgmma; decode: K/V read, split over the keys when the batch leaves SMs idle)\n\n");
  fmt::print("| op | shapes | path | splits | µs | TFLOP/s | K/V GB/s | % of measured copy |\n"
             "|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const Case& c : attention_cases()) {
    Result r = time_case(rt, c, dtype, options.quick);
    const double tflops = r.flops / (r.us * 1e-6) * 1e-12, kv_gbs = r.weight_bytes / (r.us * 1e-6) * 1e-9;
    fmt::print("| {} | {} | {} | {} | {:.2f} | {:.1f} | {:.0f} | {:.0f}% |\n", c.op, c.shapes,
               r.params.get("wgmma") ? "sm_90a" : "sm_80", r.params.get("splits"), r.us, tflops, kv_gbs,
               100 * kv_gbs / copy_gbs);
    rows.push_back({{"op", c.op}, {"dtype", mojo::dtype_name(dtype)}, {"shapes", c.shapes}, {"us", r.us},
                    {"bytes", r.bytes}, {"flops", r.flops}});
  }
  fmt::print("\n## Sampling (f32 logits, vocab 151936) and MoE routing (bf16, 4096 tokens, 128 experts, top 8; "
             "moe_dispatch with x: the gather too)\n\n");
  fmt::print("| op | shapes | MB moved | µs | GB/s | % of measured copy |\n|---|---|---:|---:|---:|---:|\n");
  for (const Case& c : sampling_moe_cases()) {
    Result r = time_case(rt, c, c.dtype, options.quick);
    const double gbs = r.bytes / (r.us * 1e-6) * 1e-9;
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.0f} | {:.0f}% |\n", c.op, c.shapes, r.bytes * 1e-6, r.us, gbs,
               100 * gbs / copy_gbs);
    rows.push_back({{"op", c.op}, {"dtype", mojo::dtype_name(c.dtype)}, {"shapes", c.shapes}, {"us", r.us},
                    {"bytes", r.bytes}});
  }
  fmt::print("\n## Fused linear cross-entropy (bf16; TFLOP/s of its products: 2 N V H forward, 6 N V H backward, "
             "which recomputes the logits; % of the {:.0f} TFLOP/s cuBLAS reaches on bf16 4096^3)\n\n",
             kCublasTflops);
  fmt::print("| op | shapes | slices | µs | TFLOP/s | % of cuBLAS 4096^3 | workspace MB |\n"
             "|---|---|---:|---:|---:|---:|---:|\n");
  for (const Case& c : loss_cases()) {
    Result r = time_case(rt, c, dtype, options.quick);
    const mojo::OpDef& op = mojo::find_op(c.op);
    std::vector<mojo::Tensor> tensors;
    for (const mojo::TensorSpec& s : op.specs_from_shapes(dtype, mojo::parse_shapes(op, c.shapes)))
      tensors.push_back({s, 0});
    const double n = double(tensors[op.name().ends_with("backward") ? 3 : 2].spec.dim(0)),
                 h = double(tensors[op.name().ends_with("backward") ? 3 : 2].spec.dim(1)),
                 v = double(tensors[op.name().ends_with("backward") ? 4 : 3].spec.dim(0));
    const double flops = (op.name().ends_with("backward") ? 6 : 2) * n * v * h,
                 tflops = flops / (r.us * 1e-6) * 1e-12;
    const double workspace_mb = double(op.workspace_bytes(r.params, tensors)) * 1e-6;
    fmt::print("| {} | {} | {} | {:.0f} | {:.1f} | {:.0f}% | {:.0f} |\n", c.op, c.shapes, op.repeats(r.params, tensors),
               r.us, tflops, 100 * tflops / kCublasTflops, workspace_mb);
    rows.push_back({{"op", c.op}, {"dtype", mojo::dtype_name(dtype)}, {"shapes", c.shapes}, {"us", r.us},
                    {"bytes", r.bytes}, {"flops", flops}, {"workspace", workspace_mb * 1e6}});
  }
  if (!options.json.empty()) {
    nlohmann::json doc = {{"device", rt.device().name()}, {"copy_gbs", copy_gbs}, {"launch_floor_us", floor_us},
                          {"ops", rows}};
    std::ofstream(options.json) << doc.dump(2) << "\n";
  }
}

}  // namespace bench
