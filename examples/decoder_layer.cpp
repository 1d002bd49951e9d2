// One Qwen3-8B decoder layer end to end, launched by name through the
// Runtime on the GPU (or, where there is none, the CPU device), over a
// prefill of two sequences and a few decode steps, each step checked against
// the same layer built from the CPU references:
//
//   h = rms_norm(x);  q, k, v = h Wq^T, h Wk^T, h Wv^T;  q, k = rms_norm per head
//   rotary(q, k);  store_kv_cache(k, v);  a = paged attention (prefill, then decode)
//   x += a Wo^T, h = rms_norm(x) (add_rms_norm);  y = x + swiglu(h Wgu^T) Wd^T
//
// Weights are random. `decoder_layer --small` runs a layer of the same
// structure at a fraction of the size (what the tests run on the CPU device).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mojo/check.hpp"
#include "mojo/mojo.hpp"
#include "reference/reference.hpp"

namespace {

using mojo::DType;
using mojo::TensorSpec;
constexpr DType kType = DType::bf16;

struct Config {
  std::int64_t hidden, heads, kv_heads, head_dim, intermediate;
  std::int64_t page = 16;
  std::vector<std::int64_t> prefill;  // new tokens of each sequence in the first step
  int decode_steps = 3;
};
const Config kQwen3_8B{4096, 32, 8, 128, 12288, 16, {9, 4}, 3};
const Config kSmall{256, 8, 2, 64, 512, 16, {21, 6}, 3};

std::vector<std::uint8_t> random_bytes(DType dtype, std::int64_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> magnitude(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = rng() % 2 ? magnitude(rng) : -magnitude(rng);
  return mojo::reference::encode(dtype, v);
}
std::vector<std::uint8_t> ints(DType dtype, const std::vector<std::int64_t>& values) {
  std::vector<std::uint8_t> out(values.size() * mojo::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::i32) {
      const std::int32_t v = std::int32_t(values[i]);
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      std::memcpy(out.data() + i * 8, &values[i], 8);
    }
  }
  return out;
}

// A tensor held twice: on the device, and as the reference's host bytes.
struct Both {
  TensorSpec spec;
  mojo::DeviceBuffer device;
  std::vector<std::uint8_t> host;
  explicit Both(TensorSpec s, std::vector<std::uint8_t> bytes = {})
      : spec(s), device(s.nbytes()), host(bytes.empty() ? std::vector<std::uint8_t>(s.nbytes()) : std::move(bytes)) {
    device.copy_from_host(host.data(), host.size());
  }
  mojo::Tensor t() const { return device.as(spec); }
  mojo::Tensor as(TensorSpec s) const { return device.as(s); }
  void* h() { return host.data(); }
  std::vector<std::uint8_t> read() const {
    std::vector<std::uint8_t> out(spec.nbytes());
    device.copy_to_host(out.data(), out.size());
    return out;
  }
};

}  // namespace

int main(int argc, char** argv) try {
  const bool small = argc > 1 && std::string(argv[1]) == "--small";
  const Config c = small ? kSmall : kQwen3_8B;
  const std::int64_t H = c.hidden, nq = c.heads, nkv = c.kv_heads, D = c.head_dim, I = c.intermediate;
  const std::int64_t batch = std::int64_t(c.prefill.size()), max_pos = 4096;
  const double eps = 1e-6;

  mojo::RuntimeOptions options;
  if (!mojo::device_available() && std::getenv("MOJO_JIT_DEVICE") == nullptr) options.device = "cpu";
  mojo::Runtime rt(options);
  std::printf("device: %s; layer: hidden %lld, heads %lld/%lld x %lld, intermediate %lld\n", rt.device().name().c_str(),
              (long long)H, (long long)nq, (long long)nkv, (long long)D, (long long)I);

  // Weights: linears small (activations stay O(1)), norms near 1; the rotary table as Qwen3's (theta 1e6).
  const float w_lo = 0.2f / std::sqrt(float(H)), w_hi = 2.f / std::sqrt(float(H));
  Both w_in({kType, {H}}, random_bytes(kType, H, 1, 0.8f, 1.2f)),
      w_post({kType, {H}}, random_bytes(kType, H, 2, 0.8f, 1.2f));
  Both q_norm({kType, {D}}, random_bytes(kType, D, 3, 0.8f, 1.2f)),
      k_norm({kType, {D}}, random_bytes(kType, D, 4, 0.8f, 1.2f));
  Both wq({kType, {nq * D, H}}, random_bytes(kType, nq * D * H, 5, w_lo, w_hi));
  Both wk({kType, {nkv * D, H}}, random_bytes(kType, nkv * D * H, 6, w_lo, w_hi));
  Both wv({kType, {nkv * D, H}}, random_bytes(kType, nkv * D * H, 7, w_lo, w_hi));
  Both wo({kType, {H, nq * D}}, random_bytes(kType, H * nq * D, 8, w_lo, w_hi));
  Both w_gate_up({kType, {2 * I, H}}, random_bytes(kType, 2 * I * H, 9, w_lo, w_hi));
  const float d_lo = 0.2f / std::sqrt(float(I)), d_hi = 2.f / std::sqrt(float(I));
  Both w_down({kType, {H, I}}, random_bytes(kType, H * I, 10, d_lo, d_hi));
  std::vector<float> cos_sin(static_cast<std::size_t>(max_pos * D));
  for (std::int64_t p = 0; p < max_pos; ++p)
    for (std::int64_t i = 0; i < D / 2; ++i) {
      const double angle = double(p) * std::pow(1e6, -2.0 * double(i) / double(D));
      cos_sin[std::size_t(p * D + i)] = float(std::cos(angle));
      cos_sin[std::size_t(p * D + D / 2 + i)] = float(std::sin(angle));
    }
  Both rope({DType::f32, {max_pos, D}}, mojo::reference::encode(DType::f32, cos_sin));

  // The paged cache: each sequence's blocks, handed out in reverse order (tables need not be sorted).
  std::vector<std::int64_t> lengths(c.prefill.begin(), c.prefill.end());
  std::int64_t most = 0;
  for (std::int64_t n : c.prefill) most = std::max(most, n + c.decode_steps);
  const std::int64_t max_blocks = (most + c.page - 1) / c.page, pages = batch * max_blocks;
  std::vector<std::int64_t> table(static_cast<std::size_t>(pages));
  for (std::int64_t i = 0; i < pages; ++i) table[std::size_t(i)] = pages - 1 - i;
  const TensorSpec cache_spec(kType, {pages, c.page, nkv, D});
  Both k_cache(cache_spec), v_cache(cache_spec), tables({DType::i32, {batch, max_blocks}}, ints(DType::i32, table));

  std::size_t failures = 0;
  for (int step = 0; step <= c.decode_steps; ++step) {
    const bool prefill = step == 0;
    // This step's tokens: every sequence's prefill, then one token per sequence.
    std::vector<std::int64_t> positions, slots, cu{0}, context;
    std::vector<mojo::reference::AttentionSequence> seqs;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t new_tokens = prefill ? c.prefill[std::size_t(b)] : 1;
      const std::int64_t start = prefill ? 0 : lengths[std::size_t(b)];
      mojo::reference::AttentionSequence seq{std::int64_t(positions.size()), new_tokens, {}};
      for (std::int64_t p = start; p < start + new_tokens; ++p) {
        positions.push_back(p);
        slots.push_back(table[std::size_t(b * max_blocks + p / c.page)] * c.page + p % c.page);
      }
      if (!prefill) ++lengths[std::size_t(b)];
      for (std::int64_t p = 0; p < lengths[std::size_t(b)]; ++p)
        seq.key_rows.push_back(table[std::size_t(b * max_blocks + p / c.page)] * c.page + p % c.page);
      seqs.push_back(seq);
      cu.push_back(cu.back() + new_tokens);
      context.push_back(lengths[std::size_t(b)]);
    }
    const std::int64_t T = std::int64_t(positions.size());
    Both x({kType, {T, H}}, random_bytes(kType, T * H, 100 + std::uint32_t(step), 0.05f, 1.f));
    Both h({kType, {T, H}}), q({kType, {T, nq * D}}), k({kType, {T, nkv * D}}), v({kType, {T, nkv * D}});
    Both qn({kType, {T, nq, D}}), kn({kType, {T, nkv, D}}), attn({kType, {T, nq, D}}), o({kType, {T, H}});
    Both h2({kType, {T, H}}), gate_up({kType, {T, 2 * I}}), act({kType, {T, I}}), y({kType, {T, H}});
    Both pos({DType::i64, {T}}, ints(DType::i64, positions)), slot({DType::i64, {T}}, ints(DType::i64, slots));
    Both cu_q({DType::i32, {batch + 1}}, ints(DType::i32, cu)), lens({DType::i32, {batch}}, ints(DType::i32, context));
    const mojo::Tensor none{};
    const TensorSpec q_rows(kType, {T * nq, D}), k_rows(kType, {T * nkv, D});
    const TensorSpec v_heads(kType, {T, nkv, D}), attn_flat(kType, {T, nq * D});

    // The layer on the device.
    rt.launch("rms_norm", {h.t(), x.t(), w_in.t()}, {{"eps", eps}});
    rt.launch("linear", {q.t(), h.t(), wq.t(), none, none});
    rt.launch("linear", {k.t(), h.t(), wk.t(), none, none});
    rt.launch("linear", {v.t(), h.t(), wv.t(), none, none});
    rt.launch("rms_norm", {qn.as(q_rows), q.as(q_rows), q_norm.t()}, {{"eps", eps}});
    rt.launch("rms_norm", {kn.as(k_rows), k.as(k_rows), k_norm.t()}, {{"eps", eps}});
    rt.launch("rotary_embedding", {qn.t(), kn.t(), pos.t(), rope.t()});
    rt.launch("store_kv_cache", {k_cache.t(), v_cache.t(), kn.t(), v.as(v_heads), slot.t()});
    if (prefill)
      rt.launch("paged_prefill_gqa",
                {attn.t(), qn.t(), k_cache.t(), v_cache.t(), cu_q.t(), tables.t(), lens.t(), none, none});
    else
      rt.launch("paged_decode_gqa", {attn.t(), qn.t(), k_cache.t(), v_cache.t(), tables.t(), lens.t(), none, none});
    rt.launch("linear", {o.t(), attn.as(attn_flat), wo.t(), none, none});
    rt.launch("add_rms_norm", {h2.t(), x.t(), o.t(), w_post.t()}, {{"eps", eps}});
    rt.launch("linear", {gate_up.t(), h2.t(), w_gate_up.t(), none, none});
    rt.launch("swiglu", {act.t(), gate_up.t()});
    rt.launch("linear", {y.t(), act.t(), w_down.t(), none, x.t()});
    rt.device().synchronize();

    // The same layer from the references, rounding to bf16 wherever the device stores.
    namespace ref = mojo::reference;
    ref::rms_norm(kType, x.h(), w_in.h(), h.h(), T, H, eps);
    ref::linear(kType, h.h(), wq.h(), nullptr, nullptr, q.h(), T, nq * D, H, mojo::Act::none);
    ref::linear(kType, h.h(), wk.h(), nullptr, nullptr, k.h(), T, nkv * D, H, mojo::Act::none);
    ref::linear(kType, h.h(), wv.h(), nullptr, nullptr, v.h(), T, nkv * D, H, mojo::Act::none);
    ref::rms_norm(kType, q.h(), q_norm.h(), qn.h(), T * nq, D, eps);
    ref::rms_norm(kType, k.h(), k_norm.h(), kn.h(), T * nkv, D, eps);
    ref::rotary_embedding(kType, qn.h(), kn.h(), positions.data(), cos_sin.data(), T, nq, nkv, D, D, max_pos, true);
    ref::store_kv_cache(kType, kn.h(), v.h(), slots.data(), k_cache.h(), v_cache.h(), T, pages * c.page, nkv * D);
    std::vector<float> attn_f(static_cast<std::size_t>(T * nq * D));
    const ref::AttentionShape shape{T, nq, nkv, D, 1.0 / std::sqrt(double(D)), 0.0, true, -1};
    const std::vector<float> qf = ref::decode(kType, qn.host), kf = ref::decode(kType, k_cache.host),
                             vf = ref::decode(kType, v_cache.host);
    ref::attention(shape, seqs, qf.data(), kf.data(), vf.data(), nullptr, attn_f.data(), nullptr);
    attn.host = ref::encode(kType, attn_f);
    ref::linear(kType, attn.h(), wo.h(), nullptr, nullptr, o.h(), T, H, nq * D, mojo::Act::none);
    ref::add_rms_norm(kType, x.h(), o.h(), w_post.h(), h2.h(), T, H, eps);
    ref::linear(kType, h2.h(), w_gate_up.h(), nullptr, nullptr, gate_up.h(), T, 2 * I, H, mojo::Act::none);
    ref::activation(kType, mojo::Act::silu, true, gate_up.h(), act.h(), T * I, I);
    ref::linear(kType, act.h(), w_down.h(), nullptr, x.h(), y.h(), T, H, I, mojo::Act::none);

    // Each stage rounds to bf16, and a rounding the device takes the other way carries on through the
    // layer: compare with a layer-sized tolerance, and the attention output on its own.
    const mojo::Tolerance layer{5e-2, 2e-2};
    const std::size_t bad_attn = mojo::mismatches(kType, attn.read(), attn.host, layer);
    const std::size_t bad = mojo::mismatches(kType, y.read(), y.host, layer);
    std::printf("step %d (%s, %lld tokens): attention %zu, output %zu of %lld elements outside rtol %.0e + atol %.0e\n",
                step, prefill ? "prefill" : "decode", (long long)T, bad_attn, bad, (long long)(T * H), layer.rtol,
                layer.atol);
    failures += bad + bad_attn;
  }
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "decoder_layer: %s\n", e.what());
  return 2;
}
