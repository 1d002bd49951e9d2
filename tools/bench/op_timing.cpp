// Timing one op on random inputs, for every ops table and `mojo-bench --op`.
//
// Inputs: every tensor the op reads holds the op's own random_data (one seed),
// so index tensors are in range whatever the op names them, and float
// operands are random (constant operands draw less power and let the clock
// run higher than real data does). One exception, seeded: attention's
// lengths and block tables are full length (every sequence as long as its
// table allows), so that the FLOPs and K/V bytes are those of the shapes.
//
// Traffic: each tensor read once and each written once (an in-out tensor
// both), except what an op touches only in part, counted from the data: the
// embedding and cos/sin rows gathered, the KV-cache slots written, the
// expert_out rows combined, the experts' weights a MoE product reads, the
// groups' rows and weights of group_gemm, the keys each attention sequence
// sees, and reject_sample's rows (read back after the run: one target row per
// request, and its draft row where a draft was rejected).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <future>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "bench.hpp"
#include "ops/attention.hpp"
#include "reference/reference.hpp"

namespace bench {

std::vector<mojo::ScalarArg> OpCase::scalar_args() const {
  std::vector<mojo::ScalarArg> out;
  for (const auto& [name, value] : params) out.push_back({name, mojo::Scalar(value)});
  return out;
}

std::string OpCase::params_text() const {
  std::string out;
  for (const auto& [name, value] : params) out += fmt::format("{}{}={:g}", out.empty() ? "" : " ", name, value);
  return out;
}

std::string OpCase::label() const {
  std::string out = shapes;
  if (const std::string p = params_text(); !p.empty()) out += " " + p;
  for (const auto& [name, value] : fills) out += fmt::format(" {}:all {:g}", name, value);
  return out;
}

Repetitions repetitions(const Options& options, bool cpu_device) {
  if (options.smoke) return {2, 1, 0, 10};
  if (cpu_device) return {options.quick ? 2 : 3, 1, 0, 30};
  return {options.quick ? 3 : 10, 20, 256.0 * (1 << 20), 10};
}

namespace {

using mojo::DType;
using mojo::OpDef;
using mojo::TensorSpec;
using Bytes = std::vector<std::uint8_t>;

bool is_index(DType d) { return d == DType::i32 || d == DType::i64; }
bool is_attention(std::string_view op) { return op == "sdpa" || op == "paged_prefill_gqa" || op == "paged_decode_gqa"; }

// The position of the op's tensor `name`, or -1 when the op has none.
std::int64_t slot(const OpDef& op, std::string_view name) {
  const auto args = op.tensor_args();
  for (std::size_t i = 0; i < args.size(); ++i)
    if (args[i].name == name) return std::int64_t(i);
  return -1;
}
bool present(const std::vector<TensorSpec>& specs, std::int64_t i) {
  return i >= 0 && std::size_t(i) < specs.size() && specs[std::size_t(i)].rank() != 0;
}
// The op's tensor `name`, which it must have (the callers are per-op code).
const TensorSpec& named(const OpDef& op, const std::vector<TensorSpec>& specs, std::string_view name) {
  const std::int64_t i = slot(op, name);
  if (i < 0) throw mojo::Error(fmt::format("bench: {} has no tensor {}", op.name(), name));
  return specs[std::size_t(i)];
}

std::vector<std::int64_t> decode_indices(const TensorSpec& s, const Bytes& bytes) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(s.numel()));
  if (bytes.size() < s.nbytes()) return {};
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (s.dtype() == DType::i32) {
      std::int32_t x = 0;
      std::memcpy(&x, bytes.data() + 4 * j, 4);
      v[j] = x;
    } else {
      std::memcpy(&v[j], bytes.data() + 8 * j, 8);
    }
  }
  return v;
}
Bytes encode_indices(DType d, const std::vector<std::int64_t>& v) {
  Bytes out(v.size() * mojo::dtype_size(d));
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (d == DType::i32) {
      const std::int32_t x = std::int32_t(v[j]);
      std::memcpy(out.data() + 4 * j, &x, 4);
    } else {
      std::memcpy(out.data() + 8 * j, &v[j], 8);
    }
  }
  return out;
}
// Index values of the op's tensor `name` (empty when absent).
std::vector<std::int64_t> values_of(const OpDef& op, const std::vector<TensorSpec>& specs,
                                    const std::vector<Bytes>& host, std::string_view name) {
  const std::int64_t i = slot(op, name);
  if (!present(specs, i)) return {};
  return decode_indices(specs[std::size_t(i)], host[std::size_t(i)]);
}
std::int64_t distinct_valid(const std::vector<std::int64_t>& v) {
  std::set<std::int64_t> seen;
  for (std::int64_t x : v)
    if (x >= 0) seen.insert(x);
  return std::int64_t(seen.size());
}

// Full-length attention: query tokens split evenly over the sequences (the
// last takes the remainder), every context the whole block table, distinct
// blocks in random order. nullopt: not one of these tensors.
std::optional<std::vector<std::int64_t>> attention_indices(const OpDef& op, const std::vector<TensorSpec>& specs,
                                                           std::size_t i, std::uint32_t seed) {
  const std::string_view name = op.tensor_args()[i].name;
  const TensorSpec& s = specs[i];
  auto split = [&](std::int64_t total) {
    const std::int64_t batch = std::max<std::int64_t>(s.dim(0) - 1, 1);
    std::vector<std::int64_t> v(static_cast<std::size_t>(s.dim(0)));
    for (std::int64_t b = 0; b < s.dim(0); ++b) v[std::size_t(b)] = b * (total / batch);
    if (!v.empty()) v.back() = total;
    return v;
  };
  if (name == "cu_seqlens_q") return split(specs[1].dim(0));
  if (name == "cu_seqlens_k") return split(specs[2].dim(0));
  const std::int64_t table_slot = slot(op, "block_tables");
  if (table_slot < 0) return std::nullopt;
  const TensorSpec& table = specs[std::size_t(table_slot)];
  const std::int64_t blocks = specs[2].dim(0), page = specs[2].dim(1);  // k_cache [blocks, page, kv_heads, D]
  if (name == "context_lens") return std::vector<std::int64_t>(std::size_t(s.numel()), table.dim(1) * page);
  if (name == "block_tables") {
    std::vector<std::int64_t> order(static_cast<std::size_t>(blocks));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::int64_t> v(static_cast<std::size_t>(s.numel()));
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = order[j % order.size()];  // distinct while the cache has room
    return v;
  }
  return std::nullopt;
}

// Random contents for tensor i (see the file comment).
Bytes bench_data(const OpDef& op, const std::vector<TensorSpec>& specs, mojo::ScalarList scalars, std::size_t i,
                 std::uint32_t seed) {
  const TensorSpec& s = specs[i];
  if (is_attention(op.name()) && is_index(s.dtype()))
    if (auto v = attention_indices(op, specs, i, seed)) return encode_indices(s.dtype(), *v);
  const mojo::OpCheck& check = mojo::find_check(op.name());
  const std::string_view name = op.tensor_args()[i].name;
  // A paged cache: random in every slot, which these full-length contexts all read (the check's own cache
  // holds NaN where its shorter random contexts do not reach).
  Bytes d = name == "k_cache" || name == "v_cache" ? check.OpCheck::random_data(i, specs, scalars, seed)
                                                   : check.random_data(i, specs, scalars, seed);
  if (d.size() != s.nbytes())
    throw mojo::Error(fmt::format("bench: {}'s random_data gave {} bytes for {} ({}); expected {}", op.name(), d.size(),
                                  op.tensor_args()[i].name, s.str(), s.nbytes()));
  return d;
}

// Host data of every tensor the op reads (outputs: empty), made in parallel; a tensor named in `fills` holds
// that one value.
std::vector<Bytes> input_data(const OpDef& op, const std::vector<TensorSpec>& specs, mojo::ScalarList scalars,
                              std::uint32_t seed, const std::vector<std::pair<std::string, double>>& fills) {
  for (const auto& f : fills)
    if (std::none_of(op.tensor_args().begin(), op.tensor_args().end(), [&](const auto& t) { return t.name == f.first; }))
      throw mojo::InvalidArgumentError(fmt::format("--fill {}: {} has no tensor of that name", f.first, op.name()));
  std::vector<std::future<Bytes>> pending(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].rank() == 0 || op.tensor_args()[i].role == "out") continue;
    const auto fill = std::find_if(fills.begin(), fills.end(),
                                   [&](const auto& f) { return f.first == op.tensor_args()[i].name; });
    if (fill != fills.end()) {
      const TensorSpec& s = specs[i];
      const auto n = std::size_t(s.numel());
      const double v = fill->second;
      pending[i] = std::async(std::launch::deferred, [s, n, v] {
        return is_index(s.dtype()) ? encode_indices(s.dtype(), std::vector<std::int64_t>(n, std::int64_t(v)))
                                   : mojo::reference::encode(s.dtype(), std::vector<float>(n, float(v)));
      });
      continue;
    }
    pending[i] = std::async(std::launch::async,
                            [&op, &specs, scalars, i, seed] { return bench_data(op, specs, scalars, i, seed); });
  }
  std::vector<Bytes> host(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (pending[i].valid()) host[i] = pending[i].get();
  return host;
}

double nbytes(const TensorSpec& s) { return double(s.nbytes()); }
double row_bytes(const TensorSpec& s) {  // one index of the first dim
  return s.rank() == 0 || s.dim(0) == 0 ? 0 : nbytes(s) / double(s.dim(0));
}

// Attention: query-key pairs (causal: aligned at the sequences' ends; a
// window keeps window + 1 keys) and the K/V bytes the sequences read.
void attention_traffic(const OpDef& op, const std::vector<TensorSpec>& specs, const std::vector<Bytes>& host,
                       mojo::ScalarList scalars, Traffic& t, std::vector<double>& per_tensor) {
  const TensorSpec& q = specs[1];
  const std::int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2);
  std::vector<std::int64_t> cu_q = values_of(op, specs, host, "cu_seqlens_q"), k_lens;
  const bool sdpa = op.name() == "sdpa";
  if (sdpa) {
    if (cu_q.empty()) cu_q = {0, tokens};
    std::vector<std::int64_t> cu_k = values_of(op, specs, host, "cu_seqlens_k");
    if (cu_k.empty()) cu_k = present(specs, slot(op, "cu_seqlens_q")) ? cu_q : std::vector<std::int64_t>{0, specs[2].dim(0)};
    for (std::size_t b = 0; b + 1 < cu_k.size(); ++b) k_lens.push_back(cu_k[b + 1] - cu_k[b]);
  } else {
    k_lens = values_of(op, specs, host, "context_lens");
    if (cu_q.empty()) {
      const std::int64_t batch = std::max<std::int64_t>(std::int64_t(k_lens.size()), 1);
      for (std::int64_t b = 0; b <= batch; ++b) cu_q.push_back(b * (tokens / batch));
    }
  }
  const bool causal = sdpa ? op.scalar(scalars, "causal") != 0 : true;
  const double window = op.scalar(scalars, "window");
  double pairs = 0, kv_tokens = 0;
  for (std::size_t b = 0; b + 1 < cu_q.size() && b < k_lens.size(); ++b) {
    kv_tokens += double(k_lens[b]);
    pairs += mojo::attention::query_key_pairs(cu_q[b + 1] - cu_q[b], k_lens[b], causal, window);
  }
  t.flops = 4.0 * pairs * double(heads * head_dim);
  // K and V: [kv_tokens, kv_heads, D] (sdpa) or [blocks, page, kv_heads, D] (paged): bytes per token.
  const TensorSpec& k = specs[2];
  const double per_token = double(k.dim(k.rank() - 2) * k.dim(k.rank() - 1) * std::int64_t(mojo::dtype_size(k.dtype())));
  per_tensor[2] = per_tensor[3] = kv_tokens * per_token;
  t.weight_bytes = 2 * kv_tokens * per_token;
}

// See the file comment. `host`: the data of the tensors the op reads. The op's ideal cost for its shapes
// (OpDef::ideal_cost), refined where the data says which rows, groups, experts or keys are touched.
Traffic count_traffic(const OpDef& op, const std::vector<TensorSpec>& specs, const std::vector<Bytes>& host,
                      mojo::ScalarList scalars) {
  std::vector<mojo::Tensor> tensors;
  for (const TensorSpec& s : specs) tensors.push_back({s, 0});
  const mojo::IdealCost ideal = op.ideal_cost(tensors, scalars);
  Traffic t{ideal.bytes, ideal.flops, ideal.weight_bytes, ""};
  std::vector<double> per_tensor(specs.size(), 0);
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (specs[i].rank() != 0) per_tensor[i] = (op.tensor_args()[i].role == "inout" ? 2 : 1) * nbytes(specs[i]);
  auto set = [&](std::string_view name, double bytes) {
    if (const std::int64_t i = slot(op, name); present(specs, i)) per_tensor[std::size_t(i)] = bytes;
  };
  const std::string_view name = op.name();
  if (name == "embedding") {
    const TensorSpec& w = named(op, specs, "weight");
    set("weight", double(distinct_valid(values_of(op, specs, host, "ids"))) * row_bytes(w));
    t.note = "weight: distinct rows gathered";
  } else if (name == "rotary_embedding") {
    const TensorSpec& cache = named(op, specs, "cos_sin_cache");
    set("cos_sin_cache", double(distinct_valid(values_of(op, specs, host, "positions"))) * row_bytes(cache));
    t.note = "cos_sin_cache: distinct rows gathered";
  } else if (name == "store_kv_cache") {
    const std::int64_t slots = distinct_valid(values_of(op, specs, host, "slot_mapping"));
    const TensorSpec& cache = named(op, specs, "k_cache");  // [blocks, page, kv_heads, D]: a slot is one [kv_heads, D]
    const double slot_bytes = cache.dim(1) == 0 ? 0 : row_bytes(cache) / double(cache.dim(1));
    set("k_cache", double(slots) * slot_bytes);
    set("v_cache", double(slots) * slot_bytes);
    t.note = "caches: the slots written";
  } else if (name == "group_gemm") {
    const TensorSpec &x = named(op, specs, "x"), &w = named(op, specs, "weight"), &out = named(op, specs, "out");
    const std::vector<std::int64_t> offsets = values_of(op, specs, host, "offsets");
    std::int64_t rows = 0, groups = 0;
    for (std::size_t g = 0; g + 1 < offsets.size(); ++g)
      if (const std::int64_t n = offsets[g + 1] - offsets[g]; n > 0) rows += n, ++groups;
    const double share = x.dim(0) == 0 ? 0 : double(rows) / double(x.dim(0));
    set("x", share * nbytes(x));
    set("out", share * nbytes(out));
    set("weight", double(groups) * row_bytes(w));
    t.flops = 2.0 * double(rows) * double(w.dim(1)) * double(w.dim(2));
    t.weight_bytes = double(groups) * row_bytes(w);
    t.note = "rows and weights of the non-empty groups";
  } else if (name == "moe_mlp") {
    const TensorSpec &w13 = named(op, specs, "w13"), &w2 = named(op, specs, "w2");
    const std::vector<std::int64_t> ids = values_of(op, specs, host, "ids");
    const double routed = double(std::count_if(ids.begin(), ids.end(), [](std::int64_t e) { return e >= 0; }));
    const double experts = double(distinct_valid(ids));
    set("w13", experts * row_bytes(w13));
    set("w2", experts * row_bytes(w2));
    t.flops = 2.0 * routed * (double(w13.dim(1) * w13.dim(2)) + double(w2.dim(1) * w2.dim(2)));
    t.weight_bytes = experts * (row_bytes(w13) + row_bytes(w2));
    t.note = "weights of the experts routed to; not the workspace's rows";
  } else if (name == "moe_combine") {
    const TensorSpec& rows = named(op, specs, "expert_out");
    set("expert_out", double(distinct_valid(values_of(op, specs, host, "positions"))) * row_bytes(rows));
    t.note = "expert_out: the rows combined";
  } else if (is_attention(name)) {
    attention_traffic(op, specs, host, scalars, t, per_tensor);
    t.note = "K/V: the keys each sequence sees";
  } else if (name == "reject_sample") {
    // Until the run is read back: one target row and one draft row per request (an upper bound).
    const TensorSpec &target = named(op, specs, "target_probs"), &draft = named(op, specs, "draft_probs");
    const double batch = double(target.dim(0)), vocab_bytes = double(target.dim(2)) * double(mojo::dtype_size(target.dtype()));
    set("target_probs", batch * vocab_bytes);
    set("draft_probs", draft.dim(1) > 0 ? batch * vocab_bytes : 0);
  } else {
    return t;  // nothing the data changes
  }
  t.bytes = std::accumulate(per_tensor.begin(), per_tensor.end(), 0.0);
  return t;
}

// reject_sample after its launches: each buffer set's `accepted` (of its last
// launch) says which rows the kernel read.
void recount_reject_sample(const OpDef& op, const std::vector<TensorSpec>& specs,
                           const std::vector<std::vector<mojo::Tensor>>& sets, mojo::StreamHandle stream, Traffic& t) {
  const std::int64_t accepted_slot = slot(op, "accepted");
  const TensorSpec &target = named(op, specs, "target_probs"), &accepted = specs[std::size_t(accepted_slot)];
  const std::int64_t batch = target.dim(0), spec = target.dim(1) - 1;
  const double dsize = double(mojo::dtype_size(target.dtype())), vocab_bytes = double(target.dim(2)) * dsize;
  double rows = 0, pairs = 0;
  for (const std::vector<mojo::Tensor>& set : sets) {
    std::vector<std::int64_t> j(static_cast<std::size_t>(batch));
    mojo::copy_to_host(j.data(), set[std::size_t(accepted_slot)].data, accepted.nbytes(), stream);
    for (std::int64_t a : j) {
      rows += a < spec ? 2 : 1;                          // the row drawn from, and the draft row at a rejection
      pairs += double(std::min<std::int64_t>(a + 1, spec));  // draft and target probability of each draft checked
    }
  }
  rows /= double(sets.size());
  pairs /= double(sets.size());
  double small = 0;  // out, accepted, draft_tokens, seed, offset (in and out)
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string_view n = op.tensor_args()[i].name;
    if (n != "target_probs" && n != "draft_probs" && specs[i].rank() != 0)
      small += (op.tensor_args()[i].role == "inout" ? 2 : 1) * nbytes(specs[i]);
  }
  t.bytes = small + rows * vocab_bytes + 2 * pairs * dsize;
  t.note = fmt::format("{:.2f} vocab rows read per request (read back)", rows / double(std::max<std::int64_t>(batch, 1)));
}

}  // namespace

OpTiming time_op(mojo::Runtime& rt, const OpCase& c, const Repetitions& reps) {
  const OpDef& op = mojo::find_op(c.op);
  const std::vector<mojo::ScalarArg> scalars = c.scalar_args();
  const std::vector<TensorSpec> specs = op.specs_from_shapes(c.dtype, mojo::parse_shapes(op, c.shapes), scalars);
  op.check_scalar_names(scalars);
  use_device(rt);

  OpTiming result;
  std::vector<Bytes> host = input_data(op, specs, scalars, 7, c.fills);
  result.traffic = count_traffic(op, specs, host, scalars);
  const double bytes = std::max(result.traffic.bytes, 1.0);
  const int copies = int(std::clamp<double>(std::ceil(reps.stream_bytes / bytes), 1, 64));
  constexpr std::size_t kShareAbove = 16u << 20;

  // One set of tensors per copy, copied on the device from the first; a big
  // table the op only partly touches (more than kShareAbove and more than
  // the whole traffic) is shared.
  mojo::Stream stream;
  std::vector<mojo::DeviceBuffer> owned;
  std::vector<std::vector<mojo::Tensor>> sets(static_cast<std::size_t>(copies));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    if (s.rank() == 0) {  // an optional tensor left out
      for (auto& set : sets) set.push_back({s, 0});
      continue;
    }
    mojo::DeviceBuffer& first = owned.emplace_back(std::max<std::size_t>(s.nbytes(), 1));
    if (host[i].empty()) first.fill_bytes(0);
    else first.copy_from_host(host[i].data(), host[i].size());
    sets[0].push_back(first.as(s));
    const mojo::DevicePtr source = first.ptr();
    const bool share = s.nbytes() > kShareAbove && double(s.nbytes()) > bytes;
    for (std::size_t k = 1; k < sets.size(); ++k) {
      if (share) {
        sets[k].push_back(sets[0][i]);
        continue;
      }
      mojo::DeviceBuffer& b = owned.emplace_back(std::max<std::size_t>(s.nbytes(), 1));
      mojo::copy_async(b.ptr(), source, s.nbytes(), stream);
      sets[k].push_back(b.as(s));
    }
    host[i] = Bytes();  // on the device now
  }
  stream.synchronize();

  mojo::KernelHandle h = rt.get_kernel(c.op, sets[0], scalars);  // compiles (or loads) outside the timing
  mojo::Event start, stop;
  // The first launch on this stream sizes its workspace (plans), before any capture; its time sizes the batches.
  start.record(stream);
  h.launch(sets[0], scalars, stream);
  stop.record(stream);
  stop.synchronize();
  const double first_s = std::max(double(mojo::Event::elapsed_ms(start, stop)) * 1e-3, 1e-7);
  int batches = reps.batches, per_batch = std::max(copies, reps.min_launches);
  if (first_s * per_batch * (batches + 1) > reps.budget_s) {  // a slow op: fewer launches, at least one batch of one
    per_batch = std::max(1, std::min(per_batch, int(reps.budget_s / (first_s * (batches + 1)))));
    if (first_s * per_batch * (batches + 1) > reps.budget_s)
      batches = std::max(1, std::min(batches, int(reps.budget_s / first_s) - 1));
  }
  auto launch_all = [&] {
    for (int i = 0; i < per_batch; ++i) h.launch(sets[std::size_t(i) % sets.size()], scalars, stream);
  };
  std::optional<mojo::Graph> graph;
  try {
    graph.emplace(mojo::Graph::capture(stream, launch_all));
  } catch (const mojo::Error&) {
    // Launched one by one instead (the time then includes the host's share of each launch).
  }
  auto run_batch = [&] {
    if (graph) graph->launch(stream);
    else launch_all();
  };
  run_batch();  // warm-up
  stream.synchronize();
  for (int rep = 0; rep < batches; ++rep) {
    start.record(stream);
    run_batch();
    stop.record(stream);
    stop.synchronize();
    result.batch_us.push_back(double(mojo::Event::elapsed_ms(start, stop)) * 1e3 / per_batch);
  }
  stream.synchronize();
  result.us = median(result.batch_us);
  if (!(result.us > 0) || !std::isfinite(result.us))
    throw mojo::Error(fmt::format("bench: {} {} timed {} µs per launch", c.op, c.label(), result.us));
  if (c.op == "reject_sample") recount_reject_sample(op, specs, sets, stream, result.traffic);
  result.launches_per_batch = per_batch;
  result.copies = copies;
  result.graph = graph.has_value();
  result.params = h.params();
  result.kernel = h.kernel_name();
  result.plan_kernels = op.plan(h.params()).size();
  result.workspace = op.workspace_bytes(h.params(), sets[0]);
  result.repeats = op.repeats(h.params(), sets[0]);
  return result;
}

Roofline roofline(const OpCase& c, const OpTiming& t, double copy_gbs) {
  Roofline r;
  const double s = t.us * 1e-6;
  r.copy_gbs = copy_gbs;
  r.gbs = t.traffic.bytes / s * 1e-9;
  r.tflops = t.traffic.flops / s * 1e-12;
  const bool tf32 = std::any_of(c.params.begin(), c.params.end(),
                                [](const auto& p) { return p.first == "tf32" && p.second != 0; });
  r.peak_tflops = c.dtype == mojo::DType::f32 ? (tf32 ? kNominalTf32Tflops : kNominalF32Tflops) : kNominalTensorTflops;
  const double memory_s = t.traffic.bytes / (copy_gbs * 1e9), compute_s = t.traffic.flops / (r.peak_tflops * 1e12);
  r.bound = compute_s > memory_s ? "compute" : "memory";
  r.fraction = std::max(memory_s, compute_s) / s;
  return r;
}

}  // namespace bench
