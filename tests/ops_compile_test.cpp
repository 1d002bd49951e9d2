// Every op x dtype x target compiles with each compiler of this build, with
// no GPU, ptxas accepts the PTX, no PTX line adds to a 64-bit shared-memory word, and on sm_90+ every kernel
// waits for the kernel before it (griddepcontrol.wait) before touching global memory; odd shapes (rows of 1,
// 31, 4097 and a whole vocabulary) compile too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;

namespace {

std::vector<Tensor> tensors_for(const OpDef& op, DType dtype, std::string_view shapes) {
  std::vector<Tensor> out;
  for (const TensorSpec& s : op.specs_from_shapes(dtype, parse_shapes(op, shapes))) out.push_back({s, 0});
  return out;
}

// The PTX lines that add to a 64-bit shared-memory word atomically: ptxas builds them as a compare-and-swap loop
// (ATOMS.CAST.SPIN.64 on sm_80 and sm_90), whose retries grow with the threads on one address; mojo::shared_add
// splits such an add into two native 32-bit ones.
std::vector<std::string> shared_64_bit_adds(const std::string& ptx) {
  std::vector<std::string> out;
  std::istringstream lines(ptx);
  for (std::string line; std::getline(lines, line);) {
    const auto op = line.find_first_not_of(" \t");
    if (op == std::string::npos || (line.compare(op, 4, "atom") != 0 && line.compare(op, 3, "red") != 0)) continue;
    const bool shared = line.find(".shared") != std::string::npos;
    for (const char* add : {".add.u64", ".add.s64", ".add.f64"})
      if (shared && line.find(add) != std::string::npos && out.size() < 3) out.push_back(line);  // the first few
  }
  return out;
}

// The kernels of `ptx` that touch global memory before griddepcontrol.wait (mojo::after_previous_kernels): under
// programmatic dependent launch such a kernel could read what the kernel before it has not written yet.
std::vector<std::string> kernels_reading_before_the_wait(const std::string& ptx) {
  std::vector<std::string> out;
  for (std::size_t entry = ptx.find(".entry "); entry != std::string::npos;) {
    const std::size_t next = ptx.find(".entry ", entry + 1);
    const std::string body = ptx.substr(entry, next == std::string::npos ? std::string::npos : next - entry);
    std::size_t first_access = std::string::npos;
    std::istringstream lines(body);
    std::size_t at = 0;
    for (std::string line; std::getline(lines, line); at += line.size() + 1) {
      const auto op = line.find_first_not_of(" \t");
      if (op == std::string::npos || line.find(".global") == std::string::npos) continue;
      for (const char* access : {"ld.", "st.", "atom.", "red.", "cp."})
        if (line.compare(op, std::strlen(access), access) == 0) first_access = std::min(first_access, at);
      if (first_access != std::string::npos) break;
    }
    const std::size_t wait = body.find("griddepcontrol.wait");
    if (wait == std::string::npos || wait > first_access) out.push_back(body.substr(7, body.find('(') - 7));
    entry = next;
  }
  return out;
}

// Compiles to PTX and runs ptxas on it.
void expect_ptxas_accepts(const std::string& compiler, const std::string& op_name, DType dtype, const char* arch,
                          std::string_view shapes, ScalarList scalars = {}) {
  RuntimeOptions o;
  o.disk_cache = false;
  o.compiler = compiler;
  Runtime rt(o);
  const OpDef& op = find_op(op_name);
  Artifact a = rt.compile(op_name, tensors_for(op, dtype, shapes), scalars, Target::parse(arch), Emit::ptx);
  const std::string& ptx = *a.binary;
  EXPECT_NE(ptx.find(".target " + Target::parse(arch).sm_name()), std::string::npos);
  EXPECT_NE(ptx.find(".entry " + a.kernel_name), std::string::npos) << "kernel " << a.kernel_name;
  EXPECT_EQ(shared_64_bit_adds(ptx), std::vector<std::string>{}) << op_name << " " << shapes;
  if (Target::parse(arch).sm >= 90)
    EXPECT_EQ(kernels_reading_before_the_wait(ptx), std::vector<std::string>{}) << op_name << " " << shapes;
  else
    EXPECT_EQ(ptx.find("griddepcontrol"), std::string::npos) << "sm_90 and later only";
  test::TempDir dir;
  test::write_file(dir.path() / "k.ptx", ptx);
  auto r = test::run_command(std::string(MOJO_TEST_PTXAS) + " -arch=" + arch + " " + (dir.path() / "k.ptx").string() +
                             " -o " + (dir.path() / "k.cubin").string());
  EXPECT_EQ(r.exit_code, 0) << op_name << " " << shapes << "\n" << r.output;
}

using Case = std::tuple<std::string, std::string, DType, const char*>;
// compiler x op x each of the op's dtypes x target.
std::vector<Case> every_op_case() {
  std::vector<Case> out;
  for (const std::string& compiler : test::compilers())
    for (const OpDef* op : all_ops())
      for (DType dtype : op->dtypes())
        for (const char* arch : {"sm_80", "sm_90", "sm_90a"}) out.emplace_back(compiler, std::string(op->name()), dtype, arch);
  return out;
}

}  // namespace

struct EveryOpCompiles : ::testing::TestWithParam<Case> {};

TEST_P(EveryOpCompiles, PtxIsAcceptedByPtxas) {
  auto [compiler, op_name, dtype, arch] = GetParam();
  const OpDef& op = find_op(op_name);
  expect_ptxas_accepts(compiler, op_name, dtype, arch, op.example_shapes());
}

INSTANTIATE_TEST_SUITE_P(
    AllOps, EveryOpCompiles,
    ::testing::ValuesIn(every_op_case()),
    [](const auto& info) {
      return fmt::format("{}_{}_{}_{}", test::compiler_test_name(std::get<0>(info.param)), std::get<1>(info.param),
                         dtype_name(std::get<2>(info.param)), std::get<3>(info.param));
    });

// Shapes off the fast path: one-element rows, odd rows (vector width 1),
// rows wider than the registers hold, the vocabulary, partial rotary.
struct OddShape {
  const char* op;
  const char* shapes;
};
constexpr OddShape kOddShapes[] = {
    {"rms_norm", "x=3x1"},
    {"rms_norm", "x=3x31"},
    {"rms_norm", "x=3x4097"},
    {"add_rms_norm", "x=5x127"},
    {"layer_norm", "x=3x1 mean=3 rstd=3"},
    {"layer_norm", "x=2x4097"},
    {"layer_norm", "x=2x151936"},
    {"rms_norm_backward", "x=7x31"},
    {"rms_norm_backward", "x=2x65536 grad_residual=2x65536"},
    {"layer_norm_backward", "x=7x31"},
    {"layer_norm_backward", "x=2x65536"},
    {"softmax", "x=1x1"},
    {"softmax", "x=4x31"},
    {"softmax", "x=1x151936"},
    {"log_softmax", "x=2x262144"},
    {"softmax_backward", "out=2x151936"},
    {"swiglu", "x=3x2"},
    {"gelu_and_mul", "x=3x8194"},
    {"silu", "x=7"},
    {"rotary_embedding", "q=3x4x64 k=3x1x64 cos_sin_cache=100x32"},
    {"embedding", "ids=5 weight=100x31"},
    {"store_kv_cache", "k_cache=4x16x1x3 k=5x1x3"},
};

struct OddShapesCompile : ::testing::TestWithParam<std::tuple<std::string, OddShape>> {};

TEST_P(OddShapesCompile, PtxIsAcceptedByPtxas) {
  auto [compiler, odd] = GetParam();
  for (DType dtype : {DType::f32, DType::bf16}) expect_ptxas_accepts(compiler, odd.op, dtype, "sm_90", odd.shapes);
}

INSTANTIATE_TEST_SUITE_P(Odd, OddShapesCompile,
                         ::testing::Combine(::testing::ValuesIn(test::compilers()), ::testing::ValuesIn(kOddShapes)),
                         [](const auto& info) {
                           return fmt::format("{}_{}_{}", test::compiler_test_name(std::get<0>(info.param)), std::get<1>(info.param).op,
                                              info.index);
                         });

TEST(OpsCompile, GeluBothFormsAndGptjRotaryCompile) {
  expect_ptxas_accepts("nvrtc", "gelu", DType::bf16, "sm_90", "x=4x4096", {{"approximate", 1}});
  expect_ptxas_accepts("nvrtc", "gelu_and_mul", DType::f16, "sm_80", "x=4x4096", {{"approximate", 1}});
  expect_ptxas_accepts("nvrtc", "rotary_embedding", DType::bf16, "sm_90", "q=4x32x128 k=4x8x128 cos_sin_cache=64x128",
                       {{"neox", 0}});
}
