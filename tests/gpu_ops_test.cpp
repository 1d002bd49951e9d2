// What runs across ops on the GPU (or the CPU device): debug checks of index
// data and a bundle of several ops. Each op's own device tests are in
// tests/ops/<op>_test.cpp: random inputs that are never zero, odd and
// realistic shapes, outputs poisoned first (an unwritten element is NaN and
// fails), guard bytes after every tensor, inputs checked unchanged, in-place
// tensors checked updated. Tolerances: gpu_util.hpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <numeric>

#include "gpu_util.hpp"
#include "op_test_util.hpp"
#include "mojo/error.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::GpuTensor;


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

// A launch a graph captures has no data yet to check (and its thread may not copy to the host): the debug
// checks skip it, with one warning, and the graph runs it.
TEST_P(GpuOps, DebugChecksSkipTheLaunchesAGraphCaptures) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  const TensorSpec w(DType::f32, {10, 8}), out(DType::f32, {3, 8}), ids(DType::i64, {3});
  const std::vector<std::uint8_t> table = random_tensor(DType::f32, 80, 23);
  GpuTensor weight(w, table), o_d(out), id_d(ids, test::index_bytes(DType::i64, {1, 9, 2}));
  Stream stream;
  const Graph graph = Graph::capture(stream, [&] { checked.launch("embedding", {o_d, id_d, weight}, {}, stream); });
  graph.launch(stream);
  stream.synchronize();
  std::vector<std::uint8_t> want;
  for (int row : {1, 9, 2}) want.insert(want.end(), table.begin() + row * 32, table.begin() + row * 32 + 32);
  EXPECT_EQ(o_d.read(), want);
}

TEST_P(GpuOps, BundleOfEveryOpLoadsAsOneModuleAndEachKernelRuns) {
  // compile_all on the example set (one kernel per op x dtype), then ops at
  // those very shapes find their kernels in the bundle and compile nothing.
  auto items = Manifest::examples({"silu", "swiglu", "softmax"}).items({rt->device().target()});
  auto bundles = rt->compile_all(items, launch_emit());
  ASSERT_EQ(bundles.size(), 1u);
  // softmax's example, 32 rows of 151,936, is fewer rows than SMs: a plan of two kernels (each row over several
  // blocks), one more kernel for each of its 3 dtypes.
  EXPECT_EQ(bundles[0].kernels.size(), items.size() + 3);
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
