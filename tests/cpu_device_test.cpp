// The CPU device itself: that it is worth having (templates with deliberate
// bugs fail, the real ones pass), that what a GPU would do wrong or hang on
// is a DeviceError naming the kernel, block and threads, and that its
// primitives behave as the PTX ISA says (conversions bit-exact, scheduling
// orders reproducible). Runs everywhere: no GPU is involved.
#include <fmt/format.h>
#include <cstring>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include "device/cpu/executor.hpp"
#include "device/cpu/fiber.hpp"
#include "device/cpu/memory.hpp"
#include "gpu_util.hpp"
#include "mojo/error.hpp"
#include "mojo/templates.hpp"
#include "runtime/workspace.hpp"

using namespace mojo;
using test::GpuTensor;

namespace {

// ---- templates with one deliberate bug each -------------------------------------------

// A template file as shipped, with `from` replaced by `to` (exactly once), in a directory searched first.
struct Variant {
  const char* file;
  const char* from;
  const char* to;
};

struct Outcome {
  std::string error;      // what the launch threw, if it threw
  std::size_t wrong = 0;  // elements outside the tolerance, if it ran
};

class DeliberateBugs : public ::testing::Test {
 protected:
  // A Runtime on the CPU device emulating `arch`, with `v` applied to its templates (none: the real ones).
  std::unique_ptr<Runtime> runtime(const char* arch, const Variant* v = nullptr) {
    RuntimeOptions o;
    o.cache_dir = cache.path();
    o.device = std::string("cpu:") + arch;
    if (v != nullptr) {
      const auto dir = templates.path() / std::to_string(variants++);
      EXPECT_EQ(test::write_template_variant(dir, v->file, v->from, v->to), 1)
          << v->file << " should contain this once: " << v->from;
      o.template_paths = {dir};
    }
    return std::make_unique<Runtime>(o);
  }

  // rms_norm on [rows, hidden] bf16 against the reference.
  static Outcome rms_norm(Runtime& rt, std::int64_t rows, std::int64_t hidden) {
    const TensorSpec x(DType::bf16, {rows, hidden}), w(DType::bf16, {hidden});
    const auto xh = reference::encode(DType::bf16, test::random_values(std::size_t(rows * hidden), 1));
    const auto wh = reference::encode(DType::bf16, test::random_values(std::size_t(hidden), 2));
    GpuTensor out(x), xd(x, xh), wd(w, wh);
    Outcome r;
    try {
      rt.launch("rms_norm", {out, xd, wd}, {{"eps", 1e-6f}});
    } catch (const Error& e) {
      r.error = e.what();
      return r;
    }
    std::vector<std::uint8_t> want(x.nbytes());
    reference::rms_norm(DType::bf16, xh.data(), wh.data(), want.data(), rows, hidden, 1e-6);
    r.wrong = test::mismatches(DType::bf16, out.read(), want, test::tolerance(DType::bf16));
    return r;
  }

  // gemm [m, k] x ([n, k] with trans_b, else [k, n]) in bf16 against the reference, on `path` (80 or 90), K
  // unsplit (each block runs all of it).
  static Outcome gemm(Runtime& rt, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_b, int path) {
    const TensorSpec a(DType::bf16, {m, k}),
        b(DType::bf16, trans_b ? std::vector<std::int64_t>{n, k} : std::vector<std::int64_t>{k, n}),
        c(DType::bf16, {m, n});
    const auto ah = reference::encode(DType::bf16, test::random_values(std::size_t(m * k), 3));
    const auto bh = reference::encode(DType::bf16, test::random_values(std::size_t(n * k), 4));
    GpuTensor ad(a, ah), bd(b, bh), cd(c);
    Outcome r;
    try {
      rt.launch("gemm", {cd, ad, bd}, {{"trans_b", trans_b ? 1 : 0}, {"path", path}, {"splits", 1}});
    } catch (const Error& e) {
      r.error = e.what();
      return r;
    }
    std::vector<std::uint8_t> want(c.nbytes());
    reference::gemm(DType::bf16, DType::bf16, ah.data(), bh.data(), want.data(), 1, m, n, k, 1, 0, false, trans_b);
    const std::vector<TensorSpec> specs = {c, a, b};
    r.wrong = test::mismatches(DType::bf16, cd.read(), want, find_check("gemm").tolerance(DType::bf16, specs, {}));
    return r;
  }

  // check_op of `op` at `shapes` in bf16 with its default scalars, on a kernel whose name contains `kernel`.
  static Outcome checked(Runtime& rt, const char* op_name, const char* shapes, const char* kernel) {
    const OpDef& op = find_op(op_name);
    const auto specs = op.specs_from_shapes(DType::bf16, parse_shapes(op, shapes));
    Outcome r;
    try {
      const CheckReport c = check_op(rt, op_name, specs, {});
      EXPECT_NE(c.kernel.find(kernel), std::string::npos) << c.kernel;
      for (const auto& out : c.outputs) r.wrong += out.wrong;
    } catch (const Error& e) {
      r.error = e.what();
    }
    return r;
  }

  // check_op on the sm_90a CPU device: the real templates pass, and with `v` the launch fails with `error`.
  void expect_only_the_variant_caught(const Variant& v, const char* op, const char* shapes, const char* kernel,
                                      const char* error) {
    const Outcome real = checked(*runtime("sm_90a"), op, shapes, kernel);
    EXPECT_EQ(real.wrong, 0u) << "the real template";
    EXPECT_EQ(real.error, "") << "the real template";
    expect_caught(checked(*runtime("sm_90a", &v), op, shapes, kernel), error);
  }

  // The bug makes the op fail: wrong elements, or an error whose message contains `error` (if given).
  void expect_caught(const Outcome& bug, const char* error = nullptr) {
    if (error != nullptr) {
      EXPECT_NE(bug.error.find(error), std::string::npos) << "expected an error with '" << error << "', got: '"
                                                          << bug.error << "' and " << bug.wrong << " wrong elements";
    } else {
      EXPECT_TRUE(bug.wrong > 0 || !bug.error.empty()) << "the deliberate bug went unnoticed";
    }
  }

  test::TempDir cache, templates;
  int variants = 0;
};

TEST_F(DeliberateBugs, BlockReductionWithoutItsBarrier) {
  const Variant v{"mojo_prelude.cuh", "  if (tid % 32 == 0) scratch[tid / 32] = v;\n  sync_block();",
                  "  if (tid % 32 == 0) scratch[tid / 32] = v;"};
  EXPECT_EQ(rms_norm(*runtime("sm_80"), 8, 4096).wrong, 0u) << "the real template";
  expect_caught(rms_norm(*runtime("sm_80", &v), 8, 4096));
}

TEST_F(DeliberateBugs, CpAsyncWithoutItsWait) {
  const Variant v{"gemm.cu", "    mojo::cp_async_wait<STAGES - 2>();  // tile it has landed\n", ""};
  EXPECT_EQ(gemm(*runtime("sm_80"), 64, 64, 96, true, 80).wrong, 0u) << "the real template";
  expect_caught(gemm(*runtime("sm_80", &v), 64, 64, 96, true, 80));
}

// A tile's chunks read from one element further on: 16-byte cp.async from addresses 2 bytes off, which a GPU
// refuses ("misaligned address"); so does the CPU device, which had copied them.
TEST_F(DeliberateBugs, CpAsyncFromAMisalignedAddress) {
  const Variant v{"gemm.cu", "const T* src = valid > 0 ? g + (long long)gr * ld + gc : g;",
                  "const T* src = valid > 0 ? g + (long long)gr * ld + gc + 1 : g;"};
  expect_caught(gemm(*runtime("sm_80", &v), 64, 64, 96, true, 80), "which is not 16-byte aligned (misaligned address)");
}

TEST_F(DeliberateBugs, WrongFragmentIndex) {
  const Variant v{"gemm.cu", "        fb[j][1] = r[2];", "        fb[j][1] = r[1];"};
  expect_caught(gemm(*runtime("sm_80", &v), 64, 64, 64, true, 80));
}

TEST_F(DeliberateBugs, LdmatrixReadsUnswizzledRows) {
  // The fragment loads forget the swizzle the tile writes with.
  const Variant v{"mojo_mma.cuh", "    ldmatrix_x4(r, smem_address(tile) + unsigned(L::offset(x, k)));",
                  "    ldmatrix_x4(r, smem_address(tile) + unsigned((x * INNER + k) * (int)sizeof(T)));"};
  expect_caught(gemm(*runtime("sm_80", &v), 64, 64, 64, true, 80));
}

TEST_F(DeliberateBugs, SwizzledRingNotOnA1024ByteBoundary) {
  const Variant v{"gemm_sm90.cuh", "const unsigned ring = (mojo::smem_address(smem) + 1023u) & ~1023u;",
                  "const unsigned ring = (mojo::smem_address(smem) + 127u) & ~127u;"};
  EXPECT_EQ(gemm(*runtime("sm_90a"), 128, 128, 128, true, 90).wrong, 0u) << "the real template";
  expect_caught(gemm(*runtime("sm_90a", &v), 128, 128, 128, true, 90), "is not 1024-byte aligned");
}

TEST_F(DeliberateBugs, TmaBoxOneRowOff) {
  const Variant v{"gemm_sm90.cuh", "mojo::tma_load_3d(dst, a_source, bar, kt * BK, a_row, a_batch);",
                  "mojo::tma_load_3d(dst, a_source, bar, kt * BK, a_row + 1, a_batch);"};
  expect_caught(gemm(*runtime("sm_90a", &v), 128, 128, 128, true, 90));
}

TEST_F(DeliberateBugs, WgmmaDescriptorWithTheWrongLeadingOffset) {
  // b [K, N] is MN-major: the next 64 columns are CHUNK bytes further, not half of that. N = 133 x 64
  // columns make the heuristic's tile 128 wide (64 would take a second wave of tiles for one of them).
  const Variant v{"gemm_sm90.cuh", "mojo::wgmma_descriptor(b_tile + kk * 2048, CHUNK)",
                  "mojo::wgmma_descriptor(b_tile + kk * 2048, CHUNK / 2)"};
  EXPECT_EQ(gemm(*runtime("sm_90a"), 64, 133 * 64, 64, false, 90).wrong, 0u) << "the real template";
  expect_caught(gemm(*runtime("sm_90a", &v), 64, 133 * 64, 64, false, 90));
}

TEST_F(DeliberateBugs, StageReleasedBeforeItsWgmmaCompletes) {
  // The consumers free a stage while the MMAs reading it still run.
  const Variant v{"gemm_sm90.cuh",
                  "      mojo::wgmma_wait<1>();  // the previous k step's MMAs are done: release its stage",
                  "      if (previous >= 0) mojo::mbarrier_arrive(empty + 8 * previous), previous = -1;\n"
                  "      mojo::wgmma_wait<1>();"};
  // K runs the ring round and on (the tile does not depend on K), so the producer refills the early-released stage.
  const TensorSpec a(DType::bf16, {128, 64}), b(DType::bf16, {128, 64}), c(DType::bf16, {128, 128});
  const std::int64_t stages =
      find_op("gemm").specialize({{c, 0}, {a, 0}, {b, 0}}, {{"trans_b", 1}, {"path", 90}}, Target::parse("sm_90a"))
          .get("stages");
  expect_caught(gemm(*runtime("sm_90a", &v), 128, 128, 64 * (stages + 4), true, 90),
                "changed before its wgmma.wait_group");
}

TEST_F(DeliberateBugs, AccumulatorsReadBeforeTheirWgmmaWait) {
  const Variant v{"gemm_sm90.cuh", "    mojo::wgmma_wait<0>();\n", ""};
  expect_caught(gemm(*runtime("sm_90a", &v), 128, 128, 128, true, 90));
}

// The sm_90a prefill's producer gathers a cache of one-token blocks with cp.async (the generic proxy) and the
// consumers read the keys with wgmma (the async proxy): without fence.proxy.async between them a GPU may give
// the MMA bytes from before the copies.
TEST_F(DeliberateBugs, GatheredKeysWithoutTheProxyFence) {
  const Variant v{"attention_sm90.cuh", "    mojo::fence_proxy_async();\n    mojo::sync_warps(GATHERED, 128);",
                  "    mojo::sync_warps(GATHERED, 128);"};
  expect_only_the_variant_caught(v, "paged_prefill_gqa",
                                 "q=64x4x64 k_cache=100x1x1x64 cu_seqlens_q=2 block_tables=1x100", "gather_1",
                                 "thread 0's cp.async wrote with no fence.proxy.async after it");
}

// The same for the consumers' Q tiles, which their threads store (mojo::store, the generic proxy) before their
// wgmma read them.
TEST_F(DeliberateBugs, QueryTileStoredWithoutTheProxyFence) {
  const Variant v{"attention_sm90.cuh", "    mojo::fence_proxy_async();\n    mojo::sync_warps(1 + consumer, 128);",
                  "    mojo::sync_warps(1 + consumer, 128);"};
  expect_only_the_variant_caught(v, "sdpa", "q=100x2x64 k=100x1x64", "wgmma_1",
                                 "store wrote with no fence.proxy.async after it");
}

TEST_F(DeliberateBugs, ProducerWaitsForTheWrongPhase) {
  const Variant v{"gemm_sm90.cuh", "mojo::mbarrier_wait(empty + 8 * stage, phase ^ 1);",
                  "mojo::mbarrier_wait(empty + 8 * stage, phase);"};
  const Outcome bug = gemm(*runtime("sm_90a", &v), 128, 128, 128, true, 90);
  expect_caught(bug, "deadlocked: no thread can go on (a GPU would hang)");
  EXPECT_NE(bug.error.find("wait at mbarrier"), std::string::npos) << bug.error;
  EXPECT_NE(bug.error.find("kernel gemm_bf16"), std::string::npos) << bug.error;
}

TEST_F(DeliberateBugs, ReadOnePastTheRow) {
  // Every thread reads one element further along: the last row's last vector reads past x.
  const Variant v{"rms_norm.cu", "    P p = mojo::load<T, VEC>(xr + v * VEC);",
                  "    P p = mojo::load<T, VEC>(xr + v * VEC + 1);"};
  expect_caught(rms_norm(*runtime("sm_80", &v), 3, 64 * 8 + 1));
}

TEST_F(DeliberateBugs, StoreOneVectorPastTheRow) {
#if MOJO_ASAN
  GTEST_SKIP() << "under ASan the guard zones are poisoned for ASan, which reports such a store itself";
#else
  // Every vector lands one vector further on: the last row's last one past the buffer's end.
  const Variant v{"rms_norm.cu", "    mojo::store<T, VEC>(outr + v * VEC, o);",
                  "    mojo::store<T, VEC>(outr + v * VEC + VEC, o);"};
  const TensorSpec x(DType::bf16, {3, 512}), w(DType::bf16, {512});
  for (const Variant* variant : {static_cast<const Variant*>(nullptr), &v}) {
    const auto rt = runtime("sm_80", variant);
    DeviceBuffer out(x.nbytes()), xd(x.nbytes()), wd(w.nbytes());  // exactly their tensors' bytes
    const auto xh = reference::encode(DType::bf16, test::random_values(3 * 512, 1));
    const auto wh = reference::encode(DType::bf16, test::random_values(512, 2));
    xd.copy_from_host(xh.data(), xh.size());
    wd.copy_from_host(wh.data(), wh.size());
    std::string error;
    try {
      rt->launch("rms_norm", {out.as(x), xd.as(x), wd.as(w)}, {{"eps", 1e-6f}});
    } catch (const DeviceError& e) {
      error = e.what();
    }
    if (variant == nullptr) {
      EXPECT_EQ(error, "") << "the real template";
      continue;
    }
    EXPECT_NE(error.find("wrote past the end of the 3072-byte buffer"), std::string::npos) << error;
    EXPECT_NE(error.find("kernel rms_norm_bf16_hidden_512"), std::string::npos) << error;
  }
#endif
}

TEST_F(DeliberateBugs, ProductWithBetaZeroReadsC) {
  // BLAS never reads C when beta is 0 (0 x NaN is NaN): c is fresh device memory, NaN bytes on the CPU device.
  const Variant v{"gemm.cu", "  if constexpr (BETA) v += p.beta * mojo::to_float(p.c[(long long)row * p.ldc + col]);",
                  "  v += p.beta * mojo::to_float(p.c[(long long)row * p.ldc + col]);"};
  const TensorSpec a(DType::bf16, {64, 64}), c(DType::bf16, {64, 64});
  for (const Variant* variant : {static_cast<const Variant*>(nullptr), &v}) {
    const auto rt = runtime("sm_80", variant);
    DeviceBuffer ad(a.nbytes()), bd(a.nbytes()), cd(c.nbytes());
    const auto ah = reference::encode(DType::bf16, test::random_values(64 * 64, 3));
    ad.copy_from_host(ah.data(), ah.size());
    bd.copy_from_host(ah.data(), ah.size());
    rt->launch("gemm", {cd.as(c), ad.as(a), bd.as(a)}, {{"trans_b", 1}, {"path", 80}});
    std::vector<std::uint8_t> got(c.nbytes()), want(c.nbytes());
    cd.copy_to_host(got.data(), got.size());
    reference::gemm(DType::bf16, DType::bf16, ah.data(), ah.data(), want.data(), 1, 64, 64, 64, 1, 0, false, true);
    const std::size_t wrong = test::mismatches(DType::bf16, got, want, test::tolerance(DType::bf16));
    if (variant == nullptr) EXPECT_EQ(wrong, 0u) << "the real template";
    else EXPECT_EQ(wrong, std::size_t(64 * 64)) << "every element read NaN from c";
  }
}

// A cooperative kernel that does not leave its sync words zero: the next launch's barriers would pass early,
// silently. With debug checks the Runtime reads them back after the launch and says which it left set.
TEST_F(DeliberateBugs, CooperativeKernelLeavesItsSyncWordsSet) {
  const Variant v{"softmax.cu", "  mojo::leave_sync_words(row_sync, 2, CHUNKS);\n  const mojo::OnlineSum row",
                  "  const mojo::OnlineSum row"};
  const TensorSpec x(DType::f32, {1, 4096});  // 4 blocks, one cooperative launch
  const auto xh = reference::encode(DType::f32, test::random_values(4096, 5));
  for (const Variant* variant : {static_cast<const Variant*>(nullptr), &v}) {
    test::ScopedEnv checks("MOJO_JIT_DEBUG_CHECKS", "1");
    const auto rt = runtime("sm_90a", variant);
    GpuTensor out(x), in(x, xh);
    ASSERT_EQ(find_op("softmax").specialize({out, in}, {}, Target::parse("sm_90a")).get("cooperative"), 1);
    if (variant == nullptr) {
      for (int run = 0; run < 2; ++run) EXPECT_NO_THROW(rt->launch("softmax", {out, in})) << "the real template";
      continue;
    }
    EXPECT_EQ(test::error_of<Error>([&] {
                rt->launch("softmax", {out, in});
              }),
              "softmax: its kernels left 1 of its 2 sync words set (word 0 holds 4); a cooperative kernel must leave "
              "them zero (mojo::leave_sync_words), or the next launch's barriers pass early");
  }
}

// ---- the device API with kernels of its own ---------------------------------------------

// Kernels written here, built by the host compiler and run through Module / launch.
class CpuKernels : public ::testing::Test {
 protected:
  void SetUp() override { device = std::make_unique<Device>(Device::cpu(Target::parse("sm_80"))); }
  Module build(const std::string& kernels, const std::vector<std::string>& names) {
    TemplateRegistry templates;
    std::string source = templates.expand(std::vector<std::string>{"mojo_cpu.cuh", "mojo_mma.cuh"}) + kernels;
    for (const std::string& n : names) source += fmt::format("\nMOJO_CPU_ENTRY({})\n", n);
    return Module::load(make_host_compiler()
                            ->compile(CompileRequest{"probe.cu", source, device->target(), Emit::host, "probe"})
                            .binary);
  }
  std::unique_ptr<Device> device;
};

TEST_F(CpuKernels, DeadlockNamesKernelBlockAndWaits) {
  Module m = build(R"(extern "C" __global__ void half_waits(int*) {
    if (mojo::thread_x() < 32) mojo::sync_warps(1, 64);  // the other warp never comes
  })",
                   {"half_waits"});
  int* unused = nullptr;
  void* args[] = {&unused};
  const std::string msg = test::error_of<DeviceError>([&] {
    launch(m.function("half_waits"), {2, 1, 1}, {64, 1, 1}, 0, nullptr, args);
  });
  EXPECT_EQ(msg,
            "cpu device: kernel half_waits: block (0, 0, 0) deadlocked: no thread can go on (a GPU would hang); "
            "threads 0-31 wait at bar.sync 1, 64 (32 arrived); 32 thread(s) exited");
}

// Blocks that wait for each other (mojo::sync_blocks) need a cooperative launch: the CPU device then runs every
// block at once (an OS thread each), and what each block wrote before the barrier is every block's after it.
// In any other launch the first wait fails it, as a GPU may hang there; a grid too large to be resident, and a
// grid whose blocks all wait for what none will write, are errors that name what happened.
TEST_F(CpuKernels, CooperativeLaunchRunsBlocksThatWaitForEachOtherOnThreadsOfTheirOwn) {
  Module m = build(R"(extern "C" __global__ void neighbours(unsigned* counters, int* values, int* out, unsigned need) {
    const unsigned b = mojo::block_x(), n = mojo::grid_dim_x(), t = mojo::thread_x();
    if (t == 0) values[b] = int(b * b + 1);
    mojo::sync_blocks(counters, need);  // need < n: the counter never gets there
    if (t == 0) out[b] = values[(b + 1) % n] + values[(b + n - 1) % n];
  })",
                   {"neighbours"});
  constexpr unsigned kBlocks = 7;
  DeviceBuffer counters(4), values(kBlocks * 4), out(kBlocks * 4);
  DevicePtr c = counters.ptr(), v = values.ptr(), o = out.ptr();
  unsigned need = kBlocks;
  void* args[] = {&c, &v, &o, &need};
  const Function f = m.function("neighbours");
  auto run = [&](unsigned blocks, unsigned threads, bool cooperative) {
    counters.fill_bytes(0);
    launch(f, {blocks, 1, 1}, {threads, 1, 1}, 0, nullptr, args, {.cooperative = cooperative});
  };
  for (const char* schedule : {"forward", "reverse", "random:5"}) {
    test::ScopedEnv env("MOJO_JIT_CPU_SCHEDULE", schedule);
    run(kBlocks, 64, true);
    std::vector<int> got(kBlocks);
    out.copy_to_host(got.data(), got.size() * 4);
    for (unsigned b = 0; b < kBlocks; ++b) {
      const unsigned l = (b + kBlocks - 1) % kBlocks, r = (b + 1) % kBlocks;
      EXPECT_EQ(got[b], int(l * l + r * r + 2)) << schedule << ", block " << b;
    }
  }
  const std::string alone = test::error_of<DeviceError>([&] { run(kBlocks, 64, false); });
  EXPECT_TRUE(
      alone.starts_with("cpu device: kernel neighbours: block (0, 0, 0), thread 0: waits for other blocks (the "
                        "counter at 0x"))
      << alone;
  EXPECT_TRUE(alone.ends_with(
      " holds 1; it waits for 7) in a launch that is not cooperative: a GPU need not run those blocks while this one "
      "waits (a hang); launch it with LaunchOptions::cooperative"))
      << alone;
  EXPECT_EQ(test::error_of<DeviceError>([&] { run(108 * 32 + 1, 64, true); }),
            "cpu device: kernel neighbours: a cooperative launch of 3457 blocks of 64 threads: at most 3456 fit on "
            "sm_80 at once (108 SMs; a GPU refuses it with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)");
  EXPECT_EQ(test::error_of<DeviceError>([&] { run(513, 64, true); }),
            "cpu device: kernel neighbours: a cooperative launch of 513 blocks: the CPU device runs at most 512 (an OS "
            "thread each)");
  need = kBlocks + 1;
  const std::string stuck = test::error_of<DeviceError>([&] { run(kBlocks, 64, true); });
  EXPECT_TRUE(
      stuck.starts_with("cpu device: kernel neighbours: the cooperative grid deadlocked: no block can go on (a "
                        "GPU would hang); block ("))
      << stuck;
  EXPECT_NE(stuck.find("threads 0 wait at a global counter at 0x"), std::string::npos) << stuck;
  EXPECT_NE(stuck.find("(it holds 7; waits for 8); threads 1-63 wait at bar.sync 0 (all threads; 63 of 64 arrived)"),
            std::string::npos)
      << stuck;
  std::size_t blocks_named = 0;
  for (std::size_t at = 0; (at = stuck.find("; block (", at)) != std::string::npos; ++at) ++blocks_named;
  EXPECT_EQ(blocks_named, kBlocks) << "every block, with its waits";
}

// bar.arrive (mojo::arrive_warps) counts a warp at a barrier that other warps wait at with bar.sync, and goes on;
// what it wrote before is theirs to read. The sm_90a prefill's ping-pong in miniature: two warps take turns at
// two barriers (each waits at its own, then arrives at the other's; warp 1 lets warp 0 begin), and each turn
// appends its warp to a log in shared memory. A count that disagrees with the waiters' is an error.
TEST_F(CpuKernels, BarArriveLetsTheWarpsThatWaitGoOn) {
  Module m = build(R"(extern "C" __global__ void turns(int* out) {
    MOJO_DYNAMIC_SMEM(smem);
    int* log = reinterpret_cast<int*>(smem);
    const int warp = int(mojo::thread_x()) / 32, lane = int(mojo::thread_x()) % 32;
    if (mojo::thread_x() == 0) log[0] = 0;
    mojo::sync_block();
    if (warp == 1) mojo::arrive_warps(1, 64);
    for (int turn = 0; turn < 4; ++turn) {
      mojo::sync_warps(1 + warp, 64);
      if (lane == 0) log[1 + log[0]++] = warp;
      mojo::arrive_warps(2 - warp, 64);
    }
    mojo::sync_block();
    if (mojo::thread_x() < 9) out[mojo::thread_x()] = log[mojo::thread_x()];
  }
  extern "C" __global__ void miscounted(int*) {
    if (mojo::thread_x() < 32) mojo::sync_warps(1, 96);
    else mojo::arrive_warps(1, 64);
  })",
                   {"turns", "miscounted"});
  DeviceBuffer out(9 * 4);
  DevicePtr p = out.ptr();
  void* args[] = {&p};
  m.function("turns").set_max_dynamic_shared(64);
  launch(m.function("turns"), {1, 1, 1}, {64, 1, 1}, 64, nullptr, args);
  std::vector<int> got(9);
  out.copy_to_host(got.data(), 9 * 4);
  EXPECT_EQ(got, (std::vector<int>{8, 0, 1, 0, 1, 0, 1, 0, 1})) << "eight turns, the warps alternating";
  EXPECT_EQ(test::error_of<DeviceError>([&] {
              launch(m.function("miscounted"), {1, 1, 1}, {96, 1, 1}, 0, nullptr, args);
            }),
            "cpu device: kernel miscounted: block (0, 0, 0), thread 32: bar.arrive 1 with 64 threads while 32 threads "
            "wait at it with 96");
}

TEST_F(CpuKernels, DivergentCollectivesAreNamed) {
  Module m = build(R"(extern "C" __global__ void diverge(float* out) {
    const unsigned t = mojo::thread_x();
    float v = float(t);
    if (t % 2 == 0) v = mojo::shfl_xor(v, 1);  // one shuffle, then the barrier
    else v = mojo::group_reduce<32>(v);        // five shuffles: the second meets no partner
    mojo::sync_block();
    out[t] = v;
  }
  extern "C" __global__ void exits_early(float* out) {
    const unsigned t = mojo::thread_x();
    if (t == 5) return;
    out[t] = mojo::shfl_xor(1.f, 1);
  })",
                   {"diverge", "exits_early"});
  DeviceBuffer out(32 * 4);
  DevicePtr p = out.ptr();
  void* args[] = {&p};
  const std::string msg = test::error_of<DeviceError>([&] {
    launch(m.function("diverge"), {1, 1, 1}, {32, 1, 1}, 0, nullptr, args);
  });
  EXPECT_NE(msg.find("cpu device: kernel diverge: block (0, 0, 0) deadlocked: no thread can go on (a GPU would hang)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("threads 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30 wait at bar.sync 0 (all "
                     "threads; 16 of 32 arrived)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("wait at shfl.sync.bfly (warp 0: 16 of its lanes arrived)"), std::string::npos) << msg;
  EXPECT_EQ(test::error_of<DeviceError>([&] {
              launch(m.function("exits_early"), {1, 1, 1}, {32, 1, 1}, 0, nullptr, args);
            }),
            "cpu device: kernel exits_early: block (0, 0, 0), thread 5: thread 5 exited while its warp waits at "
            "shfl.sync.bfly");
}

TEST_F(CpuKernels, SharedMemoryAndGeometryLimits) {
  Module m = build(R"(extern "C" __global__ void touch(int* out) {
    MOJO_DYNAMIC_SMEM(smem);
    smem[mojo::thread_x()] = 1;
    mojo::sync_block();
    out[mojo::thread_x()] = smem[mojo::thread_x()];
  })",
                   {"touch"});
  DeviceBuffer out(1024 * 4);
  DevicePtr p = out.ptr();
  void* args[] = {&p};
  const Function f = m.function("touch");
  EXPECT_NO_THROW(launch(f, {1, 1, 1}, {1024, 1, 1}, 1024, nullptr, args));
  EXPECT_EQ(test::error_of<DeviceError>([&] {
              launch(f, {1, 1, 1}, {32, 1, 1}, 64 * 1024, nullptr, args);
            }),
            "cpu device: kernel touch: 65536 bytes of dynamic shared memory, more than the 49152 the function allows "
            "(Function::set_max_dynamic_shared raises it, as cuFuncSetAttribute does)");
  f.set_max_dynamic_shared(64 * 1024);
  EXPECT_NO_THROW(launch(f, {1, 1, 1}, {32, 1, 1}, 64 * 1024, nullptr, args));
  EXPECT_EQ(test::error_of<DeviceError>([&] { f.set_max_dynamic_shared(200 * 1024); }),
            "cpu device: 204800 bytes of dynamic shared memory; sm_80 allows at most 166912");
  EXPECT_EQ(test::error_of<DeviceError>([&] {
              launch(f, {1, 1, 1}, {2048, 1, 1}, 0, nullptr, args);
            }),
            "cpu device: kernel touch: block (2048, 1, 1): the CPU device runs 1-D blocks of 1 to 1024 threads");
  EXPECT_EQ(test::error_of<DeviceError>([&] {
              launch(f, {1, 70000, 1}, {32, 1, 1}, 0, nullptr, args);
            }),
            "cpu device: kernel touch: grid (1, 70000, 1) is outside what sm_80 allows (x < 2^31, y and z <= 65535)");
}

TEST_F(CpuKernels, ConversionsMatchTheReferenceBitForBit) {
  Module m = build(R"(extern "C" __global__ void convert(const unsigned* in, unsigned short* f16, unsigned short* bf16,
                                                          unsigned* back, int n) {
    for (int i = 0; i < n; ++i) {
      const float v = mojo::bits_to_float(in[i]);
      f16[i] = mojo::from_float<mojo::f16>(v).bits;
      bf16[i] = mojo::from_float<mojo::bf16>(v).bits;
      back[i] = mojo::float_to_bits(mojo::to_float(mojo::from_float<mojo::f16>(v)));
    }
  })",
                   {"convert"});
  // Ties, subnormals of both formats, overflow, infinities, NaN, and a sweep of random bit patterns.
  std::vector<std::uint32_t> in = {0x3f800000, 0x3f801000, 0x3f803000, 0x33800000, 0x33000000, 0x33000001, 0x387fc000,
                                   0x477ff000, 0x477fefff, 0x7f800000, 0xff800000, 0x7fc00001, 0x80000000, 0x00000001,
                                   0x3f808000, 0x3f818000, 0xc7800000, 0x38800000, 0x3c00c000};
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) in.push_back(rng());
  int n = int(in.size());
  DeviceBuffer ib(in.size() * 4), hb(in.size() * 2), bb(in.size() * 2), back(in.size() * 4);
  ib.copy_from_host(in.data(), in.size() * 4);
  DevicePtr p[4] = {ib.ptr(), hb.ptr(), bb.ptr(), back.ptr()};
  void* args[] = {&p[0], &p[1], &p[2], &p[3], &n};
  launch(m.function("convert"), {1, 1, 1}, {1, 1, 1}, 0, nullptr, args);
  std::vector<std::uint16_t> h(in.size()), b(in.size());
  std::vector<std::uint32_t> r(in.size());
  hb.copy_to_host(h.data(), h.size() * 2);
  bb.copy_to_host(b.data(), b.size() * 2);
  back.copy_to_host(r.data(), r.size() * 4);
  for (std::size_t i = 0; i < in.size(); ++i) {
    float f;
    std::memcpy(&f, &in[i], 4);
    if (std::isnan(f)) {
      EXPECT_EQ(h[i] & 0x7c00, 0x7c00) << "NaN stays NaN";
      EXPECT_NE(h[i] & 0x3ff, 0);
      EXPECT_EQ(b[i] & 0x7f80, 0x7f80);
      EXPECT_NE(b[i] & 0x7f, 0);
      EXPECT_EQ(r[i], 0x7fffffffu) << "cvt.f32.f16 of any NaN gives the canonical NaN, as the H100 does";
      continue;
    }
    ASSERT_EQ(h[i], reference::float_to_f16(f)) << fmt::format("f16 of 0x{:08x}", in[i]);
    ASSERT_EQ(b[i], reference::float_to_bf16(f)) << fmt::format("bf16 of 0x{:08x}", in[i]);
    const float widened = reference::f16_to_float(h[i]);
    std::uint32_t bits;
    std::memcpy(&bits, &widened, 4);
    ASSERT_EQ(r[i], bits) << fmt::format("f16 0x{:04x} back to f32", h[i]);
  }
}

TEST_F(CpuKernels, SchedulesAreReproducibleAndExposeOrderBugs) {
  // A race: thread 1 reads what thread 0 writes, with no barrier between.
  Module m = build(R"(extern "C" __global__ void racy(unsigned* out) {
    MOJO_DYNAMIC_SMEM(smem);
    unsigned* cell = reinterpret_cast<unsigned*>(smem);
    if (mojo::thread_x() == 0) *cell = 7u;
    if (mojo::thread_x() == 1) out[0] = *cell;
  })",
                   {"racy"});
  auto run = [&](const char* schedule) {
    test::ScopedEnv env("MOJO_JIT_CPU_SCHEDULE", schedule);
    DeviceBuffer out(4);
    DevicePtr p = out.ptr();
    void* args[] = {&p};
    launch(m.function("racy"), {1, 1, 1}, {64, 1, 1}, 16, nullptr, args);
    unsigned v = 0;
    out.copy_to_host(&v, 4);
    return v;
  };
  EXPECT_EQ(run("forward"), 7u) << "thread 0 ran first";
  EXPECT_EQ(run("reverse"), 0xffffffffu) << "thread 1 read shared memory before thread 0 wrote it";
  EXPECT_EQ(run("random:12345"), run("random:12345")) << "a seed gives the same order every time";
  EXPECT_EQ(test::error_of<InvalidArgumentError>([&] { run("sideways"); }),
            "MOJO_JIT_CPU_SCHEDULE='sideways': expected forward, reverse or random:SEED (SEED a number)");
}

TEST(CpuDevice, MissingHostCompilerNamesWhatToInstall) {
  test::ScopedEnv env("MOJO_JIT_HOST_CXX", "/nonexistent/g++");
  test::TempDir cache;
  RuntimeOptions o;
  o.cache_dir = cache.path();
  o.device = "cpu";
  Runtime rt(o);
  const TensorSpec x(DType::f32, {2, 64}), w(DType::f32, {64});
  DeviceBuffer xb(x.nbytes()), wb(w.nbytes()), ob(x.nbytes());
  const std::string msg = test::error_of<CompileError>([&] { rt.launch("rms_norm", {ob.as(x), xb.as(x), wb.as(w)}); });
  EXPECT_NE(msg.find("no host C++ compiler '/nonexistent/g++' found: install g++ (apt-get install g++) or set "
                     "MOJO_JIT_HOST_CXX"),
            std::string::npos)
      << msg;
  EXPECT_EQ(rt.stats().compiles, 0u);
}

TEST(CpuDevice, DeviceSpecsAndTheirErrors) {
  EXPECT_EQ(Device::open("cpu").target(), Target::parse("sm_80"));
  const Device hopper = Device::open("cpu:sm_90a");
  EXPECT_TRUE(hopper.is_cpu());
  EXPECT_EQ(hopper.name(), "cpu (emulating sm_90a)");
  EXPECT_EQ(hopper.sm_count(), 132);
  EXPECT_EQ(test::error_of<InvalidArgumentError>([] { Device::open("tpu"); }),
            "device 'tpu': expected cuda, cuda:N, cpu, cpu:ARCH or cpu:ARCH,sms=N (e.g. cpu:sm_90a, cpu:sm_90a,sms=4)");
  EXPECT_THROW(Device::open("cpu:volta"), ArchError);
  const Device few = Device::open("cpu:sm_90a,sms=4");
  EXPECT_EQ(few.target(), Target::parse("sm_90a"));
  EXPECT_EQ(few.sm_count(), 4);
  EXPECT_EQ(few.name(), "cpu (emulating sm_90a with 4 SMs)");
  for (const char* bad : {"cpu:sm_90a,sms=0", "cpu:sm_90a,sms=1025", "cpu:sm_90a,sms=", "cpu:sm_90a,sms=2x",
                          "cpu:sm_90a,threads=2", "cpu:sm_90a,"})
    EXPECT_EQ(test::error_of<InvalidArgumentError>([&] { Device::open(bad); }),
              fmt::format("device '{}': expected cuda, cuda:N, cpu, cpu:ARCH or cpu:ARCH,sms=N (e.g. cpu:sm_90a, "
                          "cpu:sm_90a,sms=4)",
                          bad));
  EXPECT_THROW(Device::open("cpu:volta,sms=4"), ArchError);
}

TEST(CpuDevice, TensorMapsAreCheckedAsTheDriverChecksThem) {
  const Device cpu = Device::cpu(Target::parse("sm_90a"));
  DeviceBuffer buffer(64 * 1024);
  EXPECT_NO_THROW(tile_tensor_map(buffer.ptr(), DType::bf16, 64, 100, 1, 64, 0, 64, 64));
  auto error = [&](DevicePtr base, std::int64_t row_stride, unsigned box_cols, unsigned box_rows) {
    return test::error_of<DeviceError>(
        [&] { tile_tensor_map(base, DType::bf16, 64, 100, 1, row_stride, 0, box_cols, box_rows); });
  };
  EXPECT_NE(error(buffer.ptr() + 8, 64, 64, 64).find("the global address is not 16-byte aligned"), std::string::npos);
  EXPECT_NE(error(buffer.ptr(), 68, 64, 64).find("a stride is not a multiple of 16 bytes"), std::string::npos);
  EXPECT_NE(error(buffer.ptr(), 64, 128, 64).find("the box's inner dimension exceeds the 128-byte swizzle span"),
            std::string::npos);
  EXPECT_NE(error(buffer.ptr(), 64, 64, 300).find("a box dimension is 0 or above 256"), std::string::npos);
  EXPECT_THROW(tile_tensor_map(buffer.ptr(), DType::f32, 64, 100, 1, 64, 0, 64, 64), InvalidArgumentError);
}

TEST(CpuDevice, BlocksOnSeveralOsThreadsGiveTheSameBytes) {
  test::TempDir cache;
  RuntimeOptions o;
  o.cache_dir = cache.path();
  o.device = "cpu:sm_90a";
  Runtime rt(o);
  const TensorSpec a(DType::bf16, {300, 136}), b(DType::bf16, {200, 136}), c(DType::bf16, {300, 200});
  const auto ah = reference::encode(DType::bf16, test::random_values(300 * 136, 7));
  const auto bh = reference::encode(DType::bf16, test::random_values(200 * 136, 8));
  auto run = [&](const char* threads) {
    test::ScopedEnv env("MOJO_JIT_CPU_THREADS", threads);
    GpuTensor ad(a, ah), bd(b, bh), cd(c);
    rt.launch("gemm", {cd, ad, bd}, {{"trans_b", 1}, {"path", 90}});
    return cd.read();
  };
  const auto one = run("1");
  EXPECT_EQ(run("2"), one);
  EXPECT_EQ(run("3"), one);
  EXPECT_EQ(test::error_of<InvalidArgumentError>([&] { run("many"); }),
            "MOJO_JIT_CPU_THREADS='many': expected a number of OS threads, a whole number from 1 to 256");
}

TEST(CpuDevice, FreshMemoryIsPoisoned) {
  const Device cpu = Device::cpu(Target::parse("sm_80"));
  auto bytes_of = [](std::size_t n) {
    DeviceBuffer b(n);
    std::vector<std::uint8_t> h(n);
    b.copy_to_host(h.data(), n);
    return h;
  };
  if (std::getenv("MOJO_JIT_CPU_POISON") == nullptr)
    EXPECT_EQ(bytes_of(100), std::vector<std::uint8_t>(100, 0xff)) << "NaN bytes by default";
  cpu::set_poison(cpu::Poison::zero);
  EXPECT_EQ(bytes_of(100), std::vector<std::uint8_t>(100, 0));
  cpu::set_poison(cpu::Poison::random);
  const auto r1 = bytes_of(4096), r2 = bytes_of(4096);
  EXPECT_NE(r1, r2) << "each allocation its own random bytes";
  EXPECT_GT(std::count(r1.begin(), r1.end(), 0xff), 0);
  EXPECT_LT(std::count(r1.begin(), r1.end(), 0xff), 100);
  cpu::set_poison(std::nullopt);
}

// Kernels written here that race, each in a child process of this test
// binary under the TSan build (whose report ends the process), and the same
// kernels with their barrier, which must not race.
class CpuRaces : public CpuKernels {
 protected:
  // A block of two warps shares `stage` (64 floats, filled from `in` before a barrier). Warp 0 sums it into
  // `out`; warp 1 then refills it with the same values, for the next round of a ring. Without the barrier
  // between the two, warp 1 writes what warp 0 may still read (WAR): the values stay right in every order.
  static std::string ring_kernel(bool barrier) {
    return fmt::format(R"(extern "C" __global__ void refill_ring(float* out, const float* in) {{
  float* stage = reinterpret_cast<float*>(mojo::cpu::api().dynamic_smem());
  const unsigned tid = mojo::cpu::api().self()->tid;
  stage[tid] = in[tid];
  mojo::cpu::api().barrier(0, 0);
  if (tid < 32) out[tid] = stage[tid] + stage[tid + 32];
  {}
  if (tid >= 32) stage[tid - 32] = in[tid - 32];
}})",
                       barrier ? "mojo::cpu::api().barrier(0, 0);" : "");
  }
  void run_ring(bool barrier) {
    Module m = build(ring_kernel(barrier), {"refill_ring"});
    const auto in = reference::encode(DType::f32, test::random_values(64, 9));
    DeviceBuffer out(32 * 4), input(64 * 4);
    input.copy_from_host(in.data(), in.size());
    DevicePtr o = out.ptr(), i = input.ptr();
    void* args[] = {&o, &i};
    m.function("refill_ring").set_max_dynamic_shared(256);
    launch(m.function("refill_ring"), {1, 1, 1}, {64, 1, 1}, 256, nullptr, args);
    std::vector<float> got(32);
    out.copy_to_host(got.data(), 128);
    const auto* x = reinterpret_cast<const float*>(in.data());
    for (int t = 0; t < 32; ++t) EXPECT_EQ(got[std::size_t(t)], x[t] + x[t + 32]) << "the values are right either way";
  }
};

// The races only the TSan build sees: a child process runs the kernel; its report names the race.
std::string child_report(const std::string& test) {
  const test::TempDir dir;
  const std::string log = (dir.path() / "tsan.txt").string();
  const char* inherited = std::getenv("TSAN_OPTIONS");  // the suppressions, say
  const std::string command = fmt::format(
      "TSAN_OPTIONS='{} halt_on_error=1 exitcode=66 log_path={}' /proc/{}/exe --gtest_also_run_disabled_tests "
      "--gtest_filter='{}' >/dev/null 2>&1",
      inherited != nullptr ? inherited : "", log, getpid(), test);
  const int status = std::system(command.c_str());
  std::string report;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) report += test::read_file(entry.path());
  return fmt::format("exit {}\n{}", WIFEXITED(status) ? WEXITSTATUS(status) : -1, report);
}

// Split paged decode (head_dim 64, 8 query heads a KV head, the keys over 8 blocks: the shape the H100's
// racecheck flagged), with or without the barrier before its groups' rows meet in shared memory. Without
// it, a group that finished its keys writes maxima and sums over group 0's K/V ring while group 0 still
// reads it (whether the values show it depends on the order the CPU device runs its fibers in).
void paged_decode(bool barrier) {
  test::TempDir cache, templates;
  RuntimeOptions o;
  o.cache_dir = cache.path();
  o.device = "cpu";
  if (!barrier) {
    ASSERT_EQ(test::write_template_variant(templates.path(), "attention.cu", "  mojo::sync_block();\n  if (lane % 4 == 0)",
                                           "  if (lane % 4 == 0)"),
              1)
        << "attention.cu changed: update this test";
    o.template_paths = {templates.path()};
  }
  Runtime rt(o);
  const OpDef& op = find_op("paged_decode_gqa");
  const auto specs =
      op.specs_from_shapes(DType::bf16, parse_shapes(op, "q=1x8x64 k_cache=300x16x1x64 block_tables=1x257"));
  const CheckReport r = check_op(rt, "paged_decode_gqa", specs, {});
  EXPECT_NE(r.kernel.find("splits_8"), std::string::npos) << r.kernel;
  if (barrier) EXPECT_TRUE(r.pass()) << r.kernel;
}

TEST(CpuRacesInTemplates, DISABLED_PagedDecodeWithoutTheBarrierBeforeItsGroupsMeet) { paged_decode(false); }
TEST(CpuRacesInTemplates, DISABLED_PagedDecodeSplitOverTheKeys) { paged_decode(true); }

TEST(CpuRacesInTemplates, TheRaceDetectorSeesSplitPagedDecodeWithoutItsBarrier) {
#if !MOJO_TSAN
  paged_decode(false);  // whatever the values: only the TSan build can tell a race for certain
  GTEST_SKIP() << "the race detector is the TSan build's (cmake --preset tsan)";
#else
  const std::string racy = child_report("CpuRacesInTemplates.DISABLED_PagedDecodeWithoutTheBarrierBeforeItsGroupsMeet");
  EXPECT_NE(racy.find("ThreadSanitizer: data race"), std::string::npos) << racy;
  EXPECT_NE(racy.find("attention.cu"), std::string::npos) << "the report names the template's lines: " << racy;
  const std::string clean = child_report("CpuRacesInTemplates.DISABLED_PagedDecodeSplitOverTheKeys");
  EXPECT_NE(clean.find("exit 0"), std::string::npos) << "the real template races: " << clean;
#endif
}

TEST_F(CpuRaces, DISABLED_RingRefilledWithoutItsBarrier) { run_ring(false); }
TEST_F(CpuRaces, DISABLED_RingRefilledAfterItsBarrier) { run_ring(true); }

TEST_F(CpuRaces, TheRaceDetectorSeesAWarRaceThatLeavesTheValuesRight) {
#if !MOJO_TSAN
  run_ring(false);  // right values: only the TSan build can tell
  GTEST_SKIP() << "the race detector is the TSan build's (cmake --preset tsan)";
#else
  const std::string racy = child_report("CpuRaces.DISABLED_RingRefilledWithoutItsBarrier");
  EXPECT_NE(racy.find("exit 66"), std::string::npos) << racy;
  EXPECT_NE(racy.find("ThreadSanitizer: data race"), std::string::npos) << racy;
  EXPECT_NE(racy.find("refill_ring"), std::string::npos) << "the report names the kernel: " << racy;
  EXPECT_NE(racy.find("GPU thread"), std::string::npos) << "the report names the GPU threads: " << racy;
  const std::string clean = child_report("CpuRaces.DISABLED_RingRefilledAfterItsBarrier");
  EXPECT_NE(clean.find("exit 0"), std::string::npos) << clean;
#endif
}

// While a thread captures a stream, a GPU refuses its synchronous calls (CUDA's thread-local capture mode,
// Graph::capture's): the CPU device refuses the same ones, with the driver's error, so that a test here finds
// what would fail there. Allocating and launching are allowed; so is waiting on a stream no one captures.
TEST(CpuDevice, RefusesWhatAGpuRefusesWhileAThreadCaptures) {
  const Device cpu = Device::cpu(Target::parse("sm_80"));
  DeviceBuffer buffer(64);
  std::vector<std::uint8_t> host(64, 7);
  Stream captured, other;
  Event in_capture;
  const auto refused = [](const char* call, auto f) {
    try {
      f();
      ADD_FAILURE() << call << " was allowed inside a capture";
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.code(), 900);
      EXPECT_TRUE(std::string_view(e.what()).starts_with(
          fmt::format("{} failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (operation not permitted when stream is "
                      "capturing",
                      call)))
          << e.what();
    }
  };
  EXPECT_FALSE(is_capturing(captured));
  const Graph graph = Graph::capture(captured, [&] {
    EXPECT_TRUE(is_capturing(captured));
    EXPECT_FALSE(is_capturing(other));
    refused("cuMemcpyHtoD", [&] { buffer.copy_from_host(host.data(), host.size()); });
    refused("cuMemcpyDtoH", [&] { buffer.copy_to_host(host.data(), host.size()); });
    refused("cuMemsetD8", [&] { buffer.fill_bytes(0); });
    refused("cuStreamSynchronize", [&] { captured.synchronize(); });
    refused("cuStreamSynchronize", [&] { copy_to_host(host.data(), buffer.ptr(), host.size(), captured); });
    refused("cuCtxSynchronize", [&] { cpu.synchronize(); });
    DeviceBuffer scratch(128);  // allowed: the GPU allocates in the relaxed mode
    other.synchronize();
    in_capture.record(captured);
  });
  refused("cuEventSynchronize", [&] { in_capture.synchronize(); });
  EXPECT_FALSE(is_capturing(captured));
  buffer.copy_from_host(host.data(), host.size());  // the capture is over
  captured.synchronize();
  graph.launch(captured);
}

TEST(CpuDevice, GraphsReplayWhatTheStreamRecorded) {
  test::TempDir cache;
  RuntimeOptions o;
  o.cache_dir = cache.path();
  o.device = "cpu";
  Runtime rt(o);
  const TensorSpec x(DType::f32, {4, 256}), w(DType::f32, {256});
  const auto xh = reference::encode(DType::f32, test::random_values(4 * 256, 5));
  const auto wh = reference::encode(DType::f32, test::random_values(256, 6));
  GpuTensor xd(x, xh), wd(w, wh), out(x);
  Stream stream;
  Graph g = Graph::capture(stream, [&] { rt.launch("rms_norm", {out, xd, wd}, {{"eps", 1e-5f}}, stream); });
  EXPECT_EQ(out.read(), std::vector<std::uint8_t>(x.nbytes(), 0xff)) << "capturing runs nothing";
  g.launch(stream);
  stream.synchronize();
  std::vector<std::uint8_t> want(x.nbytes());
  reference::rms_norm(DType::f32, xh.data(), wh.data(), want.data(), 4, 256, 1e-5);
  test::expect_close(DType::f32, out.read(), want, "out");
}

}  // namespace

namespace mojo {
namespace {

// A plan's scratch memory: one buffer per stream, the same pointer while it is large enough; growing keeps
// the outgrown buffer alive (a captured graph or queued work may still use it: under ASan, writing it after
// the growth would be a use after free).
TEST(WorkspaceArena, OneBufferPerStreamThatGrowsAndKeepsWhatItOutgrew) {
  const Device cpu = Device::cpu(Target::parse("sm_80"));
  WorkspaceArena arena;
  Stream a, b;
  const DevicePtr first = arena.get(a, 100, 0).scratch;
  EXPECT_EQ(arena.get(a, 64, 0).scratch, first) << "large enough: the same buffer";
  EXPECT_EQ(arena.get(a, 64, 0).sync, 0u) << "no sync words asked for";
  EXPECT_NE(arena.get(b, 100, 0).scratch, first) << "another stream, another buffer";
  const DevicePtr grown = arena.get(a, 300, 0).scratch;
  EXPECT_NE(grown, first);
  EXPECT_EQ(grown % 256, 0u);
  std::memset(reinterpret_cast<void*>(first), 0, 100);  // still allocated
  EXPECT_EQ(arena.bytes(), 100u + 100u + 300u);
}

// Sync words are zero whenever a launch gets them: zeroed when allocated (in stream order, and again after a
// capture, which ran nothing), and again after a launch that failed (forget_sync) may have left them set. Between
// launches they stay as the kernels left them (zero), so the arena writes nothing on a launch's hot path.
TEST(WorkspaceArena, SyncWordsAreZeroWhenALaunchGetsThem) {
  const Device cpu = Device::cpu(Target::parse("sm_80"));
  WorkspaceArena arena;
  Stream a;
  const auto words = [](DevicePtr p) { return reinterpret_cast<unsigned*>(p); };
  const auto all_zero = [&](DevicePtr p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      if (words(p)[i] != 0) return false;
    return true;
  };
  const Workspace w = arena.get(a, 0, 10);
  EXPECT_EQ(w.scratch, 0u);
  ASSERT_NE(w.sync, 0u);
  EXPECT_EQ(w.sync % 256, 0u);
  EXPECT_TRUE(all_zero(w.sync, 10)) << "a new buffer starts poisoned on the cpu device; the arena zeroes it";
  words(w.sync)[3] = 7;
  EXPECT_EQ(arena.get(a, 0, 10).sync, w.sync);
  EXPECT_EQ(words(w.sync)[3], 7u) << "not zeroed again: the kernels keep them zero";
  arena.forget_sync(a);
  EXPECT_EQ(arena.get(a, 0, 10).sync, w.sync);
  EXPECT_EQ(words(w.sync)[3], 0u) << "zeroed again after a failed launch";

  DevicePtr grown = 0;
  const Graph g = Graph::capture(a, [&] { grown = arena.get(a, 0, 100).sync; });
  ASSERT_NE(grown, w.sync);
  std::memset(words(grown), 0xab, 100 * sizeof(unsigned));  // as if the capture's memory came uncleared
  EXPECT_EQ(arena.get(a, 0, 100).sync, grown);
  EXPECT_TRUE(all_zero(grown, 100)) << "grown in a capture, which ran nothing: zeroed at the next launch";
  std::memset(words(grown), 0xab, 100 * sizeof(unsigned));
  g.launch(a);
  EXPECT_TRUE(all_zero(grown, 100)) << "the graph zeroes what it allocated, before its kernels";
  EXPECT_EQ(arena.bytes(), 10u * 4 + 100u * 4);
}

// The public device types hold the backend that made them: an empty or moved-from one is an error that says so,
// never a call through a null backend.
TEST(DeviceObjects, EmptyOrMovedFromObjectsAreErrorsNotCrashes) {
  const Device cpu = Device::cpu(Target::parse("sm_80"));
  EXPECT_TRUE(cpu.is_cpu());
  EXPECT_FALSE(Device().is_cpu());
  const Function empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.handle(), nullptr);
  EXPECT_THROW(empty.num_registers(), InvalidArgumentError);
  EXPECT_THROW(launch(empty, Dim3{}, Dim3{}, 0, nullptr, nullptr), InvalidArgumentError);
  Event start, moved;
  const Event taken = std::move(moved);
  EXPECT_THROW(moved.record(), InvalidArgumentError);
  EXPECT_THROW(Event::elapsed_ms(start, moved), InvalidArgumentError);
  start.record();
  EXPECT_GE(Event::elapsed_ms(start, start), 0.f);
}

}  // namespace
}  // namespace mojo
