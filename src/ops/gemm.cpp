// gemm, gemm_batched and linear: matrix products on tensor cores.
// Template: kernel_templates/gemm.cu (params and kernel args there).
//
// The params are the tile configuration, not the shape: M, N and K are kernel
// arguments, so every shape in one M bucket shares a kernel. The bucket picks
// the tile (decode-sized M gets a thin tile so that more blocks stream the
// weights); the pipeline depth fits the target's shared memory.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>

#include "mojo/error.hpp"
#include "reference/reference.hpp"
#include "ops/host_data.hpp"
#include "ops/checks.hpp"
#include "ops/indices.hpp"
#include "ops/registry.hpp"

namespace mojo {
namespace {

// f16/bf16 run on tensor cores; f32 in exact fp32 on the CUDA cores.
constexpr DType kInputTypes[] = {DType::f32, DType::f16, DType::bf16};

struct TileConfig {
  int bm, bn, bk, wm, wn, stages;
  int element_bytes = 2;     // of the inputs: 2, or 4 for tf32
  bool tensor_cores = true;  // false: the exact fp32 path, static shared memory only
  bool wgmma = false;        // the sm_90a path: bm / 64 consumer warpgroups + a producer, bk = 64
  int ks = 1;                // K split over this many groups of wm x wn warps (sm_80 path), each with its own ring
  int swizzle = 8;           // block rows per raster group (neighbouring blocks share B in L2)
  unsigned smem_bytes() const {
    // sm_90a: the ring, one full and one empty mbarrier per stage, 1024 bytes to align the ring.
    if (wgmma) return unsigned(stages * (bm + bn) * bk * element_bytes + 16 * stages + 1024);
    return tensor_cores ? unsigned(ks * stages * (bm + bn) * bk * element_bytes) : 0;
  }
  unsigned threads() const { return wgmma ? unsigned(bm / 64 + 1) * 128 : unsigned(wm * wn * ks * 32); }
};

// The sm_90a tiles: 128 rows (two consumer warpgroups) by 256 or 128 columns.
constexpr TileConfig kWgmmaWide{128, 256, 64, 2, 1, 4, 2, true, true};
constexpr TileConfig kWgmmaNarrow{128, 128, 64, 2, 1, 6, 2, true, true};

// Dynamic shared memory a block may opt into on each architecture.
unsigned smem_optin_bytes(const Target& t) {
  if (t.sm == 80 || t.sm == 87) return 163 * 1024;
  if (t.sm == 90 || t.sm == 100 || t.sm == 103) return 227 * 1024;
  return 99 * 1024;
}

// Streaming multiprocessors of the usual part of each architecture: the
// params come from the target alone (they are part of the cache key), so
// this is the target's typical count, not a device query.
int typical_sm_count(const Target& t) {
  switch (t.sm) {
    case 80: return 108;  // A100
    case 86: return 84;   // RTX 3090 / A40
    case 89: return 128;  // RTX 4090 / L40
    case 90: return 132;  // H100 SXM
    case 100: return 148; // B200
    default: return 100;
  }
}

// A tensor-core tile for `element_bytes` inputs on `target`: tf32 steps K by
// 16 (4-byte fragments need the registers), and the pipeline is as deep as
// the target's shared memory allows.
TileConfig fit(TileConfig c, int element_bytes, const Target& target) {
  c.element_bytes = element_bytes;
  if (element_bytes == 4 && !c.wgmma) c.bk = 16;
  while (c.stages > 2 && c.smem_bytes() > smem_optin_bytes(target)) --c.stages;
  return c;
}

// The M bucket picks the tile; when its grid would leave SMs idle, a
// narrower tile makes more blocks (decode and mid-size M on wide GPUs), and
// a decode tile splits K over up to 4 warp groups so that about four tiles'
// worth of loads per SM are in flight (each group keeping >= 2 k tiles).
// Where the sm_90a path may run (`wgmma_ok`), it takes every problem with
// enough 128-row tiles to fill half the SMs; thin problems stay on the
// sm_80 path, whose small tiles spread the weights over more SMs.
// The "path" scalar: 0 lets the heuristic choose, 80 and 90 pin the sm_80 or sm_90a path.
enum class Path { any = 0, sm80 = 80, sm90 = 90 };

TileConfig pick_tile(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, bool tf32, const Target& target,
                     bool wgmma_ok = false, std::int64_t batch = 1, Path path = Path::any) {
  if (dtype == DType::f32 && !tf32) return {64, 64, 16, 2, 4, 1, 4, false};  // 256 threads of 4 x 4 outputs
  const std::int64_t sms = typical_sm_count(target);
  auto tiles = [&](const TileConfig& c) { return ((m + c.bm - 1) / c.bm) * ((n + c.bn - 1) / c.bn) * batch; };
  if (path == Path::sm90) return fit(n > 128 ? kWgmmaWide : kWgmmaNarrow, 2, target);
  if (wgmma_ok && m > 64 && path == Path::any) {
    if (tiles(kWgmmaWide) >= sms) return fit(kWgmmaWide, 2, target);
    if (tiles(kWgmmaNarrow) >= sms / 2) return fit(kWgmmaNarrow, 2, target);
  }
  TileConfig c = m <= 16   ? TileConfig{16, 64, 64, 1, 2, 4}    // decode: 64 threads, many blocks along N
                 : m <= 64 ? TileConfig{64, 64, 32, 2, 2, 4}    // 128 threads, 32x32 per warp
                           : TileConfig{128, 128, 32, 2, 4, 4};  // 256 threads, 64x32 per warp
  if (c.bm == 128 && tiles(c) < sms) c = {64, 64, 32, 2, 2, 4};
  if (c.bm == 16 && tiles(c) < sms) c = {16, 32, 64, 1, 2, 4};  // 16x16 per warp
  if (c.bm == 16)
    while (c.ks < 4 && tiles(c) * c.ks * 2 <= 4 * sms && k >= std::int64_t(c.ks) * 2 * c.bk * 2) c.ks *= 2;
  return fit(c, int(dtype_size(dtype)), target);
}

void expect_tensor_cores(std::string_view op, DType dtype, bool tf32, const Target& target) {
  if ((dtype != DType::f32 || tf32) && target.sm < 80)
    throw ArchError(fmt::format("{}: needs tensor cores for f16/bf16/tf32 (mma.sync, cp.async): sm_80 or "
                                "later; the target is {} (exact f32 runs anywhere)",
                                op, target.sm_name()));
}

// A matrix (the last two dims of `t`) with unit inner stride: its row stride.
std::int64_t row_stride(std::string_view op, std::string_view arg, const TensorSpec& t) {
  const int r = t.rank();
  if (t.stride(r - 1) != 1 && t.dim(r - 1) > 1)
    throw ShapeError(fmt::format("{}: {} {} has a non-unit stride in its last dim; rows must be contiguous", op, arg,
                                 t.str()));
  const std::int64_t ld = t.stride(r - 2);
  if (ld < t.dim(r - 1) && t.dim(r - 2) > 1)
    throw ShapeError(fmt::format("{}: {} {} has overlapping rows (row stride {} < {})", op, arg, t.str(), ld,
                                 t.dim(r - 1)));
  return std::max<std::int64_t>(ld, t.dim(r - 1));
}

std::int64_t checked_dim(std::string_view op, std::string_view what, std::int64_t v) {
  if (v > INT_MAX) throw ShapeError(fmt::format("{}: {} = {} exceeds the kernel's int range", op, what, v));
  return v;
}

// The sm_90a path's preconditions: a Hopper-specific build, 16-bit inputs,
// rows TMA can address (16-byte aligned starts and row strides: `aligned`),
// and a non-empty problem. Any layout: wgmma reads MN-major tiles transposed.
bool wgmma_possible(const Target& t, DType dtype, bool aligned, std::int64_t m, std::int64_t n, std::int64_t k) {
  return t.sm == 90 && t.arch_specific && (dtype == DType::f16 || dtype == DType::bf16) && aligned && m > 0 &&
         n > 0 && k > 0;
}

void add_tile(Params& p, const TileConfig& c) {
  p.add("bm", c.bm);
  p.add("bn", c.bn);
  p.add("bk", c.bk);
  p.add("wm", c.wm);
  p.add("wn", c.wn);
  p.add("stages", c.stages);
  p.add("ks", c.ks);
  p.add("swizzle", c.swizzle);
}
TileConfig tile_of(const Params& p) {
  const DType dtype = p.dtype("dtype");
  return {int(p.get("bm")),     int(p.get("bn")),       int(p.get("bk")),
          int(p.get("wm")),     int(p.get("wn")),       int(p.get("stages")),
          int(dtype_size(dtype)), dtype != DType::f32 || p.get("tf32") != 0, p.get("wgmma") != 0,
          int(p.get("ks")), int(p.get("swizzle"))};
}

// The kernel's arguments; one place for the ABI all four ops share.
struct GemmArgs {
  DevicePtr c = 0, a = 0, b = 0, bias = 0, residual = 0;
  float alpha = 1, beta = 0;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, ldr = 0, batch_a = 0, batch_b = 0, batch_c = 0;
  DevicePtr offsets = 0;
  std::int64_t total_rows = 0;
  std::int64_t batches = 1;
  bool mn_major_a = false, mn_major_b = false;  // a stored [K, M], b stored [K, N] (gemm's layouts)
};
// gemm.cu's order for the sm_80 path; gemm_sm90.cuh's (with the two TMA
// descriptors, encoded here from the operands) for the sm_90a one.
void push_kernel_args(KernelArgs& args, const GemmArgs& g, const Params& p) {
  if (p.get("wgmma")) {
    // Each operand as stored: K-major in boxes of bk (one 128-byte row) x the tile's rows, MN-major in
    // boxes of 64 m or n (128 bytes) x bk.
    const DType dtype = p.dtype("dtype");
    const unsigned bm = unsigned(p.get("bm")), bn = unsigned(p.get("bn")), bk = unsigned(p.get("bk"));
    // Groups read their rows out of one x [total_rows, K].
    const std::int64_t a_rows = g.offsets ? g.total_rows : g.m, a_batches = g.offsets ? 1 : g.batches;
    const TensorMap a = g.mn_major_a ? tile_tensor_map(g.a, dtype, g.m, g.k, a_batches, g.lda, g.batch_a, 64, bk)
                                     : tile_tensor_map(g.a, dtype, g.k, a_rows, a_batches, g.lda, g.batch_a, bk, bm);
    const TensorMap b = g.mn_major_b ? tile_tensor_map(g.b, dtype, g.n, g.k, g.batches, g.ldb, g.batch_b, 64, bk)
                                     : tile_tensor_map(g.b, dtype, g.k, g.n, g.batches, g.ldb, g.batch_b, bk, bn);
    for (DevicePtr ptr : {g.c, g.bias, g.residual}) args.push(ptr);
    args.push(g.alpha);
    args.push(g.beta);
    for (std::int64_t v : {g.m, g.n, g.k}) args.push(int(v));
    for (std::int64_t v : {g.ldc, g.ldr, g.batch_c}) args.push((long long)v);
    args.push(int(g.batches));
    args.push(g.offsets);
    args.push((long long)g.total_rows);
    args.push(a);
    args.push(b);
    return;
  }
  for (DevicePtr ptr : {g.c, g.a, g.b, g.bias, g.residual}) args.push(ptr);
  args.push(g.alpha);
  args.push(g.beta);
  for (std::int64_t v : {g.m, g.n, g.k}) args.push(int(v));  // checked_dim: they fit
  for (std::int64_t v : {g.lda, g.ldb, g.ldc, g.ldr, g.batch_a, g.batch_b, g.batch_c}) args.push((long long)v);
  args.push(g.offsets);
  args.push((long long)g.total_rows);
}

// `p` with its tile params replaced by `c`'s.
Params with_tile(const Params& p, const TileConfig& c) {
  Params out;
  for (const Param& x : p.items()) {
    std::int64_t v = x.value;
    if (x.name == "bm") v = c.bm;
    if (x.name == "bn") v = c.bn;
    if (x.name == "bk") v = c.bk;
    if (x.name == "wm") v = c.wm;
    if (x.name == "wn") v = c.wn;
    if (x.name == "stages") v = c.stages;
    if (x.name == "wgmma") v = c.wgmma;
    if (x.name == "ks") v = c.ks;
    if (x.name == "swizzle") v = c.swizzle;
    if (x.is_dtype) out.add_dtype(x.name, DType(v));
    else out.add(x.name, v);
  }
  return out;
}

// Autotuning: the heuristic's tile first, then every other tensor-core tile
// that fits the target's shared memory (none for the exact f32 path).
// On the sm_90a path, its two tiles and the sm_80 path's.
std::vector<Params> tile_candidates(const Params& chosen, const Target& target) {
  const TileConfig current = tile_of(chosen);
  if (!current.tensor_cores) return {};
  std::vector<Params> out{chosen};
  TileConfig split2{16, 64, 64, 1, 2, 4}, split4{16, 32, 64, 1, 2, 4};
  split2.ks = 2;
  split4.ks = 4;
  const TileConfig tiles[] = {kWgmmaWide, kWgmmaNarrow, {128, 128, 32, 2, 4, 4}, {128, 64, 32, 2, 2, 4},
                              {64, 128, 32, 2, 2, 4}, {64, 64, 32, 2, 2, 4}, {16, 64, 64, 1, 2, 4},
                              {16, 32, 64, 1, 2, 4}, split2, split4};
  for (const TileConfig& c : tiles) {
    if (c.wgmma && !current.wgmma) continue;
    const Params p = with_tile(chosen, fit(c, current.element_bytes, target));
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// "m<=64 n<=4096 k<=4096": the powers of two a tuning result stands for.
std::string shape_bucket(std::int64_t m, std::int64_t n, std::int64_t k) {
  auto up = [](std::int64_t v) { return std::bit_ceil(std::uint64_t(std::max<std::int64_t>(v, 1))); };
  return fmt::format("m<={} n<={} k<={}", up(m), up(n), up(k));
}

// A scalar that must be 0 or 1 (trans_a, trans_b, tf32).
std::int64_t flag(const OpDef& op, ScalarList scalars, std::string_view name) {
  const double v = op.scalar(scalars, name);
  if (v != 0 && v != 1) throw InvalidArgumentError(fmt::format("{}: {} is {}; expected 0 or 1", op.name(), name, v));
  return std::int64_t(v);
}

// The "path" scalar; 90 only where the sm_90a path can take these tensors (`wgmma_ok`).
Path path_of(const OpDef& op, ScalarList scalars, bool wgmma_ok, const Target& target) {
  const double v = op.scalar(scalars, "path");
  if (v != 0 && v != 80 && v != 90)
    throw InvalidArgumentError(fmt::format("{}: path is {}; expected 0 (the heuristic's choice), 80 or 90", op.name(), v));
  if (v == 90 && !wgmma_ok)
    throw InvalidArgumentError(fmt::format("{}: path = 90 (TMA + wgmma) cannot take these tensors on {}: it needs an "
                                           "sm_90a target, f16 or bf16 inputs with 16-byte aligned rows, batches apart "
                                           "and a non-empty problem",
                                           op.name(), target.sm_name()));
  return Path(int(v));
}

// The "tf32" scalar: 1 runs f32 inputs on tensor cores as tf32; only for f32.
bool tf32_of(const OpDef& op, ScalarList scalars, DType dtype) {
  const bool tf32 = flag(op, scalars, "tf32") == 1;
  if (tf32 && dtype != DType::f32)
    throw InvalidArgumentError(
        fmt::format("{}: tf32 = 1 applies to f32 inputs; these are {}", op.name(), dtype_name(dtype)));
  return tf32;
}

LaunchGeometry tile_geometry(const Params& p, std::int64_t m, std::int64_t n, std::int64_t batch) {
  const TileConfig c = tile_of(p);
  const std::int64_t blocks = ((m + c.bm - 1) / c.bm) * ((n + c.bn - 1) / c.bn);
  LaunchGeometry g;
  // The sm_90a kernel is persistent: its blocks loop over every batch's tiles.
  g.grid = c.wgmma ? Dim3{unsigned(blocks * batch), 1, 1} : Dim3{unsigned(blocks), 1, unsigned(batch)};
  g.persistent = c.wgmma;
  g.block = {c.threads(), 1, 1};
  g.dynamic_smem = c.smem_bytes();
  return g;
}

// 16-byte chunk loads need every row start 16-byte aligned.
bool chunk_aligned(DType dtype, DevicePtr p, std::initializer_list<std::int64_t> strides) {
  if (checks::alignment_of(p) < 16) return false;
  const std::int64_t per_chunk = 16 / std::int64_t(dtype_size(dtype));
  return std::all_of(strides.begin(), strides.end(), [&](std::int64_t s) { return s % per_chunk == 0; });
}
// The "vec" param: 8 for 16-byte chunk loads on tensor cores, else 1.
std::int64_t vec_param(const TileConfig& c, bool aligned) { return c.tensor_cores && aligned ? 8 : 1; }

// What gemm, gemm_batched, linear and group_gemm share: the template, the
// dtypes, the tile's shared memory and autotuning candidates, and the
// alignment their operand loads need.
class TileOp : public OpDef {
 public:
  std::span<const DType> dtypes() const override { return kInputTypes; }
  std::string_view template_file() const override { return "gemm.cu"; }
  unsigned max_dynamic_smem(const Params& p) const override { return tile_of(p).smem_bytes(); }
  // The sm_90a kernel has its own signature (TMA descriptors): its own entry macro.
  std::string entry_macro(const Params& p) const override {
    return OpDef::entry_macro(p) + (p.get("wgmma") != 0 ? "_sm90" : "");
  }
  std::vector<Params> tuning_candidates(const Params& chosen, const Target& target) const override {
    return tile_candidates(chosen, target);
  }

 protected:
  // Bytes the A and B operands must be aligned to: 16 for chunk loads, else one element.
  static unsigned operand_alignment(const Params& p) {
    return p.get("vec") == 8 ? 16 : unsigned(dtype_size(p.dtype("dtype")));
  }
  // A dot product of k terms in fp32 vs float64: atol grows like sqrt(k) / 16 (inputs in ±[0.05, 2], so the
  // sums are ~sqrt(k)); tf32 inputs carry bf16-like error.
  static Tolerance product_tolerance(DType out, std::int64_t k, bool tf32) {
    Tolerance t = default_tolerance(tf32 ? DType::bf16 : out);
    t.atol *= std::max(1.0, std::sqrt(double(k)) / 16);
    if (out == DType::f32 && !tf32) t.rtol = 1e-4, t.atol = std::max(t.atol, 1e-5);
    return t;
  }
};

constexpr TensorArgInfo kGemmTensors[] = {
    {"c", "inout", "[M, N], a's dtype or f32; read when beta != 0; rows may be strided"},
    {"a", "in", "[M, K], or [K, M] with trans_a; f16/bf16 (tensor cores) or f32 (exact); rows may be strided"},
    {"b", "in", "[K, N], or [N, K] with trans_b; same dtype as a"},
};
constexpr TensorArgInfo kBatchedTensors[] = {
    {"c", "inout", "[batch, M, N], a's dtype or f32; read when beta != 0"},
    {"a", "in", "[batch, M, K], or [batch, K, M] with trans_a; f16, bf16 or f32"},
    {"b", "in", "[batch, K, N], or [batch, N, K] with trans_b; same dtype as a"},
};
constexpr ScalarArgInfo kGemmScalars[] = {{"alpha", 1, "scales a * b"},
                                          {"beta", 0, "scales the old c (0: c is only written)"},
                                          {"trans_a", 0, "1: a is stored [K, M]"},
                                          {"trans_b", 0, "1: b is stored [N, K] (the LLM weight layout)"},
                                          {"tf32", 0, "1: f32 inputs on tensor cores as tf32 (10-bit mantissa)"},
                                          {"path", 0, "0: the heuristic picks the kernel path; 80: the sm_80 path; 90: the sm_90a path (TMA + wgmma)"}};

// gemm ([M, K] x [K, N]) and gemm_batched (a batch of those, strided).
class Gemm final : public TileOp {
 public:
  explicit Gemm(bool batched) : batched_(batched) {}
  std::string_view name() const override { return batched_ ? "gemm_batched" : "gemm"; }
  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec &c = specs[0], &a = specs[1];
    const bool ta = scalar(scalars, "trans_a") != 0, tb = scalar(scalars, "trans_b") != 0;
    const int r = c.rank();
    reference::gemm(a.dtype(), c.dtype(), d[1].data(), d[2].data(), d[0].data(), batched_ ? c.dim(0) : 1, c.dim(r - 2),
                    c.dim(r - 1), ta ? a.dim(r - 2) : a.dim(r - 1), scalar(scalars, "alpha"), scalar(scalars, "beta"), ta,
                    tb);
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    const TensorSpec& a = specs[1];
    const std::int64_t k = scalar(scalars, "trans_a") != 0 ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
    return product_tolerance(out, k, scalar(scalars, "tf32") != 0);
  }
  std::string_view summary() const override {
    return batched_ ? "c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for each batch i, on tensor cores"
                    : "c = alpha * op(a) * op(b) + beta * c, op = N or T, on tensor cores (fp32 accumulation)";
  }
  std::span<const TensorArgInfo> tensor_args() const override {
    if (batched_) return kBatchedTensors;
    return kGemmTensors;
  }
  std::span<const ScalarArgInfo> scalar_args() const override { return kGemmScalars; }
  std::string_view example_shapes() const override {
    return batched_ ? "a=8x512x128 b=8x128x512" : "a=4096x4096 b=4096x4096";
  }

  Params specialize(TensorList t, ScalarList scalars, const Target& target) const override {
    check_tensor_count(t);
    check_scalar_names(scalars);
    const Dims d = dims(t, flag(*this, scalars, "trans_a"), flag(*this, scalars, "trans_b"));
    const TensorSpec &c = t[0].spec, &a = t[1].spec;
    checks::expect_dtype_in(name(), "a", a.dtype(), kInputTypes);
    const bool tf32 = tf32_of(*this, scalars, a.dtype());
    expect_tensor_cores(name(), a.dtype(), tf32, target);
    checks::expect_same_dtype(name(), "b", t[2].spec, "a", a);
    if (c.dtype() != a.dtype() && c.dtype() != DType::f32)
      throw DTypeError(fmt::format("{}: c has dtype {}; expected {} (as a) or f32", name(), dtype_name(c.dtype()),
                                   dtype_name(a.dtype())));
    Params p;
    p.add_dtype("dtype", a.dtype());
    p.add_dtype("out", c.dtype());
    const bool aligned = chunk_aligned(a.dtype(), t[1].data, {d.lda, d.batch_a}) &&
                         chunk_aligned(a.dtype(), t[2].data, {d.ldb, d.batch_b});
    // TMA walks batches by their stride: each batch's operand must lie apart from the others.
    const bool batches_apart = d.batch == 1 || (d.batch_a >= (d.trans_a ? d.k : d.m) * d.lda &&
                                                d.batch_b >= (d.trans_b ? d.n : d.k) * d.ldb);
    const bool wgmma_ok = wgmma_possible(target, a.dtype(), aligned && batches_apart, d.m, d.n, d.k);
    const TileConfig tile =
        pick_tile(d.m, d.n, d.k, a.dtype(), tf32, target, wgmma_ok, d.batch, path_of(*this, scalars, wgmma_ok, target));
    add_tile(p, tile);
    p.add("ta", d.trans_a);
    p.add("tb", d.trans_b);
    p.add("vec", vec_param(tile, aligned));
    p.add("beta", scalar(scalars, "beta") != 0 ? 1 : 0);
    p.add("tf32", tf32);
    p.add("wgmma", tile.wgmma);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Dims d = dims(t, p.get("ta"), p.get("tb"));
    return tile_geometry(p, d.m, d.n, d.batch);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, KernelArgs& args) const override {
    const Dims d = dims(t, p.get("ta"), p.get("tb"));
    const unsigned chunk = operand_alignment(p);
    checks::expect_pointer(name(), "c", t[0].data, unsigned(dtype_size(t[0].spec.dtype())));
    checks::expect_pointer(name(), "a", t[1].data, chunk);
    checks::expect_pointer(name(), "b", t[2].data, chunk);
    push_kernel_args(args,
                     {.c = t[0].data, .a = t[1].data, .b = t[2].data, .alpha = float(scalar(scalars, "alpha")),
                      .beta = float(scalar(scalars, "beta")), .m = d.m, .n = d.n, .k = d.k, .lda = d.lda, .ldb = d.ldb,
                      .ldc = d.ldc, .batch_a = d.batch_a, .batch_b = d.batch_b, .batch_c = d.batch_c,
                      .batches = d.batch, .mn_major_a = d.trans_a == 1, .mn_major_b = d.trans_b == 0},
                     p);
  }

  std::string tuning_bucket(TensorList t) const override {
    const TensorSpec &c = t[0].spec, &a = t[1].spec;
    const int r = c.rank() - 2;
    const std::int64_t m = c.dim(r), k = m > 0 ? a.dim(r) * a.dim(r + 1) / m : 0;
    return shape_bucket(m, c.dim(r + 1), k);
  }
  bool tuning_safe(TensorList, ScalarList scalars) const override { return scalar(scalars, "beta") == 0; }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& a = shapes::required(name(), shapes, "a", example_shapes());
    const auto& b = shapes::required(name(), shapes, "b", example_shapes());
    std::vector<std::int64_t> c = a;  // [.., M, N] for the untransposed layouts
    if (!c.empty() && !b.empty()) c.back() = b.back();
    return {TensorSpec(dtype, shapes::value_or(shapes, "c", c)), TensorSpec(dtype, a), TensorSpec(dtype, b)};
  }

 private:
  struct Dims {
    std::int64_t m, n, k, batch, lda, ldb, ldc, batch_a, batch_b, batch_c;
    std::int64_t trans_a, trans_b;
  };
  // Shapes, strides and transposes, validated against each other.
  Dims dims(TensorList t, std::int64_t trans_a, std::int64_t trans_b) const {
    const int rank = batched_ ? 3 : 2;
    const char* names[] = {"c", "a", "b"};
    for (int i = 0; i < 3; ++i)
      if (t[i].spec.rank() != rank)
        throw ShapeError(fmt::format("{}: {} is {}; expected rank {} ({})", name(), names[i], t[i].spec.str(), rank,
                                     tensor_args()[i].doc));
    const TensorSpec &c = t[0].spec, &a = t[1].spec, &b = t[2].spec;
    const int r = rank - 2;  // index of the row dim
    Dims d{};
    d.trans_a = trans_a;
    d.trans_b = trans_b;
    d.m = a.dim(r + (d.trans_a ? 1 : 0));
    d.k = a.dim(r + (d.trans_a ? 0 : 1));
    const std::int64_t kb = b.dim(r + (d.trans_b ? 1 : 0));
    d.n = b.dim(r + (d.trans_b ? 0 : 1));
    if (kb != d.k)
      throw ShapeError(fmt::format("{}: a is {} and b is {}{}: their K ({} and {}) differ", name(), a.str(), b.str(),
                                   d.trans_a || d.trans_b ? " (with the transposes given)" : "", d.k, kb));
    if (c.dim(r) != d.m || c.dim(r + 1) != d.n)
      throw ShapeError(fmt::format("{}: c is {}; expected [{}{}, {}]", name(), c.str(),
                                   batched_ ? fmt::format("{}, ", a.dim(0)) : "", d.m, d.n));
    d.batch = batched_ ? a.dim(0) : 1;
    if (batched_ && (b.dim(0) != d.batch || c.dim(0) != d.batch))
      throw ShapeError(fmt::format("{}: batch sizes differ: c {}, a {}, b {}", name(), c.str(), a.str(), b.str()));
    checked_dim(name(), "M", d.m);
    checked_dim(name(), "N", d.n);
    checked_dim(name(), "K", d.k);
    checked_dim(name(), "batch", d.batch);
    d.lda = row_stride(name(), "a", a);
    d.ldb = row_stride(name(), "b", b);
    d.ldc = row_stride(name(), "c", c);
    if (batched_) {
      d.batch_a = a.stride(0);
      d.batch_b = b.stride(0);
      d.batch_c = c.stride(0);
    }
    return d;
  }
  bool batched_;
};

constexpr TensorArgInfo kLinearTensors[] = {
    {"out", "out", "[..., N], same dtype as x; rows may be strided"},
    {"x", "in", "[..., K] f16, bf16 or f32; rows may be strided"},
    {"weight", "in", "[N, K] (the LLM layout: one row per output feature)"},
    {"bias", "in", "[N], or absent (a rank-0 tensor)"},
    {"residual", "in", "[..., N] added after the activation, or absent; may be out itself"},
};
constexpr ScalarArgInfo kLinearScalars[] = {
    {"activation", 0, "applied after the bias: 0 none, 1 gelu (erf), 2 gelu (tanh), 3 silu"},
    {"tf32", 0, "1: f32 inputs on tensor cores as tf32"},
    {"path", 0, "0: the heuristic picks the kernel path; 80: the sm_80 path; 90: the sm_90a path (TMA + wgmma)"}};

// linear: out = act(x * weight^T + bias) + residual, the epilogue fused.
class Linear final : public TileOp {
 public:
  std::string_view name() const override { return "linear"; }
  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d,
                 ScalarList scalars) const override {
    const TensorSpec &x = specs[1], &w = specs[2];
    reference::linear(x.dtype(), d[1].data(), d[2].data(), d[3].empty() ? nullptr : d[3].data(),
                      d[4].empty() ? nullptr : d[4].data(), d[0].data(), host_data::rows(x), w.dim(0), w.dim(1),
                      Act(int(scalar(scalars, "activation"))));
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    return product_tolerance(out, specs[2].dim(1), scalar(scalars, "tf32") != 0);
  }
  std::string_view summary() const override {
    return "out = act(x * weight^T + bias) + residual on tensor cores; bias, activation and residual fused";
  }
  std::span<const TensorArgInfo> tensor_args() const override { return kLinearTensors; }
  std::span<const ScalarArgInfo> scalar_args() const override { return kLinearScalars; }
  std::string_view example_shapes() const override { return "x=32x4096 weight=6144x4096 bias=6144"; }

  Params specialize(TensorList t, ScalarList scalars, const Target& target) const override {
    check_tensor_count(t);
    check_scalar_names(scalars);
    const Dims d = dims(t);
    const DType dtype = t[1].spec.dtype();
    const bool tf32 = tf32_of(*this, scalars, dtype);
    expect_tensor_cores(name(), dtype, tf32, target);
    const double act = scalar(scalars, "activation");
    if (act != int(Act::none) && act != int(Act::gelu) && act != int(Act::gelu_tanh) && act != int(Act::silu))
      throw InvalidArgumentError(
          fmt::format("{}: activation is {}; expected 0 (none), 1 (gelu), 2 (gelu tanh) or 3 (silu)", name(), act));
    Params p;
    p.add_dtype("dtype", dtype);
    const bool aligned = chunk_aligned(dtype, t[1].data, {d.ldx}) && chunk_aligned(dtype, t[2].data, {d.ldw});
    const bool wgmma_ok = wgmma_possible(target, dtype, aligned, d.m, d.n, d.k);
    const TileConfig tile =
        pick_tile(d.m, d.n, d.k, dtype, tf32, target, wgmma_ok, 1, path_of(*this, scalars, wgmma_ok, target));
    add_tile(p, tile);
    p.add("vec", vec_param(tile, aligned));
    p.add("bias", t[3].spec.rank() != 0 ? 1 : 0);
    p.add("act", std::int64_t(act));
    p.add("residual", t[4].spec.rank() != 0 ? 1 : 0);
    p.add("tf32", tf32);
    p.add("wgmma", tile.wgmma);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Dims d = dims(t);
    return tile_geometry(p, d.m, d.n, 1);
  }

  void pack_args(const Params& p, TensorList t, ScalarList, KernelArgs& args) const override {
    const Dims d = dims(t);
    const unsigned chunk = operand_alignment(p);
    checks::expect_pointer(name(), "out", t[0].data, unsigned(dtype_size(t[0].spec.dtype())));
    checks::expect_pointer(name(), "x", t[1].data, chunk);
    checks::expect_pointer(name(), "weight", t[2].data, chunk);
    const unsigned element = unsigned(dtype_size(t[0].spec.dtype()));
    if (p.get("bias")) checks::expect_pointer(name(), "bias", t[3].data, element);
    if (p.get("residual")) checks::expect_pointer(name(), "residual", t[4].data, element);
    push_kernel_args(args, {.c = t[0].data, .a = t[1].data, .b = t[2].data,
                            .bias = p.get("bias") ? t[3].data : DevicePtr(0),
                            .residual = p.get("residual") ? t[4].data : DevicePtr(0), .m = d.m, .n = d.n, .k = d.k,
                            .lda = d.ldx, .ldb = d.ldw, .ldc = d.ldo, .ldr = d.ldr},
                     p);
  }

  std::string tuning_bucket(TensorList t) const override {
    const Dims d = dims(t);
    return shape_bucket(d.m, d.n, d.k);
  }
  // The residual may be the output itself: then each timed launch would add it again.
  bool tuning_safe(TensorList t, ScalarList) const override { return t[4].spec.rank() == 0 || t[4].data != t[0].data; }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const auto& w = shapes::required(name(), shapes, "weight", example_shapes());
    std::vector<std::int64_t> out = x;
    if (!out.empty() && !w.empty()) out.back() = w.front();
    auto optional = [&](std::string_view n) {
      auto it = shapes.find(n);
      return it == shapes.end() ? TensorSpec() : TensorSpec(dtype, it->second);
    };
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", out)), TensorSpec(dtype, x), TensorSpec(dtype, w),
            optional("bias"), optional("residual")};
  }

 private:
  struct Dims {
    std::int64_t m, n, k, ldx, ldw, ldo, ldr;
  };
  // x and out seen as [M, K] and [M, N] (leading dims collapsed), validated.
  Dims dims(TensorList t) const {
    const TensorSpec &out = t[0].spec, &x = t[1].spec, &w = t[2].spec, &bias = t[3].spec, &res = t[4].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kInputTypes);
    if (x.rank() < 2)
      throw ShapeError(fmt::format("{}: x is {}; expected [..., K] with at least 2 dims", name(), x.str()));
    if (w.rank() != 2 || w.dim(1) != x.dim(x.rank() - 1))
      throw ShapeError(fmt::format("{}: weight is {}; expected [N, {}] (one row per output feature)", name(), w.str(),
                                   x.dim(x.rank() - 1)));
    Dims d{};
    d.k = x.dim(x.rank() - 1);
    d.n = w.dim(0);
    d.m = x.numel() / std::max<std::int64_t>(d.k, 1);
    if (d.k == 0) d.m = out.numel() / std::max<std::int64_t>(d.n, 1);
    checks::expect_same_dtype(name(), "weight", w, "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    if (out.rank() != x.rank() || out.numel() != d.m * d.n || out.dim(out.rank() - 1) != d.n)
      throw ShapeError(fmt::format("{}: out is {}; expected x's leading dims and N = {}", name(), out.str(), d.n));
    if (bias.rank() != 0) {
      checks::expect_same_dtype(name(), "bias", bias, "x", x);
      if (bias.rank() != 1 || bias.dim(0) != d.n || !bias.is_contiguous())
        throw ShapeError(fmt::format("{}: bias is {}; expected [{}] contiguous, or absent", name(), bias.str(), d.n));
    }
    if (res.rank() != 0) {
      checks::expect_same_dtype(name(), "residual", res, "x", x);
      checks::expect_same_shape(name(), "residual", res, "out", out);
      d.ldr = leading_stride(res, "residual");
    }
    checked_dim(name(), "M", d.m);
    checked_dim(name(), "N", d.n);
    checked_dim(name(), "K", d.k);
    d.ldx = leading_stride(x, "x");
    d.ldo = leading_stride(out, "out");
    d.ldw = row_stride(name(), "weight", w);
    return d;
  }
  // Rows of a [..., cols] tensor as one evenly strided dim.
  std::int64_t leading_stride(const TensorSpec& t, std::string_view arg) const {
    for (int i = 0; i + 2 < t.rank(); ++i)
      if (t.dim(i) > 1 && t.stride(i) != t.stride(i + 1) * t.dim(i + 1))
        throw ShapeError(fmt::format("{}: {} {}: its leading dims must collapse into one evenly strided dim", name(),
                                     arg, t.str()));
    return row_stride(name(), arg, t);
  }
};

constexpr TensorArgInfo kGroupTensors[] = {
    {"out", "out", "[rows, N], same dtype as x: each group's rows written with its own weight"},
    {"x", "in", "[rows, K] f16, bf16 or f32, the groups' rows one after another (tokens sorted by expert)"},
    {"weight", "in", "[groups, N, K]: one [N, K] matrix per group (expert)"},
    {"offsets", "in", "i32 or i64 [groups + 1]: group g owns rows [offsets[g], offsets[g + 1])"},
};
constexpr ScalarArgInfo kGroupScalars[] = {
    {"max_rows", 0, "a hint: the most rows a group usually has (0: all rows); fewer blocks are launched and a "
                    "larger group takes more passes"},
    {"tf32", 0, "1: f32 inputs on tensor cores as tf32"},
    {"path", 0, "0: the heuristic picks the kernel path; 80: the sm_80 path; 90: the sm_90a path (TMA + wgmma)"}};

// group_gemm: many products of different M sharing N and K (MoE experts), one launch.
class GroupGemm final : public TileOp {
 public:
  std::string_view name() const override { return "group_gemm"; }
  void reference(std::span<const TensorSpec> specs, std::span<std::vector<std::uint8_t>> d, ScalarList) const override {
    const TensorSpec& w = specs[2];
    const std::vector<std::int64_t> offsets = host_data::indices(specs[3], d[3]);
    reference::group_gemm(w.dtype(), d[1].data(), d[2].data(), offsets.data(), d[0].data(), w.dim(0), w.dim(1), w.dim(2));
  }
  Tolerance tolerance(DType out, std::span<const TensorSpec> specs, ScalarList scalars) const override {
    return product_tolerance(out, specs[2].dim(2), scalar(scalars, "tf32") != 0);
  }
  // Groups of random sizes covering every row of x.
  std::vector<std::uint8_t> random_data(std::size_t i, std::span<const TensorSpec> specs,
                                        std::uint32_t seed) const override {
    if (i != 3) return OpDef::random_data(i, specs, seed);
    const std::int64_t rows = specs[1].dim(0);
    std::vector<std::int64_t> offsets = host_data::random_indices(specs[3].numel(), rows + 1, seed, false);
    std::sort(offsets.begin(), offsets.end());
    if (!offsets.empty()) offsets.front() = 0, offsets.back() = rows;
    return host_data::index_bytes(specs[3].dtype(), offsets);
  }
  std::string_view summary() const override {
    return "out[rows of g] = x[rows of g] * weight[g]^T for every group g (MoE experts) in one launch";
  }
  std::span<const TensorArgInfo> tensor_args() const override { return kGroupTensors; }
  std::span<const ScalarArgInfo> scalar_args() const override { return kGroupScalars; }
  std::string_view example_shapes() const override { return "x=4096x4096 weight=64x1536x4096 offsets=65"; }

  Params specialize(TensorList t, ScalarList scalars, const Target& target) const override {
    check_tensor_count(t);
    check_scalar_names(scalars);
    const Dims d = dims(t, scalars);
    const DType dtype = t[1].spec.dtype();
    const bool tf32 = tf32_of(*this, scalars, dtype);
    expect_tensor_cores(name(), dtype, tf32, target);
    Params p;
    p.add_dtype("dtype", dtype);
    // The tile for a typical group: rows / groups (decode-sized groups get the thin tile).
    // The sm_90a path walks every group's tiles up to all rows (no max_rows passes), skipping empty ones.
    const std::int64_t typical = std::max<std::int64_t>(1, d.rows / std::max<std::int64_t>(d.groups, 1));
    const bool aligned = chunk_aligned(dtype, t[1].data, {d.ldx}) && chunk_aligned(dtype, t[2].data, {d.k, d.n * d.k});
    const bool wgmma_ok = d.max_rows == d.rows && wgmma_possible(target, dtype, aligned, d.rows, d.n, d.k);
    const TileConfig tile = pick_tile(typical, d.n * d.groups, d.k, dtype, tf32, target, wgmma_ok, 1,
                                      path_of(*this, scalars, wgmma_ok, target));
    add_tile(p, tile);
    p.add("vec", vec_param(tile, aligned));
    p.add("offsets", std::int64_t(dtype_size(t[3].spec.dtype())));
    p.add("tf32", tf32);
    p.add("wgmma", tile.wgmma);
    return p;
  }

  LaunchGeometry geometry(const Params& p, TensorList t) const override {
    const Dims d = dims(t, {});
    return tile_geometry(p, d.rows, d.n, d.groups);
  }

  void pack_args(const Params& p, TensorList t, ScalarList scalars, KernelArgs& args) const override {
    const Dims d = dims(t, scalars);
    const unsigned chunk = operand_alignment(p);
    checks::expect_pointer(name(), "out", t[0].data, unsigned(dtype_size(t[0].spec.dtype())));
    checks::expect_pointer(name(), "x", t[1].data, chunk);
    checks::expect_pointer(name(), "weight", t[2].data, chunk);
    checks::expect_pointer(name(), "offsets", t[3].data, unsigned(dtype_size(t[3].spec.dtype())));
    push_kernel_args(args, {.c = t[0].data, .a = t[1].data, .b = t[2].data, .m = d.max_rows, .n = d.n, .k = d.k,
                            .lda = d.ldx, .ldb = d.k, .ldc = d.ldo, .batch_b = d.n * d.k,  // one weight matrix per group
                            .offsets = t[3].data, .total_rows = d.rows, .batches = d.groups},
                     p);
  }

  // Offsets decide which rows the kernel touches (it clamps them to x): with
  // debug checks on they are read back and must be a non-decreasing range
  // within the rows of x.
  void check_data(TensorList t, StreamHandle stream) const override {
    const Dims d = dims(t, {});
    const std::vector<std::int64_t> off = indices::read(t[3], stream);
    for (std::size_t g = 0; g + 1 < off.size(); ++g)
      if (off[g] < 0 || off[g] > off[g + 1] || off[g + 1] > d.rows)
        throw InvalidArgumentError(fmt::format("{}: offsets[{}..{}] = {}, {} are not a non-decreasing range within "
                                               "the {} rows of x",
                                               name(), g, g + 1, off[g], off[g + 1], d.rows));
  }

  std::string tuning_bucket(TensorList t) const override {
    const Dims d = dims(t, {});
    return shape_bucket(d.rows / std::max<std::int64_t>(d.groups, 1), d.n, d.k);
  }
  bool tuning_safe(TensorList, ScalarList) const override { return true; }

  std::vector<TensorSpec> specs_from_shapes(DType dtype, const ShapeMap& shapes) const override {
    const auto& x = shapes::required(name(), shapes, "x", example_shapes());
    const auto& w = shapes::required(name(), shapes, "weight", example_shapes());
    std::vector<std::int64_t> out = x;
    if (!out.empty() && w.size() == 3) out.back() = w[1];
    return {TensorSpec(dtype, shapes::value_or(shapes, "out", out)), TensorSpec(dtype, x), TensorSpec(dtype, w),
            TensorSpec(DType::i64, shapes::value_or(shapes, "offsets", {w.empty() ? 1 : w.front() + 1}))};
  }

 private:
  struct Dims {
    std::int64_t rows, groups, n, k, max_rows, ldx, ldo;
  };
  Dims dims(TensorList t, ScalarList scalars) const {
    const TensorSpec &out = t[0].spec, &x = t[1].spec, &w = t[2].spec, &off = t[3].spec;
    checks::expect_dtype_in(name(), "x", x.dtype(), kInputTypes);
    checks::expect_same_dtype(name(), "weight", w, "x", x);
    checks::expect_same_dtype(name(), "out", out, "x", x);
    if (x.rank() != 2) throw ShapeError(fmt::format("{}: x is {}; expected [rows, K]", name(), x.str()));
    if (w.rank() != 3 || w.dim(2) != x.dim(1) || !w.is_contiguous())
      throw ShapeError(fmt::format("{}: weight is {}; expected contiguous [groups, N, {}]", name(), w.str(), x.dim(1)));
    Dims d{};
    d.rows = x.dim(0);
    d.groups = w.dim(0);
    d.n = w.dim(1);
    d.k = w.dim(2);
    if (out.rank() != 2 || out.dim(0) != d.rows || out.dim(1) != d.n)
      throw ShapeError(fmt::format("{}: out is {}; expected [{}, {}]", name(), out.str(), d.rows, d.n));
    checks::expect_dtype_in(name(), "offsets", off.dtype(), indices::kTypes);
    if (off.rank() != 1 || off.dim(0) != d.groups + 1 || !off.is_contiguous())
      throw ShapeError(fmt::format("{}: offsets is {}; expected [{}] (groups + 1)", name(), off.str(), d.groups + 1));
    const double max_rows = scalar(scalars, "max_rows");
    if (max_rows < 0 || max_rows != double(std::int64_t(max_rows)))
      throw InvalidArgumentError(fmt::format("{}: max_rows is {}; expected a whole number >= 0", name(), max_rows));
    d.max_rows = max_rows > 0 ? std::min(d.rows, std::int64_t(max_rows)) : d.rows;
    checked_dim(name(), "rows", d.rows);
    checked_dim(name(), "N", d.n);
    checked_dim(name(), "K", d.k);
    checked_dim(name(), "groups", d.groups);
    d.ldx = row_stride(name(), "x", x);
    d.ldo = row_stride(name(), "out", out);
    return d;
  }
};

}  // namespace

const OpDef& gemm_op() {
  static const Gemm op(false);
  return op;
}
const OpDef& gemm_batched_op() {
  static const Gemm op(true);
  return op;
}
const OpDef& group_gemm_op() {
  static const GroupGemm op;
  return op;
}
const OpDef& linear_op() {
  static const Linear op;
  return op;
}

}  // namespace mojo
