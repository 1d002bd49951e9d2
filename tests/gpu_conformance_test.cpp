// The CPU device never executes the preludes' PTX: each primitive here runs
// on a GPU and on the emulator with the same inputs, and the two must agree
// bit for bit where the PTX ISA is exact (conversions, shuffles, ldmatrix,
// cp.async, TMA with its swizzle and zero fill) and within a stated
// tolerance where it is not (the .approx math, mma.sync, wgmma). Every probe
// is built for both (NVRTC cubin through ptxas, and the host library) and
// run on the CPU device everywhere; the comparison needs a GPU (and a Hopper
// for TMA and wgmma) and skips without one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gpu_util.hpp"
#include "mojo/templates.hpp"

using namespace mojo;

namespace {

// The probes, one kernel each; templates: the preludes.
constexpr const char* kProbes = R"(
extern "C" __global__ void probe_math(const unsigned* in, unsigned* out, int n) {
  for (int i = (int)mojo::thread_x(); i < n; i += (int)mojo::block_dim_x()) {
    const float v = mojo::bits_to_float(in[i]);
    mojo::f16 h;
    h.bits = (unsigned short)(in[i] & 0xffff);
    out[8 * i + 0] = mojo::from_float<mojo::f16>(v).bits;
    out[8 * i + 1] = mojo::from_float<mojo::bf16>(v).bits;
    out[8 * i + 2] = mojo::float_to_bits(mojo::to_float(h));
    out[8 * i + 3] = mojo::to_tf32(in[i]);
    out[8 * i + 4] = mojo::float_to_bits(mojo::exp2_approx(v));
    out[8 * i + 5] = mojo::float_to_bits(mojo::rsqrt_approx(v));
    out[8 * i + 6] = mojo::float_to_bits(mojo::rcp_approx(v));
    out[8 * i + 7] = mojo::float_to_bits(mojo::log2_approx(v));
  }
}
extern "C" __global__ void probe_shfl(unsigned* out) {
  const unsigned t = mojo::thread_x();
  for (int m = 0; m < 5; ++m)
    out[m * 64 + t] = mojo::float_to_bits(mojo::shfl_xor(mojo::bits_to_float(t * 2654435761u), 1 << m));
}
extern "C" __global__ void probe_ldmatrix(const unsigned* in, unsigned* out) {
  MOJO_DYNAMIC_SMEM(smem);
  const unsigned lane = mojo::thread_x();
  unsigned* words = reinterpret_cast<unsigned*>(smem);
  for (int i = 0; i < 4; ++i) words[lane * 4 + i] = in[lane * 4 + i];
  mojo::sync_block();
  unsigned r[4], rt[4];
  mojo::ldmatrix_x4(r, mojo::smem_address(smem + 16 * lane));  // lane l: row l % 8 of matrix l / 8
  mojo::ldmatrix_x4_trans(rt, mojo::smem_address(smem + 16 * lane));
  for (int i = 0; i < 4; ++i) out[lane * 8 + i] = r[i], out[lane * 8 + 4 + i] = rt[i];
}
extern "C" __global__ void probe_mma(const unsigned* a, const unsigned* b, const float* c, float* d) {
  const unsigned lane = mojo::thread_x();
  unsigned fa[4], fb[2];
  for (int i = 0; i < 4; ++i) fa[i] = a[lane * 4 + i];
  for (int i = 0; i < 2; ++i) fb[i] = b[lane * 2 + i];
  float f16[4], bf16[4], tf32[4];
  for (int i = 0; i < 4; ++i) f16[i] = bf16[i] = tf32[i] = c[lane * 4 + i];
  mojo::mma<mojo::f16>(f16, fa, fb);
  mojo::mma<mojo::bf16>(bf16, fa, fb);
  unsigned ta[4], tb[2];
  for (int i = 0; i < 4; ++i) ta[i] = mojo::to_tf32(fa[i] & 0x3fffffffu);  // finite f32 of moderate size
  for (int i = 0; i < 2; ++i) tb[i] = mojo::to_tf32(fb[i] & 0x3fffffffu);
  mojo::mma<float>(tf32, ta, tb);
  for (int i = 0; i < 4; ++i) d[lane * 12 + i] = f16[i], d[lane * 12 + 4 + i] = bf16[i], d[lane * 12 + 8 + i] = tf32[i];
}
extern "C" __global__ void probe_cp_async(const unsigned char* src, unsigned char* out) {
  MOJO_DYNAMIC_SMEM(smem);
  const int lane = (int)mojo::thread_x();
  if (lane <= 16) mojo::cp_async_16(mojo::smem_address(smem + 16 * lane), src + 16 * lane, lane);  // lane bytes, zeros after
  mojo::cp_async_commit();
  mojo::cp_async_wait<0>();
  mojo::sync_block();
  for (int i = lane; i < 17 * 16; i += 32) out[i] = smem[i];
}
)";

// Hopper only: a TMA box across the tensor's edge, and wgmma on what it loaded.
constexpr const char* kHopperProbes = R"(
#if __CUDA_ARCH__ >= 900 || defined(MOJO_CPU)
// A [64 x 64] tile of a bf16 [rows, 64] tensor from row r0 (rows past the end arrive as zeros), 128-byte swizzled.
extern "C" __global__ void probe_tma(unsigned char* out, int r0, const mojo::TensorMap) {
  MOJO_DYNAMIC_SMEM(smem);
  const unsigned base = (mojo::smem_address(smem) + 1023u) & ~1023u, bar = base + 8192;
  if (mojo::thread_x() == 0) {
    mojo::mbarrier_init(bar, 1);
    mojo::fence_barrier_init();
  }
  mojo::sync_block();
  if (mojo::thread_x() == 0) {
    mojo::mbarrier_arrive_expect_tx(bar, 8192);
    mojo::tma_load_3d(base, MOJO_PARAM_ADDRESS(probe_tma, 2), bar, 0, r0, 0);
  }
  mojo::mbarrier_wait(bar, 0);
  const unsigned char* tile = smem + (base - mojo::smem_address(smem));
  for (int i = (int)mojo::thread_x(); i < 8192; i += 128) out[i] = tile[i];
}
// d (64 x 128) = a (64 x 64, K-major) * b (128 x 64, K-major), both loaded by TMA, in 4 wgmma k16 steps.
extern "C" __global__ void probe_wgmma(float* out, const mojo::TensorMap, const mojo::TensorMap) {
  MOJO_DYNAMIC_SMEM(smem);
  const unsigned base = (mojo::smem_address(smem) + 1023u) & ~1023u, b_tile = base + 8192, bar = base + 8192 + 16384;
  if (mojo::thread_x() == 0) {
    mojo::mbarrier_init(bar, 1);
    mojo::fence_barrier_init();
  }
  mojo::sync_block();
  if (mojo::thread_x() == 0) {
    mojo::mbarrier_arrive_expect_tx(bar, 8192 + 16384);
    mojo::tma_load_3d(base, MOJO_PARAM_ADDRESS(probe_wgmma, 1), bar, 0, 0, 0);
    mojo::tma_load_3d(b_tile, MOJO_PARAM_ADDRESS(probe_wgmma, 2), bar, 0, 0, 0);
  }
  mojo::mbarrier_wait(bar, 0);
  float acc[64];
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  for (int i = 0; i < 64; ++i) mojo::wgmma_fence_operand(acc[i]);
  mojo::wgmma_fence();
  for (int kk = 0; kk < 4; ++kk)
    mojo::wgmma<mojo::bf16, 128, 0, 0>(acc, mojo::wgmma_descriptor(base + kk * 32), mojo::wgmma_descriptor(b_tile + kk * 32), 1);
  mojo::wgmma_commit();
  mojo::wgmma_wait<0>();
  for (int i = 0; i < 64; ++i) mojo::wgmma_fence_operand(acc[i]);
  for (int i = 0; i < 64; ++i) out[mojo::thread_x() * 64 + i] = acc[i];
}
#endif
)";

// A kernel argument: a buffer (its index), an int, or the TMA descriptor of a
// bf16 [rows, 64] buffer read in boxes of box_rows x 64.
struct Arg {
  enum { buffer, i32, map } kind;
  int value = 0;  // buffer index, int, or the buffer a tensor map covers
  int rows = 0, box_rows = 0;
};

// One probe launch: its buffers' initial bytes and where they end.
struct Probe {
  std::string kernel;
  Dim3 grid, block;
  unsigned smem;
  std::vector<std::vector<std::uint8_t>> buffers;
  std::vector<Arg> args;
};

class Conformance : public ::testing::Test {
 protected:
  // The probes built for `device` (its target; host code for the cpu device).
  Module build(const Device& device, bool hopper) {
    TemplateRegistry templates;
    const std::vector<std::string> preludes = {"mojo_wgmma.cuh"};
    std::string source = (device.is_cpu() ? templates.expand(std::vector<std::string>{"mojo_cpu.cuh", "mojo_wgmma.cuh"})
                                          : templates.expand(preludes)) +
                         kProbes + (hopper ? kHopperProbes : "");
    if (device.is_cpu()) {
      for (const char* k : {"probe_math", "probe_shfl", "probe_ldmatrix", "probe_mma", "probe_cp_async"})
        source += fmt::format("MOJO_CPU_ENTRY({})\n", k);
      if (hopper) source += "MOJO_CPU_ENTRY(probe_tma)\nMOJO_CPU_ENTRY(probe_wgmma)\n";
      return Module::load(
          make_host_compiler()->compile({"probes.cu", source, device.target(), Emit::host, "probes"}).binary);
    }
    return Module::load(
        make_compiler("nvrtc")->compile({"probes.cu", source, device.target(), Emit::cubin, "probes"}).binary);
  }

  // Runs `p` on `device` and returns its buffers afterwards.
  static std::vector<std::vector<std::uint8_t>> run(const Device& device, const Module& module, const Probe& p) {
    device.make_current();
    std::vector<DeviceBuffer> buffers;
    for (const auto& b : p.buffers) {
      buffers.emplace_back(b.size());
      buffers.back().copy_from_host(b.data(), b.size());
    }
    std::vector<DevicePtr> pointers;
    std::vector<int> ints;
    std::vector<TensorMap> maps;
    pointers.reserve(p.args.size()), ints.reserve(p.args.size()), maps.reserve(p.args.size());
    std::vector<void*> args;
    for (const Arg& a : p.args) {
      if (a.kind == Arg::buffer) args.push_back(&pointers.emplace_back(buffers[std::size_t(a.value)].ptr()));
      if (a.kind == Arg::i32) args.push_back(&ints.emplace_back(a.value));
      if (a.kind == Arg::map)
        args.push_back(&maps.emplace_back(tile_tensor_map(buffers[std::size_t(a.value)].ptr(), DType::bf16, 64, a.rows,
                                                          1, 64, 0, 64, unsigned(a.box_rows))));
    }
    const Function f = module.function(p.kernel);
    if (p.smem > 48 * 1024) f.set_max_dynamic_shared(int(p.smem));
    launch(f, p.grid, p.block, p.smem, nullptr, args.data());
    device.synchronize();
    std::vector<std::vector<std::uint8_t>> out;
    for (const DeviceBuffer& b : buffers) {
      out.emplace_back(b.size());
      b.copy_to_host(out.back().data(), b.size());
    }
    return out;
  }

  // The probe on the emulator, and on the GPU where there is one: their buffers, GPU's first.
  std::pair<std::vector<std::vector<std::uint8_t>>, std::vector<std::vector<std::uint8_t>>> both(const Probe& p,
                                                                                                 bool hopper = false) {
    const Target target = gpu ? gpu->target() : Target::parse(hopper ? "sm_90a" : "sm_80");
    const Device cpu = Device::cpu(target);
    auto emulated = run(cpu, build(cpu, hopper), p);
    if (!gpu || (hopper && !(gpu->target() == Target::parse("sm_90a")))) return {{}, emulated};
    return {run(*gpu, build(*gpu, hopper), p), emulated};
  }

  void SetUp() override {
    if (device_available()) gpu = std::make_unique<Device>(Device::open(0));
  }
  // Skips after the emulated side ran, when there was no GPU side to compare with.
  static bool compared(const std::vector<std::vector<std::uint8_t>>& gpu_side) { return !gpu_side.empty(); }

  std::unique_ptr<Device> gpu;
};

std::vector<std::uint8_t> bytes_of(const std::vector<std::uint32_t>& words) {
  std::vector<std::uint8_t> b(words.size() * 4);
  std::memcpy(b.data(), words.data(), b.size());
  return b;
}
std::uint32_t word(const std::vector<std::uint8_t>& b, std::size_t i) {
  std::uint32_t w;
  std::memcpy(&w, b.data() + 4 * i, 4);
  return w;
}
std::vector<std::uint32_t> random_words(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> w(n);
  for (auto& x : w) x = rng();
  return w;
}

}  // namespace

TEST_F(Conformance, BuildsForTheGpuWithoutOne) {
  // ptxas accepts every probe for both targets even where nothing can run them.
  TemplateRegistry templates;
  const std::string source = templates.expand(std::vector<std::string>{"mojo_wgmma.cuh"}) + kProbes + kHopperProbes;
  for (const char* arch : {"sm_80", "sm_90a"})
    EXPECT_NO_THROW(make_compiler("nvrtc")->compile({"probes.cu", source, Target::parse(arch), Emit::cubin, arch}));
}

TEST_F(Conformance, ConversionsAndFastMath) {
  std::vector<std::uint32_t> in = {0x3f800000, 0x3f801000, 0x33000001, 0x387fc000, 0x477ff000, 0x7f800000, 0xff800000,
                                   0x80000000, 0x00000001, 0x3f808000, 0xc2fe0000, 0x42fe0000, 0x00800000, 0x3c00c000};
  for (std::uint32_t w : random_words(4000, 1))
    if ((w & 0x7f800000) != 0x7f800000) in.push_back(w);  // finite: NaN payloads differ by design
  const int n = int(in.size());
  Probe p{"probe_math",
          {1, 1, 1},
          {256, 1, 1},
          0,
          {bytes_of(in), std::vector<std::uint8_t>(in.size() * 32)},
          {{Arg::buffer, 0}, {Arg::buffer, 1}, {Arg::i32, n}}};
  auto [g, c] = both(p);
  if (!compared(g)) GTEST_SKIP() << "no GPU: the emulated side ran, nothing to compare it with";
  for (std::size_t i = 0; i < in.size(); ++i) {
    for (int k = 0; k < 4; ++k)  // conversions: exact
      ASSERT_EQ(word(g[1], 8 * i + k), word(c[1], 8 * i + k)) << fmt::format("conversion {} of 0x{:08x}", k, in[i]);
    for (int k = 4; k < 8; ++k) {  // .approx: within 2^-21 relative (the ISA: about 2 ulp)
      float a, b;
      const std::uint32_t wa = word(g[1], 8 * i + k), wb = word(c[1], 8 * i + k);
      std::memcpy(&a, &wa, 4), std::memcpy(&b, &wb, 4);
      if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b) || a == 0 || b == 0)
        EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b)
            << fmt::format("approx {} of 0x{:08x}: {} vs {}", k, in[i], a, b);
      else
        EXPECT_LE(std::abs(double(a) - b), std::ldexp(std::abs(double(a)), -21))
            << fmt::format("approx {} of 0x{:08x}", k, in[i]);
    }
  }
}

TEST_F(Conformance, ShufflesLdmatrixAndCpAsync) {
  Probe shfl{"probe_shfl", {1, 1, 1}, {64, 1, 1}, 0, {std::vector<std::uint8_t>(5 * 64 * 4)}, {{Arg::buffer, 0}}};
  Probe ldm{"probe_ldmatrix",
            {1, 1, 1},
            {32, 1, 1},
            512,
            {bytes_of(random_words(128, 2)), std::vector<std::uint8_t>(32 * 8 * 4)},
            {{Arg::buffer, 0}, {Arg::buffer, 1}}};
  Probe cp{"probe_cp_async",
           {1, 1, 1},
           {32, 1, 1},
           17 * 16,
           {bytes_of(random_words(17 * 4, 3)), std::vector<std::uint8_t>(17 * 16)},
           {{Arg::buffer, 0}, {Arg::buffer, 1}}};
  auto [gs, cs] = both(shfl);
  auto [gl, cl] = both(ldm);
  auto [gc, cc] = both(cp);
  // The emulated cp.async read `lane` bytes and zero-filled the rest.
  for (int lane = 0; lane <= 16; ++lane)
    for (int i = 0; i < 16; ++i)
      ASSERT_EQ(cc[1][std::size_t(16 * lane + i)], i < lane ? cc[0][std::size_t(16 * lane + i)] : 0)
          << lane << " " << i;
  if (!compared(gs)) GTEST_SKIP() << "no GPU: the emulated side ran, nothing to compare it with";
  EXPECT_EQ(gs[0], cs[0]) << "shfl.sync.bfly";
  EXPECT_EQ(gl[1], cl[1]) << "ldmatrix .x4 and .x4.trans";
  EXPECT_EQ(gc[1], cc[1]) << "cp.async zero fill";
}

TEST_F(Conformance, MmaSync) {
  // Halves in ±[0.05, 2] (bf16 and f16 bit patterns alike from f16 values), accumulators random.
  auto halves = [](std::size_t n, std::uint32_t seed) {
    const auto v = reference::encode(DType::f16, test::random_values(n, seed));
    return v;
  };
  const auto c = reference::encode(DType::f32, test::random_values(32 * 4, 6));
  Probe p{"probe_mma",
          {1, 1, 1},
          {32, 1, 1},
          0,
          {halves(32 * 8, 4), halves(32 * 4, 5), c, std::vector<std::uint8_t>(32 * 12 * 4)},
          {{Arg::buffer, 0}, {Arg::buffer, 1}, {Arg::buffer, 2}, {Arg::buffer, 3}}};
  auto [g, e] = both(p);
  if (!compared(g)) GTEST_SKIP() << "no GPU: the emulated side ran, nothing to compare it with";
  // The tensor cores' summation order and rounding are not specified: fp32 closeness, not bits.
  test::expect_close(DType::f32, g[3], e[3], "mma.sync f16, bf16, tf32", Tolerance{1e-5, 1e-6});
}

TEST_F(Conformance, TmaAndWgmmaOnHopper) {
  // bf16 [100, 64]: the box from row 64 crosses the end (rows 100..127 arrive as zeros).
  const auto tensor = reference::encode(DType::bf16, test::random_values(100 * 64, 7));
  Probe tma{"probe_tma",
            {1, 1, 1},
            {128, 1, 1},
            8192 + 2048,
            {std::vector<std::uint8_t>(8192), tensor},
            {{Arg::buffer, 0}, {Arg::i32, 64}, {Arg::map, 1, 100, 64}}};
  auto [gt, ct] = both(tma, true);
  // On the emulator: rows past the tensor are zeros, the others are the tensor's rows, swizzled.
  for (int r = 36; r < 64; ++r)
    for (int b = 0; b < 128; ++b) ASSERT_EQ(ct[0][std::size_t(r * 128 + b)], 0) << "row " << r;
  const auto a = reference::encode(DType::bf16, test::random_values(64 * 64, 8));
  const auto b = reference::encode(DType::bf16, test::random_values(128 * 64, 9));
  Probe mm{"probe_wgmma",
           {1, 1, 1},
           {128, 1, 1},
           8192 + 16384 + 2048,
           {std::vector<std::uint8_t>(128 * 64 * 4), a, b},
           {{Arg::buffer, 0}, {Arg::map, 1, 64, 64}, {Arg::map, 2, 128, 128}}};
  auto [gw, cw] = both(mm, true);
  // The emulated product against the float64 reference: thread t holds d[4j + e] at row 16 (t / 32) + (t % 32) / 4
  // + 8 (e / 2), column 8j + 2 (t % 4) + e % 2.
  std::vector<std::uint8_t> want(64 * 128 * 4);
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 64; ++i) {
      const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * (t % 4) + i % 2;
      double sum = 0;
      for (int k = 0; k < 64; ++k)
        sum += double(reference::load(DType::bf16, a.data(), std::size_t(row * 64 + k))) *
               reference::load(DType::bf16, b.data(), std::size_t(col * 64 + k));
      reference::store(DType::f32, want.data(), std::size_t(t * 64 + i), float(sum));
    }
  test::expect_close(DType::f32, cw[0], want, "emulated wgmma", Tolerance{1e-5, 1e-5});
  if (!compared(gt)) GTEST_SKIP() << "no Hopper GPU: the emulated side ran, nothing to compare it with";
  EXPECT_EQ(gt[0], ct[0]) << "TMA box, 128-byte swizzle, zero fill past the end";
  test::expect_close(DType::f32, gw[0], cw[0], "wgmma m64n128k16 x 4", Tolerance{1e-5, 1e-6});
}
