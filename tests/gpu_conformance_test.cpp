// The CPU device never executes the preludes' PTX: each primitive here runs
// on a GPU and on the emulator with the same inputs, and the two must agree
// bit for bit where the PTX ISA is exact (conversions, shuffles, ldmatrix,
// cp.async, TMA with its swizzle and zero fill) and within a stated
// tolerance where it is not (the .approx math, mma.sync, wgmma). Every probe
// is built for both (NVRTC cubin through ptxas, and the host library) and
// run on the CPU device everywhere, where its results are checked against
// what the ISA says they are wherever that is cheap to state; the comparison
// needs a GPU (and a Hopper for TMA and wgmma) and skips without one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

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
    const float next = mojo::bits_to_float(in[(i + 1) % n]);
    out[10 * i + 0] = mojo::from_float<mojo::f16>(v).bits;
    out[10 * i + 1] = mojo::from_float<mojo::bf16>(v).bits;
    out[10 * i + 2] = mojo::float_to_bits(mojo::to_float(h));
    out[10 * i + 3] = mojo::to_tf32(in[i]);
    out[10 * i + 4] = mojo::pack_pair<mojo::f16>(v, next);
    out[10 * i + 5] = mojo::pack_pair<mojo::bf16>(v, next);
    out[10 * i + 6] = mojo::float_to_bits(mojo::exp2_approx(v));
    out[10 * i + 7] = mojo::float_to_bits(mojo::rsqrt_approx(v));
    out[10 * i + 8] = mojo::float_to_bits(mojo::rcp_approx(v));
    out[10 * i + 9] = mojo::float_to_bits(mojo::log2_approx(v));
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
// Thread 0 makes the mbarrier at `bar` and announces `bytes` of TMA loads on it, once every thread sees the
// barrier: true in thread 0, which then issues the loads.
__device__ __forceinline__ bool announce_loads(unsigned bar, unsigned bytes) {
  if (mojo::thread_x() == 0) {
    mojo::mbarrier_init(bar, 1);
    mojo::fence_barrier_init();
  }
  mojo::sync_block();
  if (mojo::thread_x() != 0) return false;
  mojo::mbarrier_arrive_expect_tx(bar, bytes);
  return true;
}
extern "C" __global__ void probe_tma(unsigned char* out, int r0, const mojo::TensorMap) {
  MOJO_DYNAMIC_SMEM(smem);
  const unsigned base = (mojo::smem_address(smem) + 1023u) & ~1023u, bar = base + 8192;
  if (announce_loads(bar, 8192)) mojo::tma_load_3d(base, MOJO_PARAM_ADDRESS(probe_tma, 2), bar, 0, r0, 0);
  mojo::mbarrier_wait(bar, 0);
  const unsigned char* tile = smem + (base - mojo::smem_address(smem));
  for (int i = (int)mojo::thread_x(); i < 8192; i += 128) out[i] = tile[i];
}
// d (64 x 128) = a (64 x 64) * b (128 x 64, K-major) in 4 wgmma k16 steps, b loaded by TMA. a is loaded by TMA
// too (K-major), or, with from_registers, read from global memory (a row-major bf16 [64, 64]) into registers:
// thread t's register r of k step kk holds a's elements (16 (t / 32) + (t % 32) / 4 + 8 (r % 2), 16 kk + 2 (t %
// 4) + 8 (r / 2) + h), h = 0 in the low half.
extern "C" __global__ void probe_wgmma(float* out, const unsigned short* a, int from_registers, const mojo::TensorMap,
                                       const mojo::TensorMap) {
  MOJO_DYNAMIC_SMEM(smem);
  const unsigned base = (mojo::smem_address(smem) + 1023u) & ~1023u, b_tile = base + 8192, bar = base + 8192 + 16384;
  if (announce_loads(bar, (from_registers ? 0 : 8192) + 16384)) {
    if (!from_registers) mojo::tma_load_3d(base, MOJO_PARAM_ADDRESS(probe_wgmma, 3), bar, 0, 0, 0);
    mojo::tma_load_3d(b_tile, MOJO_PARAM_ADDRESS(probe_wgmma, 4), bar, 0, 0, 0);
  }
  const int t = (int)mojo::thread_x();
  unsigned regs[4][4];
  for (int kk = 0; kk < 4; ++kk)
    for (int r = 0; r < 4; ++r) {
      const int at = (16 * (t / 32) + (t % 32) / 4 + 8 * (r % 2)) * 64 + 16 * kk + 2 * (t % 4) + 8 * (r / 2);
      regs[kk][r] = from_registers ? unsigned(a[at]) | unsigned(a[at + 1]) << 16 : 0u;
    }
  mojo::mbarrier_wait(bar, 0);
  float acc[64];
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  for (int i = 0; i < 64; ++i) mojo::wgmma_fence_operand(acc[i]);
  mojo::wgmma_fence();
  for (int kk = 0; kk < 4; ++kk)
    if (from_registers)  // the same for the whole warpgroup
      mojo::wgmma_rs<mojo::bf16, 128, 0>(acc, regs[kk], mojo::wgmma_descriptor(b_tile + kk * 32), 1);
    else
      mojo::wgmma<mojo::bf16, 128, 0, 0>(acc, mojo::wgmma_descriptor(base + kk * 32),
                                         mojo::wgmma_descriptor(b_tile + kk * 32), 1);
  mojo::wgmma_commit();
  mojo::wgmma_wait<0>();
  for (int i = 0; i < 64; ++i) mojo::wgmma_fence_operand(acc[i]);
  for (int i = 0; i < 64; ++i) out[t * 64 + i] = acc[i];
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

using Bytes = std::vector<std::uint8_t>;
using Buffers = std::vector<Bytes>;  // a probe's buffers after its launch, in the order of Probe::buffers

// The probes compiled for `device`, once per process for each device kind, target and probe set: the host
// library (Emit::host, an entry per kernel) for the cpu device, a cubin through NVRTC for a GPU.
const std::string& probe_image(const Device& device, bool hopper) {
  static std::map<std::string, std::string> images;
  const std::string key = fmt::format("{} {} {}", device.is_cpu() ? "cpu" : "cuda", device.target().sm_name(), hopper);
  if (const auto it = images.find(key); it != images.end()) return it->second;
  TemplateRegistry templates;
  std::string source;
  if (device.is_cpu()) {
    source = templates.expand(std::vector<std::string>{"mojo_cpu.cuh", "mojo_wgmma.cuh"}) + kProbes +
             (hopper ? kHopperProbes : "");
    for (const char* k : {"probe_math", "probe_shfl", "probe_ldmatrix", "probe_mma", "probe_cp_async"})
      source += fmt::format("MOJO_CPU_ENTRY({})\n", k);
    if (hopper) source += "MOJO_CPU_ENTRY(probe_tma)\nMOJO_CPU_ENTRY(probe_wgmma)\n";
  } else {
    source = templates.expand(std::vector<std::string>{"mojo_wgmma.cuh"}) + kProbes + (hopper ? kHopperProbes : "");
  }
  const std::unique_ptr<Compiler> compiler = device.is_cpu() ? make_host_compiler() : make_compiler("nvrtc");
  const Emit emit = device.is_cpu() ? Emit::host : Emit::cubin;
  return images[key] = compiler->compile({"probes.cu", source, device.target(), emit, "probes"}).binary;
}

// Runs `p` on `device` (the cpu device or a GPU alike) and returns its buffers afterwards. Everything the
// launch uses is made with `device` current, because that is where it then lives: the module (loaded
// while a GPU is current it holds a cubin, which the cpu device cannot run), the buffers and the tensor maps.
Buffers run_on(const Device& device, const Probe& p, bool hopper) {
  const std::string& image = probe_image(device, hopper);
  device.make_current();
  const Module module = Module::load(image);
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
  Buffers out;
  for (const DeviceBuffer& b : buffers) {
    out.emplace_back(b.size());
    b.copy_to_host(out.back().data(), b.size());
  }
  return out;
}

class Conformance : public ::testing::Test {
 protected:
  // A probe's buffers on both devices.
  struct Sides {
    Buffers emulated;            // the cpu device's: on every machine
    std::optional<Buffers> gpu;  // the GPU's, where gpu(hopper) is one
  };

  void SetUp() override {
    if (device_available()) gpu_ = Device::open(0);
  }
  // Leaves the GPU current, as a test that did not run the emulator would.
  void TearDown() override {
    if (gpu_) gpu_->make_current();
  }

  // The GPU that runs the probes (the Hopper probes: an sm_90a GPU only), or none.
  std::optional<Device> gpu(bool hopper) const {
    if (!gpu_ || (hopper && !(gpu_->target() == Target::parse("sm_90a")))) return std::nullopt;
    return gpu_;
  }
  // Why gpu(hopper) is none: the message of the test's skip, once its emulated side ran and was checked.
  std::string no_gpu(bool hopper) const {
    if (gpu_ && hopper)
      return fmt::format("the GPU ({}, {}) is not sm_90a: the emulated TMA and wgmma ran and were checked, the "
                         "comparison with hardware needs a Hopper",
                         gpu_->name(), gpu_->target().sm_name());
    return hopper ? "no GPU: the emulated side ran and was checked, the comparison with hardware needs a Hopper GPU"
                  : "no GPU: the emulated side ran and was checked, the comparison with hardware needs a GPU";
  }

  // `p` on the emulator and, where there is a GPU for it, on the GPU. The emulator stands for the GPU's own
  // target (sm_80 without a GPU); for the Hopper probes it emulates sm_90a.
  Sides both(const Probe& p, bool hopper = false) const {
    const std::optional<Device> g = gpu(hopper);
    const Target target = hopper ? Target::parse("sm_90a") : g ? g->target() : Target::parse("sm_80");
    Sides sides{run_on(Device::cpu(target), p, hopper), std::nullopt};
    if (g) sides.gpu = run_on(*g, p, hopper);
    return sides;
  }

  std::optional<Device> gpu_;
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
float as_float(std::uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
std::vector<std::uint32_t> random_words(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> w(n);
  for (auto& x : w) x = rng();
  return w;
}

// The GPU's buffer and the emulator's, bit for bit: how many 32-bit words differ, and the first few.
void expect_identical(const Bytes& gpu, const Bytes& emulated, const std::string& what) {
  ASSERT_EQ(gpu.size(), emulated.size()) << what;
  ASSERT_EQ(gpu.size() % 4, 0u) << what;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < gpu.size() / 4; ++i)
    if (word(gpu, i) != word(emulated, i) && differ++ < 5)
      ADD_FAILURE() << fmt::format("{}: word {}: GPU 0x{:08x}, emulator 0x{:08x}", what, i, word(gpu, i),
                                   word(emulated, i));
  EXPECT_EQ(differ, 0u) << what << ": words that differ, of " << gpu.size() / 4;
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
          {bytes_of(in), std::vector<std::uint8_t>(in.size() * 40)},
          {{Arg::buffer, 0}, {Arg::buffer, 1}, {Arg::i32, n}}};
  const Sides s = both(p);
  if (!s.gpu) GTEST_SKIP() << no_gpu(false);
  const Bytes &g = (*s.gpu)[1], &c = s.emulated[1];
  // out[10 i + k]: k 0..5 the conversions, exact (cvt.f32.f16 converts the input's low 16 bits; the x2 forms pack
  // the input and the next one, as the emulator's two conversions do); k 6..9 the .approx math. The ISA and the
  // CUDA guide bound those at 2 ulp (ex2), 2^-22.9 relative (rsqrt), 1 ulp (rcp), and 2^-22 absolute for inputs in
  // [0.5, 2], 2 ulp elsewhere (lg2); the emulator computes them to within 1 ulp. So: both NaN, or the same
  // infinity, or within 2^-21 (4 ulp) relative, plus 2^-21 absolute for lg2.
  static constexpr const char* kNames[] = {
      "cvt.rn.f16.f32",    "cvt.rn.bf16.f32", "cvt.f32.f16",  "cvt.rna.tf32.f32", "cvt.rn.f16x2.f32",
      "cvt.rn.bf16x2.f32", "ex2.approx.ftz",  "rsqrt.approx", "rcp.approx.ftz",   "lg2.approx.ftz"};
  auto agree = [](int k, std::uint32_t gw, std::uint32_t cw) {
    if (k < 6) return gw == cw;
    const float a = as_float(gw), b = as_float(cw);
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    if (std::isinf(a) || std::isinf(b)) return a == b;
    const double tolerance = std::ldexp(std::abs(double(a)), -21) + (k == 9 ? std::ldexp(1.0, -21) : 0.0);
    return std::abs(double(a) - double(b)) <= tolerance;
  };
  for (int k = 0; k < 10; ++k) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::uint32_t gw = word(g, 10 * i + std::size_t(k)), cw = word(c, 10 * i + std::size_t(k));
      if (!agree(k, gw, cw) && bad++ < 5)
        ADD_FAILURE() << fmt::format("{} of 0x{:08x}: GPU 0x{:08x} ({}), emulator 0x{:08x} ({})", kNames[k], in[i], gw,
                                     as_float(gw), cw, as_float(cw));
    }
    EXPECT_EQ(bad, 0u) << kNames[k] << ": inputs on which the GPU and the emulator disagree, of " << in.size();
  }
}

TEST_F(Conformance, ShufflesLdmatrixAndCpAsync) {
  Probe shfl{"probe_shfl", {1, 1, 1}, {64, 1, 1}, 0, {std::vector<std::uint8_t>(5 * 64 * 4)}, {{Arg::buffer, 0}}};
  const std::vector<std::uint32_t> matrices = random_words(128, 2);
  Probe ldm{"probe_ldmatrix",
            {1, 1, 1},
            {32, 1, 1},
            512,
            {bytes_of(matrices), std::vector<std::uint8_t>(32 * 8 * 4)},
            {{Arg::buffer, 0}, {Arg::buffer, 1}}};
  Probe cp{"probe_cp_async",
           {1, 1, 1},
           {32, 1, 1},
           17 * 16,
           {bytes_of(random_words(17 * 4, 3)), std::vector<std::uint8_t>(17 * 16)},
           {{Arg::buffer, 0}, {Arg::buffer, 1}}};
  const Sides s = both(shfl), l = both(ldm), c = both(cp);
  // The emulated shfl.sync.bfly: thread t of each warp got the value of thread t ^ (1 << m).
  for (std::uint32_t m = 0; m < 5; ++m)
    for (std::uint32_t t = 0; t < 64; ++t)
      ASSERT_EQ(word(s.emulated[0], m * 64 + t), (t ^ (1u << m)) * 2654435761u)
          << "mask " << (1 << m) << " thread " << t;
  // The emulated ldmatrix: the 16-byte rows are those of four 8 x 8 matrices of 16-bit elements, matrix i row j
  // at row 8 i + j; lane l holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (.trans: of the transposed matrix).
  auto element = [&](int matrix, int row, int col) {
    const std::size_t half = std::size_t((8 * matrix + row) * 8 + col);
    return (matrices[half / 2] >> (16 * (half % 2))) & 0xffffu;
  };
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int a = lane / 4, b = 2 * (lane % 4);
      ASSERT_EQ(word(l.emulated[1], std::size_t(lane * 8 + i)), element(i, a, b) | element(i, a, b + 1) << 16)
          << "ldmatrix.x4 lane " << lane << " matrix " << i;
      ASSERT_EQ(word(l.emulated[1], std::size_t(lane * 8 + 4 + i)), element(i, b, a) | element(i, b + 1, a) << 16)
          << "ldmatrix.x4.trans lane " << lane << " matrix " << i;
    }
  // The emulated cp.async read `lane` bytes and zero-filled the rest.
  for (int lane = 0; lane <= 16; ++lane)
    for (int i = 0; i < 16; ++i)
      ASSERT_EQ(c.emulated[1][std::size_t(16 * lane + i)], i < lane ? c.emulated[0][std::size_t(16 * lane + i)] : 0)
          << lane << " " << i;
  if (!s.gpu) GTEST_SKIP() << no_gpu(false);
  expect_identical((*s.gpu)[0], s.emulated[0], "shfl.sync.bfly");
  expect_identical((*l.gpu)[1], l.emulated[1], "ldmatrix .x4 and .x4.trans");
  expect_identical((*c.gpu)[1], c.emulated[1], "cp.async zero fill");
}

TEST_F(Conformance, MmaSync) {
  // Halves in ±[0.05, 2] (bf16 and f16 bit patterns alike from f16 values), accumulators random.
  auto halves = [](std::size_t n, std::uint32_t seed) {
    const auto v = reference::encode(DType::f16, test::random_values(n, seed));
    return v;
  };
  const auto a = halves(32 * 8, 4), b = halves(32 * 4, 5);
  const auto c = reference::encode(DType::f32, test::random_values(32 * 4, 6));
  Probe p{"probe_mma",
          {1, 1, 1},
          {32, 1, 1},
          0,
          {a, b, c, std::vector<std::uint8_t>(32 * 12 * 4)},
          {{Arg::buffer, 0}, {Arg::buffer, 1}, {Arg::buffer, 2}, {Arg::buffer, 3}}};
  const Sides s = both(p);
  // The emulated products against a float64 reference, in the ISA's fragment layouts: lane 4 g + t holds, for
  // m16n8k16 (f16, bf16), a0 (row g, k 2t, 2t + 1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..),
  // b0 (k 2t, 2t + 1, column g), b1 (k 2t + 8..); for m16n8k8 tf32, a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
  // a3 (g + 8, t + 4), b0 (k t, column g), b1 (k t + 4); c and d: d0, d1 (g, 2t, 2t + 1), d2, d3 (g + 8, 2t..).
  // The probe's d[12 lane + 4 type + e]: type 0 f16, 1 bf16, 2 tf32 (of cvt.rna.tf32 of the words & 0x3fffffff).
  auto tf32 = [](std::uint32_t w) {  // cvt.rna.tf32.f32 of a finite value: 10 mantissa bits, ties away from zero
    return double(as_float(((w & 0x3fffffffu) + 0x1000u) & 0xffffe000u));
  };
  std::vector<std::uint8_t> want(32 * 12 * 4);
  for (int type = 0; type < 3; ++type) {
    const DType half = type == 1 ? DType::bf16 : DType::f16;
    double A[16][16] = {}, B[16][8] = {}, D[16][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      auto element = [&](const Bytes& m, int reg, int h) {  // half h of the lane's register reg
        return double(reference::load(half, m.data(), std::size_t(2 * reg + h)));
      };
      for (int h = 0; h < 2; ++h) {  // h: rows g and g + 8 of a
        if (type < 2) {
          A[g + 8 * h][2 * t] = element(a, 4 * lane + h, 0), A[g + 8 * h][2 * t + 1] = element(a, 4 * lane + h, 1);
          A[g + 8 * h][2 * t + 8] = element(a, 4 * lane + 2 + h, 0);
          A[g + 8 * h][2 * t + 9] = element(a, 4 * lane + 2 + h, 1);
          B[2 * t + 8 * h][g] = element(b, 2 * lane + h, 0), B[2 * t + 8 * h + 1][g] = element(b, 2 * lane + h, 1);
        } else {
          A[g + 8 * h][t] = tf32(word(a, std::size_t(4 * lane + h)));
          A[g + 8 * h][t + 4] = tf32(word(a, std::size_t(4 * lane + 2 + h)));
          B[t + 4 * h][g] = tf32(word(b, std::size_t(2 * lane + h)));
        }
      }
      for (int e = 0; e < 4; ++e)
        D[g + 8 * (e / 2)][2 * t + e % 2] = reference::load(DType::f32, c.data(), std::size_t(4 * lane + e));
    }
    const int K = type == 2 ? 8 : 16;
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j)
        for (int k = 0; k < K; ++k) D[i][j] += A[i][k] * B[k][j];
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e)
        reference::store(DType::f32, want.data(), std::size_t(12 * lane + 4 * type + e),
                         float(D[lane / 4 + 8 * (e / 2)][2 * (lane % 4) + e % 2]));
  }
  test::expect_close(DType::f32, s.emulated[3], want, "emulated mma.sync f16, bf16, tf32", Tolerance{1e-5, 1e-5});
  if (!s.gpu) GTEST_SKIP() << no_gpu(false);
  // The tensor cores' summation order and rounding are not specified: fp32 closeness, not bits.
  test::expect_close(DType::f32, (*s.gpu)[3], s.emulated[3], "mma.sync f16, bf16, tf32", Tolerance{1e-5, 1e-6});
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
  const Sides tile = both(tma, true);
  // On the emulator: tile row r is the tensor's row 64 + r, its 16-byte chunk c at chunk c ^ (r % 8) (the
  // 128-byte swizzle of a 1024-byte aligned tile); rows past the tensor are zeros.
  for (int r = 0; r < 64; ++r)
    for (int b = 0; b < 128; ++b) {
      const int from = (b / 16 ^ r % 8) * 16 + b % 16;  // the byte of the tensor's row that lands at b
      ASSERT_EQ(tile.emulated[0][std::size_t(r * 128 + b)], r < 36 ? tensor[std::size_t((64 + r) * 128 + from)] : 0)
          << "row " << r << " byte " << b;
    }
  const auto a = reference::encode(DType::bf16, test::random_values(64 * 64, 8));
  const auto b = reference::encode(DType::bf16, test::random_values(128 * 64, 9));
  const auto wgmma_probe = [&](int from_registers) {
    return Probe{"probe_wgmma",
                 {1, 1, 1},
                 {128, 1, 1},
                 8192 + 16384 + 2048,
                 {std::vector<std::uint8_t>(128 * 64 * 4), a, b},
                 {{Arg::buffer, 0},
                  {Arg::buffer, 1},
                  {Arg::i32, from_registers},
                  {Arg::map, 1, 64, 64},
                  {Arg::map, 2, 128, 128}}};
  };
  const Sides product = both(wgmma_probe(0), true);
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
  test::expect_close(DType::f32, product.emulated[0], want, "emulated wgmma", Tolerance{1e-5, 1e-5});
  // A from registers: the same product.
  const Sides from_registers = both(wgmma_probe(1), true);
  test::expect_close(DType::f32, from_registers.emulated[0], want, "emulated wgmma, A from registers",
                     Tolerance{1e-5, 1e-5});
  if (!tile.gpu) GTEST_SKIP() << no_gpu(true);
  expect_identical((*tile.gpu)[0], tile.emulated[0], "TMA box, 128-byte swizzle, zero fill past the end");
  test::expect_close(DType::f32, (*product.gpu)[0], product.emulated[0], "wgmma m64n128k16 x 4",
                     Tolerance{1e-5, 1e-6});
  test::expect_close(DType::f32, (*from_registers.gpu)[0], from_registers.emulated[0],
                     "wgmma m64n128k16 x 4, A from registers (the register layout the attention's P relies on)",
                     Tolerance{1e-5, 1e-6});
}
