// Every op on the GPU against its CPU reference (include/mojo/reference.hpp),
// compiled by each compiler of the build: random inputs that are never zero,
// odd and realistic shapes, outputs poisoned first (an unwritten element is
// NaN and fails), guard bytes after every tensor, inputs checked unchanged,
// in-place tensors checked updated. Tolerances: gpu_util.hpp. Everything here
// skips on a machine with no GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <numeric>

#include "gpu_util.hpp"
#include "mojo/error.hpp"

using namespace mojo;
using test::GpuTensor;

namespace {

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

std::vector<std::uint8_t> random_tensor(DType dtype, std::int64_t n, std::uint32_t seed, float lo = 0.05f,
                                        float hi = 2.f) {
  return reference::encode(dtype, test::random_values(std::size_t(n), seed, lo, hi));
}

struct GpuOps : test::GpuTest, ::testing::WithParamInterface<std::string> {
  std::string compiler() const override { return GetParam(); }
  void sync() { rt->device().synchronize(); }
};

struct Rows {
  std::int64_t rows, cols;
};
std::string str(Rows s) { return fmt::format("[{}, {}]", s.rows, s.cols); }

}  // namespace

TEST_P(GpuOps, AddRmsNormUpdatesResidualInPlace) {
  for (DType d : kFloatTypes)
    for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{5, 4097}, Rows{4, 4096}, Rows{2, 262148}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d), str(s)));
      const std::int64_t n = s.rows * s.cols;
      const TensorSpec x(d, {s.rows, s.cols}), w(d, {s.cols});
      const auto xh = random_tensor(d, n, 1), rh = random_tensor(d, n, 2), wh = random_tensor(d, s.cols, 3);
      GpuTensor out(x), residual(x, rh), xin(x, xh), weight(w, wh);
      rt->launch("add_rms_norm", {out, residual, xin, weight}, {{"eps", 1e-5f}});
      sync();
      std::vector<std::uint8_t> want_out(x.nbytes()), want_residual = rh;
      reference::add_rms_norm(d, want_residual.data(), xh.data(), wh.data(), want_out.data(), s.rows, s.cols, 1e-5);
      test::expect_close(d, residual.read(), want_residual, "residual");
      test::expect_close(d, out.read(), want_out, "out");
      EXPECT_EQ(xin.read(), xh) << "x is read only";
      EXPECT_EQ(weight.read(), wh) << "weight is read only";
    }
}

TEST_P(GpuOps, LayerNormWithAndWithoutMeanAndRstd) {
  for (DType d : kFloatTypes)
    for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{2, 4097}, Rows{4, 4096}, Rows{1, 151936}})
      for (bool stats : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} stats={}", dtype_name(d), str(s), stats));
        const std::int64_t n = s.rows * s.cols;
        const TensorSpec x(d, {s.rows, s.cols}), v(d, {s.cols}), st(DType::f32, {s.rows});
        const auto xh = random_tensor(d, n, 4), wh = random_tensor(d, s.cols, 5), bh = random_tensor(d, s.cols, 6);
        GpuTensor out(x), xin(x, xh), weight(v, wh), bias(v, bh), mean(st), rstd(st);
        const Tensor absent{TensorSpec(), 0};
        rt->launch("layer_norm", {out, stats ? mean.tensor() : absent, stats ? rstd.tensor() : absent, xin, weight, bias},
                   {{"eps", 1e-5f}});
        sync();
        std::vector<std::uint8_t> want(x.nbytes());
        std::vector<float> want_mean(std::size_t(s.rows)), want_rstd(std::size_t(s.rows));
        reference::layer_norm(d, xh.data(), wh.data(), bh.data(), want.data(), want_mean.data(), want_rstd.data(),
                              s.rows, s.cols, 1e-5);
        test::expect_close(d, out.read(), want, "out");
        if (stats) {
          test::expect_close(DType::f32, mean.read(), reference::encode(DType::f32, want_mean), "mean");
          test::expect_close(DType::f32, rstd.read(), reference::encode(DType::f32, want_rstd), "rstd");
        } else {
          EXPECT_EQ(mean.read(), std::vector<std::uint8_t>(st.nbytes(), 0xff)) << "absent mean: nothing written";
        }
        EXPECT_EQ(xin.read(), xh);
      }
}

TEST_P(GpuOps, LayerNormBackwardIsCorrectAndDeterministic) {
  for (DType d : kFloatTypes)
    for (Rows s : {Rows{1, 2}, Rows{3, 31}, Rows{7, 4097}, Rows{64, 4096}, Rows{1000, 64}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d), str(s)));
      const std::int64_t n = s.rows * s.cols;
      const TensorSpec x(d, {s.rows, s.cols}), v(d, {s.cols}), st(DType::f32, {s.rows});
      const auto xh = random_tensor(d, n, 7), gh = random_tensor(d, n, 8), wh = random_tensor(d, s.cols, 9);
      // mean and rstd as the forward pass made them.
      std::vector<std::uint8_t> y(x.nbytes());
      const auto zero_bias = reference::encode(d, std::vector<float>(std::size_t(s.cols), 0.f));
      std::vector<float> mean_h(std::size_t(s.rows)), rstd_h(std::size_t(s.rows));
      reference::layer_norm(d, xh.data(), wh.data(), zero_bias.data(), y.data(), mean_h.data(), rstd_h.data(), s.rows,
                            s.cols, 1e-5);
      const auto mean_bytes = reference::encode(DType::f32, mean_h), rstd_bytes = reference::encode(DType::f32, rstd_h);
      GpuTensor grad_out(x, gh), xin(x, xh), weight(v, wh), mean(st, mean_bytes), rstd(st, rstd_bytes);
      std::vector<std::uint8_t> first_weight_grad;
      for (int run = 0; run < 2; ++run) {
        GpuTensor grad_x(x), grad_weight(v), grad_bias(v);
        rt->launch("layer_norm_backward", {grad_x, grad_weight, grad_bias, grad_out, xin, weight, mean, rstd});
        sync();
        std::vector<std::uint8_t> want_x(x.nbytes()), want_w(v.nbytes()), want_b(v.nbytes());
        reference::layer_norm_backward(d, gh.data(), xh.data(), wh.data(), mean_h.data(), rstd_h.data(), want_x.data(),
                                       want_w.data(), want_b.data(), s.rows, s.cols);
        // grad_x = rstd (g w - mean(g w) - xhat mean(g w xhat)) cancels terms as large as rstd |g w|, so
        // fp32 keeps digits relative to those, not to grad_x (two elements a row cancel to 1e-3 of them).
        double terms = 0, out_scale = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          terms = std::max(terms, double(rstd_h[std::size_t(i / s.cols)]) * std::abs(reference::load(d, gh.data(), std::size_t(i)) *
                                                                      reference::load(d, wh.data(), std::size_t(i % s.cols))));
          out_scale = std::max(out_scale, double(std::abs(reference::load(d, want_x.data(), std::size_t(i)))));
        }
        test::Tolerance cancel = test::tolerance(d);
        cancel.atol *= std::max(1.0, terms / out_scale);
        test::expect_close(d, grad_x.read(), want_x, "grad_x", cancel);
        // Column sums over `rows` products: fp32 rounding grows like sqrt(rows).
        test::Tolerance sums = test::tolerance(d);
        sums.atol *= std::sqrt(double(s.rows));
        test::expect_close(d, grad_weight.read(), want_w, "grad_weight", sums);
        test::expect_close(d, grad_bias.read(), want_b, "grad_bias", sums);
        if (run == 0) first_weight_grad = grad_weight.read();
        else EXPECT_EQ(grad_weight.read(), first_weight_grad) << "grad_weight differs between two runs";
      }
      EXPECT_EQ(mean.read(), mean_bytes);
    }
}

TEST_P(GpuOps, SoftmaxAndLogSoftmax) {
  for (const char* op : {"softmax", "log_softmax"})
    for (DType d : kFloatTypes)
      for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{2, 4097}, Rows{2, 151936}, Rows{1, 262148}}) {
        SCOPED_TRACE(fmt::format("{} {} {}", op, dtype_name(d), str(s)));
        const TensorSpec x(d, {s.rows, s.cols});
        const auto xh = random_tensor(d, s.rows * s.cols, 10, 0.2f, 8.f);
        GpuTensor out(x), xin(x, xh);
        rt->launch(op, {out, xin});
        sync();
        std::vector<std::uint8_t> want(x.nbytes());
        reference::softmax(d, xh.data(), want.data(), s.rows, s.cols, std::string_view(op) == "log_softmax");
        test::expect_close(d, out.read(), want, "out");
        EXPECT_EQ(xin.read(), xh);
      }
}

TEST_P(GpuOps, SoftmaxOfMaskedRows) {
  // -inf entries (an attention or vocabulary mask) get probability 0 (log: -inf).
  for (const char* op : {"softmax", "log_softmax"})
    for (std::int64_t cols : {31, 4097, 262148}) {
      SCOPED_TRACE(fmt::format("{} cols {}", op, cols));
      auto values = test::random_values(std::size_t(2 * cols), 11, 0.2f, 8.f);
      for (std::size_t i = 0; i < values.size(); i += 3) values[i] = -INFINITY;
      const TensorSpec x(DType::f32, {2, cols});
      const auto xh = reference::encode(DType::f32, values);
      GpuTensor out(x), xin(x, xh);
      rt->launch(op, {out, xin});
      sync();
      std::vector<std::uint8_t> want(x.nbytes());
      reference::softmax(DType::f32, xh.data(), want.data(), 2, cols, std::string_view(op) == "log_softmax");
      test::expect_close(DType::f32, out.read(), want, "out");
    }
}

TEST_P(GpuOps, SoftmaxBackward) {
  for (DType d : kFloatTypes)
    for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{2, 4097}, Rows{2, 151936}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d), str(s)));
      const std::int64_t n = s.rows * s.cols;
      const TensorSpec x(d, {s.rows, s.cols});
      std::vector<std::uint8_t> out_h(x.nbytes());
      reference::softmax(d, random_tensor(d, n, 12, 0.2f, 8.f).data(), out_h.data(), s.rows, s.cols, false);
      const auto gh = random_tensor(d, n, 13);
      GpuTensor grad_x(x), grad_out(x, gh), out(x, out_h);
      rt->launch("softmax_backward", {grad_x, grad_out, out});
      sync();
      std::vector<std::uint8_t> want(x.nbytes());
      reference::softmax_backward(d, gh.data(), out_h.data(), want.data(), s.rows, s.cols);
      test::expect_close(d, grad_x.read(), want, "grad_x");
      EXPECT_EQ(out.read(), out_h);
    }
}

TEST_P(GpuOps, Activations) {
  struct Case {
    const char* op;
    Act act;
    bool gated;
    double approximate;
  };
  const Case cases[] = {{"silu", Act::silu, false, 0},
                        {"gelu", Act::gelu, false, 0},
                        {"gelu", Act::gelu_tanh, false, 1},
                        {"swiglu", Act::silu, true, 0},
                        {"gelu_and_mul", Act::gelu, true, 0}};
  for (const Case& c : cases)
    for (DType d : kFloatTypes)
      for (Rows s : {Rows{1, 1}, Rows{1, 31}, Rows{3, 4097}, Rows{32, 12288}}) {
        SCOPED_TRACE(fmt::format("{} approximate={} {} {}", c.op, c.approximate, dtype_name(d), str(s)));
        const std::int64_t in_cols = c.gated ? 2 * s.cols : s.cols;
        const TensorSpec x(d, {s.rows, in_cols}), y(d, {s.rows, s.cols});
        const auto xh = random_tensor(d, s.rows * in_cols, 14, 0.05f, 6.f);
        GpuTensor out(y), xin(x, xh);
        if (c.op == std::string_view("gelu")) rt->launch(c.op, {out, xin}, {{"approximate", c.approximate}});
        else rt->launch(c.op, {out, xin});
        sync();
        std::vector<std::uint8_t> want(y.nbytes());
        reference::activation(d, c.act, c.gated, xh.data(), want.data(), s.rows * s.cols, s.cols);
        test::expect_close(d, out.read(), want, "out");
        EXPECT_EQ(xin.read(), xh);
      }
}

TEST_P(GpuOps, RotaryEmbeddingNeoxAndGptjInPlace) {
  struct Shape {
    std::int64_t tokens, heads, kv_heads, head_dim, rot_dim;
  };
  const std::int64_t max_pos = 4096;
  for (DType d : kFloatTypes)
    for (Shape s : {Shape{1, 1, 1, 2, 2}, Shape{5, 4, 2, 64, 64}, Shape{7, 32, 8, 128, 64}, Shape{33, 32, 8, 128, 128}})
      for (bool neox : {true, false})
        for (DType pos_type : {DType::i64, DType::i32}) {
          SCOPED_TRACE(fmt::format("{} tokens {} heads {}/{} head_dim {} rot_dim {} neox {} positions {}", dtype_name(d),
                                   s.tokens, s.heads, s.kv_heads, s.head_dim, s.rot_dim, neox, dtype_name(pos_type)));
          const TensorSpec q(d, {s.tokens, s.heads, s.head_dim}), k(d, {s.tokens, s.kv_heads, s.head_dim}),
              pos(pos_type, {s.tokens}), cache(DType::f32, {max_pos, s.rot_dim});
          const auto qh = random_tensor(d, q.numel(), 15), kh = random_tensor(d, k.numel(), 16);
          std::vector<float> cos_sin(std::size_t(max_pos * s.rot_dim));
          for (std::int64_t p = 0; p < max_pos; ++p)
            for (std::int64_t i = 0; i < s.rot_dim / 2; ++i) {
              const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(s.rot_dim));
              cos_sin[std::size_t(p * s.rot_dim + i)] = float(std::cos(angle));
              cos_sin[std::size_t(p * s.rot_dim + s.rot_dim / 2 + i)] = float(std::sin(angle));
            }
          std::vector<std::int64_t> positions(std::size_t(s.tokens));
          for (std::size_t t = 0; t < positions.size(); ++t) positions[t] = std::int64_t((t * 977 + 3) % max_pos);
          if (s.tokens > 2) positions[1] = max_pos;  // out of range: the token is left alone
          GpuTensor qd(q, qh), kd(k, kh), pd(pos, test::index_bytes(pos_type, positions)),
              cd(cache, reference::encode(DType::f32, cos_sin));
          rt->launch("rotary_embedding", {qd, kd, pd, cd}, {{"neox", neox ? 1 : 0}});
          sync();
          auto want_q = qh, want_k = kh;
          reference::rotary_embedding(d, want_q.data(), want_k.data(), positions.data(), cos_sin.data(), s.tokens,
                                      s.heads, s.kv_heads, s.head_dim, s.rot_dim, max_pos, neox);
          test::expect_close(d, qd.read(), want_q, "q");
          test::expect_close(d, kd.read(), want_k, "k");
        }
}

TEST_P(GpuOps, EmbeddingGathersRowsAndZeroesBadIds) {
  const std::int64_t vocab = 1000, tokens = 37;
  for (DType d : kFloatTypes)
    for (std::int64_t hidden : {1, 31, 4096})
      for (DType id_type : {DType::i64, DType::i32}) {
        SCOPED_TRACE(fmt::format("{} hidden {} ids {}", dtype_name(d), hidden, dtype_name(id_type)));
        std::vector<std::int64_t> ids(tokens);
        for (std::int64_t t = 0; t < tokens; ++t) ids[std::size_t(t)] = (t * 389 + 11) % vocab;
        ids[3] = vocab;  // out of range: a zero row
        ids[5] = -1;
        const TensorSpec w(d, {vocab, hidden}), out_spec(d, {tokens, hidden}), id_spec(id_type, {tokens});
        const auto wh = random_tensor(d, vocab * hidden, 17);
        GpuTensor out(out_spec), idd(id_spec, test::index_bytes(id_type, ids)), weight(w, wh);
        rt->launch("embedding", {out, idd, weight});
        sync();
        std::vector<std::uint8_t> want(out_spec.nbytes());
        reference::embedding(d, ids.data(), wh.data(), want.data(), tokens, vocab, hidden);
        EXPECT_EQ(out.read(), want) << "a gather is exact";
      }
}

TEST_P(GpuOps, StoreKvCacheWritesSlotsAndSkipsNegativeOnes) {
  const std::int64_t blocks = 8, block_size = 16, kv_heads = 2, tokens = 37, slots = blocks * block_size;
  for (DType d : kFloatTypes)
    for (std::int64_t head_dim : {1, 64, 128})
      for (bool strided : {false, true}) {
        SCOPED_TRACE(fmt::format("{} head_dim {} strided {}", dtype_name(d), head_dim, strided));
        const std::int64_t row = kv_heads * head_dim;
        std::vector<std::int64_t> slot(static_cast<std::size_t>(slots));
        std::iota(slot.begin(), slot.end(), 0);
        std::shuffle(slot.begin(), slot.end(), std::mt19937(18));
        slot.resize(tokens);
        slot[4] = -1;  // padding: skipped
        const TensorSpec cache(d, {blocks, block_size, kv_heads, head_dim}), slot_spec(DType::i64, {tokens});
        const auto kc = random_tensor(d, cache.numel(), 19), vc = random_tensor(d, cache.numel(), 20);
        // k and v as views of a fused [tokens, 3 * row] qkv buffer, or contiguous.
        const std::int64_t stride = strided ? 3 * row : row;
        const auto qkv = random_tensor(d, tokens * stride, 21), v_h = random_tensor(d, tokens * stride, 22);
        const std::int64_t shape[] = {tokens, kv_heads, head_dim}, strides[] = {stride, head_dim, 1};
        const TensorSpec kv_spec(d, shape, strides), whole(d, {tokens, stride});
        GpuTensor k_cache(cache, kc), v_cache(cache, vc), k_buf(whole, qkv), v_buf(whole, v_h),
            slots_d(slot_spec, test::index_bytes(DType::i64, slot));
        const std::size_t k_offset = strided ? std::size_t(row) * dtype_size(d) : 0;
        const Tensor k{kv_spec, k_buf.tensor().data + k_offset}, v{kv_spec, v_buf.tensor().data + k_offset};
        rt->launch("store_kv_cache", {k_cache, v_cache, k, v, slots_d});
        sync();
        // The reference takes contiguous k and v: gather the viewed rows.
        std::vector<std::uint8_t> k_rows, v_rows;
        const std::size_t row_bytes = std::size_t(row) * dtype_size(d);
        for (std::int64_t t = 0; t < tokens; ++t) {
          const std::size_t at = std::size_t(t * stride) * dtype_size(d) + k_offset;
          k_rows.insert(k_rows.end(), qkv.begin() + std::ptrdiff_t(at), qkv.begin() + std::ptrdiff_t(at + row_bytes));
          v_rows.insert(v_rows.end(), v_h.begin() + std::ptrdiff_t(at), v_h.begin() + std::ptrdiff_t(at + row_bytes));
        }
        auto want_k = kc, want_v = vc;
        reference::store_kv_cache(d, k_rows.data(), v_rows.data(), slot.data(), want_k.data(), want_v.data(), tokens,
                                  slots, row);
        EXPECT_EQ(k_cache.read(), want_k) << "a copy is exact; slots not mapped keep their values";
        EXPECT_EQ(v_cache.read(), want_v);
        EXPECT_EQ(k_buf.read(), qkv) << "k is read only";
      }
}

TEST_P(GpuOps, DebugChecksNameTheBadIndexInsteadOfSkippingIt) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  const TensorSpec w(DType::f32, {10, 8}), out(DType::f32, {3, 8}), ids(DType::i64, {3});
  GpuTensor weight(w, random_tensor(DType::f32, 80, 23)), o_d(out), id_d(ids, test::index_bytes(DType::i64, {1, 10, 2}));
  std::string msg = test::error_of<InvalidArgumentError>([&] { checked.launch("embedding", {o_d, id_d, weight}); });
  EXPECT_NE(msg.find("embedding: ids[1] = 10 is out of range"), std::string::npos) << msg;

  const TensorSpec cache(DType::f32, {2, 4, 1, 8}), kv(DType::f32, {2, 1, 8}), slots(DType::i64, {2});
  GpuTensor kc(cache), vc(cache), k(kv, random_tensor(DType::f32, 16, 24)), v(kv, random_tensor(DType::f32, 16, 25)),
      s(slots, test::index_bytes(DType::i64, {-1, 8}));
  msg = test::error_of<InvalidArgumentError>([&] { checked.launch("store_kv_cache", {kc, vc, k, v, s}); });
  EXPECT_NE(msg.find("store_kv_cache: slot_mapping[1] = 8 is out of range"), std::string::npos) << msg;
  // Without debug checks the same launch runs and skips the bad slot.
  EXPECT_NO_THROW(rt->launch("store_kv_cache", {kc, vc, k, v, s}));
  sync();
  EXPECT_EQ(kc.read(), std::vector<std::uint8_t>(cache.nbytes(), 0xff)) << "both slots skipped";
}

TEST_P(GpuOps, BundleOfEveryOpLoadsAsOneModuleAndEachKernelRuns) {
  // compile_all on the example set (one kernel per op x dtype), then ops at
  // those very shapes find their kernels in the bundle and compile nothing.
  auto items = Manifest::examples({"silu", "swiglu", "softmax"}).items({rt->device().target()});
  auto bundles = rt->compile_all(items, launch_emit());
  ASSERT_EQ(bundles.size(), 1u);
  EXPECT_EQ(bundles[0].kernels.size(), items.size());
  const std::uint64_t compiles = rt->stats().compiles;
  for (DType d : kFloatTypes) {
    const TensorSpec x(d, {32, 12288}), g(d, {32, 24576}), sx(d, {32, 151936});
    const auto xh = random_tensor(d, x.numel(), 26), gh = random_tensor(d, g.numel(), 27),
               sh = random_tensor(d, sx.numel(), 28);
    GpuTensor xo(x), xi(x, xh), go(x), gi(g, gh), so(sx), si(sx, sh);
    rt->launch("silu", {xo, xi});
    rt->launch("swiglu", {go, gi});
    rt->launch("softmax", {so, si});
    sync();
    std::vector<std::uint8_t> want(x.nbytes()), want_g(x.nbytes()), want_s(sx.nbytes());
    reference::activation(d, Act::silu, false, xh.data(), want.data(), x.numel(), 12288);
    reference::activation(d, Act::silu, true, gh.data(), want_g.data(), x.numel(), 12288);
    reference::softmax(d, sh.data(), want_s.data(), 32, 151936, false);
    test::expect_close(d, xo.read(), want, "silu");
    test::expect_close(d, go.read(), want_g, "swiglu");
    test::expect_close(d, so.read(), want_s, "softmax");
  }
  EXPECT_EQ(rt->stats().compiles, compiles) << "every launch found its kernel in the bundle";
}

INSTANTIATE_TEST_SUITE_P(Compilers, GpuOps,
                         ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
