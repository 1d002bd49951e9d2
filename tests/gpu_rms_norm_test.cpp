// rms_norm on the GPU (or, with none, the CPU device) against the CPU reference.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <new>
#include <random>

#include "device/hooks.hpp"
#include "gemm_args.h"
#include "gpu_util.hpp"
#include "mojo/error.hpp"
#include "mojo/runtime.hpp"
#include "reference/reference.hpp"

// Counts heap allocations made by this thread, to prove the hot path makes none.
namespace {
thread_local std::size_t tls_allocations = 0;
}
void* operator new(std::size_t n) {
  ++tls_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace mojo;

namespace {

// Tolerance per dtype: the GPU computes in float, the reference in double;
// both round once to the storage type, so they may differ by one ulp of it.
struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance(DType d) {
  switch (d) {
    case DType::bf16: return {1e-2, 8e-3};  // ulp = 2^-8 relative
    case DType::f16: return {1e-3, 1e-3};   // ulp = 2^-11 relative
    default: return {1e-5, 2e-5};           // rsqrt.approx: 2^-22 relative
  }
}

struct GpuFixture : test::GpuTest {};

// The first rows * hidden elements of `got` against the reference rms_norm of x and w.
void expect_matches_reference(DType dtype, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& x,
                              const std::vector<std::uint8_t>& w, std::int64_t rows, std::int64_t hidden, float eps) {
  const std::size_t n = std::size_t(rows * hidden);
  std::vector<std::uint8_t> want(x.size());
  reference::rms_norm(dtype, x.data(), w.data(), want.data(), rows, hidden, eps);
  const Tolerance tol = tolerance(dtype);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double g = reference::load(dtype, got.data(), i), r = reference::load(dtype, want.data(), i);
    if (!(std::abs(g - r) <= tol.atol + tol.rtol * std::abs(r)) && bad++ < 5)
      ADD_FAILURE() << dtype_name(dtype) << " [" << rows << ", " << hidden << "] element " << i << " (row "
                    << i / std::size_t(hidden) << "): gpu " << g << " vs cpu " << r;
  }
  EXPECT_EQ(bad, 0u) << "elements outside tolerance";
}

// Runs rms_norm on [rows, hidden] with x starting `x_offset` bytes into its
// buffer, checks every element against the reference and that no byte
// outside `out` was touched.
void check_rms_norm(Runtime& rt, DType dtype, std::int64_t rows, std::int64_t hidden, std::size_t x_offset = 0) {
  const std::size_t n = std::size_t(rows * hidden), es = dtype_size(dtype);
  const TensorSpec x_spec(dtype, {rows, hidden}), w_spec(dtype, {hidden});
  auto x_host = reference::encode(dtype, test::random_values(n, 1));
  auto w_host = reference::encode(dtype, test::random_values(std::size_t(hidden), 2));
  const float eps = 1e-5f;

  constexpr std::size_t kGuard = 256;  // poisoned bytes after `out`
  DeviceBuffer x(x_host.size() + x_offset), w(w_host.size()), out(x_host.size() + kGuard);
  x.copy_from_host(x_host.data(), x_host.size(), x_offset);
  w.copy_from_host(w_host.data(), w_host.size());
  out.fill_bytes(0xff);  // NaN in every float type: an unwritten element cannot pass
  rt.launch("rms_norm", {out.as(x_spec), x.as(x_spec, x_offset), w.as(w_spec)}, {{"eps", eps}});
  rt.device().synchronize();

  std::vector<std::uint8_t> got(out.size());
  out.copy_to_host(got.data(), got.size());
  expect_matches_reference(dtype, got, x_host, w_host, rows, hidden, eps);
  for (std::size_t i = n * es; i < got.size(); ++i) ASSERT_EQ(got[i], 0xff) << "wrote past the end at byte " << i;
}

// Host copies of an rms_norm's inputs, x [rows, hidden] and w [hidden]: random (seeded, never zero).
struct RmsInputs {
  std::vector<std::uint8_t> x, w;
};

// Writes random inputs into x and w before a launch reads them (a kernel must never read memory nothing
// wrote: compute-sanitizer initcheck), and returns them for the reference.
RmsInputs write_random_inputs(DType dtype, std::int64_t rows, std::int64_t hidden, DeviceBuffer& x, DeviceBuffer& w,
                              std::uint32_t seed) {
  RmsInputs in{reference::encode(dtype, test::random_values(std::size_t(rows * hidden), seed)),
               reference::encode(dtype, test::random_values(std::size_t(hidden), seed + 1))};
  x.copy_from_host(in.x.data(), in.x.size());
  w.copy_from_host(in.w.data(), in.w.size());
  return in;
}

// The [rows, hidden] output in `out` (after a synchronize) against the reference for `in`.
void expect_output_matches(DType dtype, const DeviceBuffer& out, const RmsInputs& in, std::int64_t rows,
                           std::int64_t hidden, float eps) {
  std::vector<std::uint8_t> got(in.x.size());
  out.copy_to_host(got.data(), got.size());
  expect_matches_reference(dtype, got, in.x, in.w, rows, hidden, eps);
}

}  // namespace

struct GpuRmsNorm : GpuFixture, ::testing::WithParamInterface<std::tuple<DType, std::int64_t, std::int64_t>> {};

TEST_P(GpuRmsNorm, MatchesCpuReference) {
  auto [dtype, rows, hidden] = GetParam();
  check_rms_norm(*rt, dtype, rows, hidden);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuRmsNorm,
    ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16),
                       ::testing::Values(std::int64_t(1), std::int64_t(3), std::int64_t(4096)),
                       ::testing::Values(std::int64_t(1), std::int64_t(127), std::int64_t(4096), std::int64_t(5120),
                                         std::int64_t(8192 + 8))),
    [](const auto& info) {
      return fmt::format("{}_rows{}_hidden{}", dtype_name(std::get<0>(info.param)), std::get<1>(info.param),
                         std::get<2>(info.param));
    });

TEST_F(GpuFixture, GpuMisalignedInputRunsOnNarrowerVectors) {
  check_rms_norm(*rt, DType::bf16, 5, 4096, 2);   // 2-byte aligned: vec 1
  check_rms_norm(*rt, DType::f32, 5, 4096, 8);    // 8-byte aligned: vec 2
  EXPECT_EQ(rt->stats().compiles, 2u);
}

TEST_F(GpuFixture, GpuWideRowsReadTwiceStillMatch) {
  check_rms_norm(*rt, DType::f32, 2, 262144 + 4);  // > 16 vectors per thread: not held in registers
}

TEST_F(GpuFixture, GpuKernelHandleLaunchesAndRejectsOtherShapes) {
  const TensorSpec x(DType::f16, {8, 256}), w(DType::f16, {256});
  DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  const RmsInputs in = write_random_inputs(DType::f16, 8, 256, xb, wb, 11);
  ob.fill_bytes(0xff);  // NaN: an element the launch does not write fails the check
  KernelHandle h = rt->get_kernel("rms_norm", {ob.as(x), xb.as(x), wb.as(w)});
  EXPECT_EQ(h.kernel_name(), "rms_norm_f16_hidden_256_vec_8_threads_32_rows_4");
  if (!rt->device().is_cpu()) EXPECT_GT(h.function().num_registers(), 0);  // the emulator has no registers
  h.launch({ob.as(x), xb.as(x), wb.as(w)}, {{"eps", 1e-6f}});
  const TensorSpec x2(DType::f16, {4, 128}), w2(DType::f16, {128});
  std::string msg = test::error_of<InvalidArgumentError>([&] { h.launch({ob.as(x2), xb.as(x2), wb.as(w2)}); });
  EXPECT_NE(msg.find("this handle runs {dtype=f16 hidden=256"), std::string::npos) << msg;
  rt->device().synchronize();
  expect_output_matches(DType::f16, ob, in, 8, 256, 1e-6f);  // the rejected launch left it as the first wrote it
}

TEST_F(GpuFixture, GpuEmptyTensorLaunchesNothing) {
  const TensorSpec x(DType::f32, {0, 64}), w(DType::f32, {64});
  DeviceBuffer wb(w.nbytes()), xb(256);
  EXPECT_NO_THROW(rt->launch("rms_norm", {{x, xb.ptr()}, {x, xb.ptr()}, wb.as(w)}));
}

TEST_F(GpuFixture, GpuNullPointerIsAPointerErrorNotAFault) {
  const TensorSpec x(DType::f32, {4, 64}), w(DType::f32, {64});
  DeviceBuffer xb(x.nbytes()), wb(w.nbytes());
  EXPECT_THROW(rt->launch("rms_norm", {{x, 0}, xb.as(x), wb.as(w)}), PointerError);
}

// DeviceBuffer's copies are synchronous: what copy_from_host or fill_bytes wrote is in place for work on any
// stream, ours being non-blocking (on the H100 a launch right after a pageable copy once read the old bytes).
TEST_F(GpuFixture, GpuSynchronousCopiesHaveLandedWhenTheyReturn) {
  const std::size_t words = std::size_t(32) << 20;  // 128 MiB: the DMA outlasts the call's return
  DeviceBuffer a(words * 4), b(words * 4);
  std::vector<std::uint32_t> host(words), back(words);
  Stream stream;
  for (std::uint32_t round = 1; round <= 3; ++round) {
    for (std::size_t i = 0; i < words; ++i) host[i] = std::uint32_t(i) * 2654435761u + round;
    a.copy_from_host(host.data(), words * 4);
    copy_async(b.ptr(), a.ptr(), words * 4, stream.handle());
    copy_to_host(back.data(), b.ptr(), words * 4, stream.handle());
    ASSERT_TRUE(back == host) << "round " << round << ": a copy on another stream read bytes copy_from_host had not landed";
    a.fill_bytes(std::uint8_t(round));
    copy_async(b.ptr(), a.ptr(), words * 4, stream.handle());
    copy_to_host(back.data(), b.ptr(), words * 4, stream.handle());
    const std::uint32_t filled = 0x01010101u * round;
    ASSERT_TRUE(std::all_of(back.begin(), back.end(), [&](std::uint32_t w) { return w == filled; }))
        << "round " << round << ": a copy on another stream read bytes fill_bytes had not written";
  }
}

TEST_F(GpuFixture, GpuCacheHitLaunchDoesNotAllocate) {
  const TensorSpec x(DType::bf16, {32, 4096}), w(DType::bf16, {4096});
  DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  const RmsInputs inputs = write_random_inputs(DType::bf16, 32, 4096, xb, wb, 21);
  ob.fill_bytes(0xff);
  const Tensor out = ob.as(x), in = xb.as(x), weight = wb.as(w);
  rt->launch("rms_norm", {out, in, weight}, {{"eps", 1e-6f}});  // compiles
  KernelHandle h = rt->get_kernel("rms_norm", {out, in, weight});
  const std::size_t before = tls_allocations;
  for (int i = 0; i < 100; ++i) {
    rt->launch("rms_norm", {out, in, weight}, {{"eps", 1e-6f}});
    h.launch({out, in, weight}, {{"eps", 1e-6f}});
  }
  EXPECT_EQ(tls_allocations - before, 0u) << "heap allocations on the cache-hit path";
  EXPECT_GE(rt->stats().memory_hits, 100u);
  EXPECT_EQ(rt->stats().compiles, 1u);
  rt->device().synchronize();
  expect_output_matches(DType::bf16, ob, inputs, 32, 4096, 1e-6f);
}

// The launches a sink took: each one's output pointer, argument g_output_arg (the first for most ops; gemm.cu's
// products take their inputs first, gemm_args.h's MOJO_GEMM_INPUT_ARGS).
namespace {
std::vector<DevicePtr> g_sunk_outputs;
std::size_t g_output_arg = 0;
void sink(const Function&, Dim3, Dim3, unsigned, StreamHandle, void** args, LaunchOptions) {
  if (g_sunk_outputs.size() < g_sunk_outputs.capacity())
    g_sunk_outputs.push_back(*static_cast<DevicePtr*>(args[g_output_arg]));
}
std::vector<bool> g_sunk_overlaps;
void sink_overlap(const Function&, Dim3, Dim3, unsigned, StreamHandle, void**, LaunchOptions options) {
  if (g_sunk_overlaps.size() < g_sunk_overlaps.capacity()) g_sunk_overlaps.push_back(options.overlap_previous);
}
}  // namespace

// RuntimeOptions::programmatic_dependent_launch (MOJO_JIT_PDL): every step of a plan is launched to overlap the
// launch before it where the device is sm_90 or later, and never where it is older or the option is off. (The
// kernels' side, a wait before any global access, is checked on every op's PTX by EveryOpCompiles.)
TEST(HotPath, ProgrammaticDependentLaunchOnSm90AndLaterWhenAsked) {
  const TensorSpec x(DType::bf16, {2, 151936});  // softmax of few long rows, not cooperative: a plan of two steps
  struct Case {
    const char* device;
    bool asked, overlaps;
  };
  for (const Case c : {Case{"cpu:sm_90a", true, true}, Case{"cpu:sm_90", true, true}, Case{"cpu:sm_80", true, false},
                       Case{"cpu:sm_90a", false, false}}) {
    SCOPED_TRACE(fmt::format("{}, asked: {}", c.device, c.asked));
    RuntimeOptions o;
    o.disk_cache = false;
    o.device = c.device;
    o.programmatic_dependent_launch = c.asked;
    Runtime rt(o);
    DeviceBuffer in(x.nbytes()), out(x.nbytes());
    g_sunk_overlaps.clear();
    g_sunk_overlaps.reserve(16);
    device_hooks::set_launch_sink(sink_overlap);
    rt.launch("softmax", {out.as(x), in.as(x)}, {{"cooperative", 0}});
    device_hooks::set_launch_sink(nullptr);
    ASSERT_EQ(g_sunk_overlaps.size(), 2u) << "two steps";
    EXPECT_EQ(g_sunk_overlaps, std::vector<bool>(2, c.overlaps));
  }
}

// A device that refuses cooperative launches, as a GPU with fewer SMs than the plan assumed does.
void sink_refusing_cooperative(const Function&, Dim3, Dim3, unsigned, StreamHandle, void**, LaunchOptions options) {
  if (options.cooperative) throw DeviceError("a cooperative launch of 32 blocks does not fit", 720);
}

// A refused cooperative launch (sample's at a batch of one) is named after its op, with the way out the op has;
// the plan without one launches on the same device.
TEST(HotPath, ARefusedCooperativeLaunchNamesItsOpAndTheWayOut) {
  RuntimeOptions o;
  o.disk_cache = false;
  o.device = "cpu:sm_90a";
  Runtime rt(o);
  const TensorSpec ints(DType::i64, {1}), floats(DType::f32, {1}), logits(DType::f32, {1, 151936});
  DeviceBuffer tokens(8), k(8), p(4), min_p(4), seed(8), offset(8), x(logits.nbytes());
  const std::vector<Tensor> tensors{tokens.as(ints), Tensor{},         x.as(logits),  k.as(ints),
                                    p.as(floats),    min_p.as(floats), seed.as(ints), offset.as(ints)};
  device_hooks::set_launch_sink(sink_refusing_cooperative);
  try {
    rt.launch("sample", tensors);
    ADD_FAILURE() << "the refusal was lost";
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()),
              "sample: a cooperative launch of 32 blocks does not fit; cooperative=0 runs it without a cooperative "
              "launch");
    EXPECT_EQ(e.code(), 720) << "the driver's code is kept";
  }
  EXPECT_NO_THROW(rt.launch("sample", tensors, {{"cooperative", 0}}));
  device_hooks::set_launch_sink(nullptr);
}

// A cache hit by handle or by name reuses what was bound: no allocation, no
// driver call but the launch (the sm_90a linear's TMA descriptors included),
// and the arguments are those of the tensors given now, not of the bound ones.
TEST(HotPath, ReusesTheBindingWithoutAllocationOrDriverCallAndPacksTheTensorsGiven) {
  RuntimeOptions o;
  o.disk_cache = false;
  o.device = "cpu:sm_90a";
  Runtime rt(o);
  struct Case {
    const char* op;
    std::vector<TensorSpec> specs;
    std::vector<ScalarArg> scalars;
  };
  const TensorSpec x(DType::bf16, {16, 256}), w(DType::bf16, {256}), lw(DType::bf16, {256, 256});
  // A decode split over the keys: a plan of two kernels sharing workspace from the stream's arena.
  const TensorSpec q(DType::bf16, {4, 8, 128}), cache(DType::bf16, {256, 16, 2, 128}), table(DType::i32, {4, 64}),
      lens(DType::i32, {4});
  const Case cases[] = {{"rms_norm", {x, x, w}, {{"eps", 1e-5}}},
                        {"linear", {x, x, lw, TensorSpec(), TensorSpec()}, {{"path", 90}}},
                        {"paged_decode_gqa", {q, q, cache, cache, table, lens, TensorSpec(), TensorSpec()}, {}}};
  std::size_t gemm_inputs = 0;  // the sm_90a linear's arguments before its output (gemm.cu's products: a, b, ...)
  mojo_gemm::for_each_arg(mojo_gemm::InputArgs<void>{}, [&](const auto&) { ++gemm_inputs; });
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    g_output_arg = std::string(c.op) == "linear" ? gemm_inputs : 0;
    std::vector<DeviceBuffer> buffers;
    std::vector<Tensor> sets[2];
    for (const TensorSpec& s : c.specs)
      for (std::vector<Tensor>& set : sets) {
        buffers.emplace_back(s.nbytes());
        set.push_back(s.rank() == 0 ? Tensor{s, 0} : buffers.back().as(s));
      }
    device_hooks::set_launch_sink(sink);
    const KernelHandle h = rt.get_kernel(c.op, sets[0], c.scalars);
    if (std::string(c.op) == "linear") EXPECT_EQ(h.params().get("wgmma"), 1);
    const std::size_t steps = find_op(c.op).plan(h.params()).size();
    if (std::string(c.op) == "paged_decode_gqa") EXPECT_EQ(steps, 2u);
    rt.launch(c.op, sets[0], c.scalars);
    rt.launch(c.op, sets[1], c.scalars);
    g_sunk_outputs.clear();
    g_sunk_outputs.reserve(128);
    const std::size_t allocations = tls_allocations;
    const std::uint64_t driver_calls = device_hooks::driver_calls();
    for (int i = 0; i < 8; ++i) {
      h.launch(sets[i % 2], c.scalars);
      rt.launch(c.op, sets[i % 2], c.scalars);
    }
    EXPECT_EQ(tls_allocations - allocations, 0u);
    EXPECT_EQ(device_hooks::driver_calls() - driver_calls, 0u);
    device_hooks::set_launch_sink(nullptr);
    ASSERT_EQ(g_sunk_outputs.size(), 16u * steps);
    for (std::size_t i = 0; i < 16 * steps; ++i) EXPECT_EQ(g_sunk_outputs[i], sets[i / steps / 2 % 2][0].data) << i;
    // Scalars other than the bound ones are specialized again: a handle of another eps still runs.
    if (std::string(c.op) == "rms_norm") {
      g_sunk_outputs.clear();
      device_hooks::set_launch_sink(sink);
      h.launch(sets[1], {{"eps", 1e-3}});
      // By name, an eps that changes on every call is specialized each time, still without allocating.
      const std::size_t before = tls_allocations;
      for (int i = 0; i < 8; ++i) rt.launch(c.op, sets[0], {{"eps", 1e-3 * (i + 1)}});
      EXPECT_EQ(tls_allocations - before, 0u);
      device_hooks::set_launch_sink(nullptr);
      EXPECT_EQ(g_sunk_outputs.size(), 9u);
    }
  }
}

TEST_F(GpuFixture, GpuSecondProcessFindsTheKernelOnDisk) {
  const TensorSpec x(DType::bf16, {2, 4096}), w(DType::bf16, {4096});
  DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  const RmsInputs in = write_random_inputs(DType::bf16, 2, 4096, xb, wb, 31);
  ob.fill_bytes(0xff);
  rt->launch("rms_norm", {ob.as(x), xb.as(x), wb.as(w)});  // eps: its default, 1e-6
  EXPECT_EQ(rt->stats().compiles, 1u);
  rt->device().synchronize();
  expect_output_matches(DType::bf16, ob, in, 2, 4096, 1e-6f);
  // The quickstart runs the same specialization (bf16, hidden 4096) in a new process.
  auto r = test::run_command("MOJO_JIT_CACHE_DIR=" + cache.str() + " MOJO_JIT_DEVICE=" + test::test_device() + " " +
                             MOJO_TEST_QUICKSTART);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("found in the cache"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
}

#if MOJO_TEST_WITH_LLVM
// The same checks with kernels compiled by clang + LLVM instead of NVRTC.
struct GpuLlvm : test::GpuTest {
  std::string compiler() const override { return "llvm"; }
};

TEST_F(GpuLlvm, RmsNormMatchesCpuReference) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (std::int64_t hidden : {1, 127, 4096, 8200}) check_rms_norm(*rt, dtype, 3, hidden);
}
#endif

TEST_F(GpuFixture, GpuBundleLoadsOnceAndEveryKernelRuns) {
  // One module with 6 kernels; each launch finds its kernel in the bundle.
  std::vector<PrewarmItem> items;
  for (DType dtype : {DType::f32, DType::bf16})
    for (std::int64_t hidden : {64, 1000, 4096}) {
      TensorSpec x(dtype, {2, hidden}), w(dtype, {hidden});
      items.push_back({"rms_norm", {{x}, {x}, {w}}, {}, rt->device().target(), "item"});
    }
  auto bundles = rt->compile_all(items, launch_emit());
  ASSERT_EQ(bundles.size(), 1u);
  EXPECT_EQ(bundles[0].kernels.size(), 6u);
  for (DType dtype : {DType::f32, DType::bf16})
    for (std::int64_t hidden : {64, 1000, 4096}) check_rms_norm(*rt, dtype, 5, hidden);
  EXPECT_EQ(rt->stats().compiles, 1u) << "the launches compiled nothing more";
}

// A template changed through add_template_path runs at the next launch: the
// Runtime keys loaded modules by their binary, never by where it lay in memory.
TEST_F(GpuFixture, TemplateChangeAfterAddTemplatePathRunsTheNewCode) {
  const TensorSpec x(DType::f32, {3, 64}), w(DType::f32, {64});
  const auto xh = reference::encode(DType::f32, test::random_values(3 * 64, 3));
  const auto wh = reference::encode(DType::f32, std::vector<float>(64, 2.f)), ones =
      reference::encode(DType::f32, std::vector<float>(64, 1.f));
  test::GpuTensor xd(x, xh), wd(w, wh), out(x);
  auto run = [&] {
    rt->launch("rms_norm", {out, xd, wd}, {{"eps", 1e-5f}});
    rt->device().synchronize();
    return out.read();
  };
  std::vector<std::uint8_t> weighted(x.nbytes()), unweighted(x.nbytes());
  reference::rms_norm(DType::f32, xh.data(), wh.data(), weighted.data(), 3, 64, 1e-5);
  reference::rms_norm(DType::f32, xh.data(), ones.data(), unweighted.data(), 3, 64, 1e-5);
  test::expect_close(DType::f32, run(), weighted, "the shipped template");
  test::TempDir templates;
  ASSERT_GT(test::write_template_variant(templates.path(), "rms_norm.cu", "mojo::to_float(w.v[j])", "1.f"), 0);
  rt->add_template_path(templates.path());
  test::expect_close(DType::f32, run(), unweighted, "the changed template (weight ignored)");
}
