// What the op tests share (tests/ops/<op>_test.cpp, ops_test.cpp,
// gpu_ops_test.cpp): specs from command-line shapes, params of an example,
// random inputs, and the fixture that runs ops on the GPU or the CPU device
// with each compiler of the build.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_util.hpp"
#include "mojo/check.hpp"
#include "mojo/error.hpp"
#include "mojo/op.hpp"
#include "reference/reference.hpp"
#include "test_util.hpp"

namespace mojo::op_test {

inline const Target kSm90 = Target::parse("sm_90");
inline constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// A Runtime's options that compile with `compiler` and keep nothing on disk: each compile test compiles anew.
inline RuntimeOptions memory_only(std::string compiler) {
  RuntimeOptions o;
  o.disk_cache = false;
  o.compiler = std::move(compiler);
  return o;
}

// The op's tensors for shapes in the command line's form ("x=32x4096"), with no memory.
inline std::vector<Tensor> example(const OpDef& op, DType dtype, std::string_view shapes) {
  std::vector<Tensor> out;
  for (const TensorSpec& s : op.specs_from_shapes(dtype, parse_shapes(op, shapes))) out.push_back({s, 0});
  return out;
}
inline Params params(std::string_view op, DType dtype, std::string_view shapes, ScalarList scalars = {}) {
  const OpDef& def = find_op(op);
  return def.specialize(example(def, dtype, shapes), scalars, kSm90);
}

// n values in ±[lo, hi] (never zero) as `dtype`'s bytes.
inline std::vector<std::uint8_t> random_tensor(DType dtype, std::int64_t n, std::uint32_t seed, float lo = 0.05f,
                                               float hi = 2.f) {
  return reference::encode(dtype, test::random_values(std::size_t(n), seed, lo, hi));
}

// Each op file derives its own suite from this (struct SoftmaxGpu : GpuOps {}) and instantiates it per compiler.
struct GpuOps : test::GpuTest, ::testing::WithParamInterface<std::string> {
  std::string compiler() const override { return GetParam(); }
  void sync() { rt->device().synchronize(); }
};

struct Rows {
  std::int64_t rows, cols;
};
inline std::string str(Rows s) { return fmt::format("[{}, {}]", s.rows, s.cols); }

// The tolerance of a norm's grad_x: it is rstd (g - mean(g) - xhat mean(g xhat)) with g = grad_out * weight,
// which cancels terms as large as rstd |g|, so fp32 keeps digits relative to the largest such term
// (`terms`), not to grad_x (two elements a row cancel to 1e-3 of them): the dtype's atol, widened by how
// much larger those terms are than the largest |grad_x| in `want`.
inline Tolerance cancelling_tolerance(DType dtype, double terms, const std::vector<std::uint8_t>& want) {
  double out_scale = 0;
  for (std::size_t i = 0; i < want.size() / dtype_size(dtype); ++i)
    out_scale = std::max(out_scale, double(std::abs(reference::load(dtype, want.data(), i))));
  Tolerance t = test::tolerance(dtype);
  t.atol *= std::max(1.0, terms / out_scale);
  return t;
}
// The tolerance of column sums over `rows` products (grad_weight, grad_bias): fp32 rounding grows like sqrt(rows).
inline Tolerance column_sum_tolerance(DType dtype, std::int64_t rows) {
  Tolerance t = test::tolerance(dtype);
  t.atol *= std::sqrt(double(rows));
  return t;
}

// The Args struct an op filled (kernel_templates/<op>_args.h, with void
// element types), read back from what pack_args pushed: one argument per
// field, each of its field's size, then `descriptors` TMA descriptors.
template <class A>
A packed(const KernelArgs& args, int descriptors = 0) {
  A a{};
  // Each field written through its offset: a __restrict__ pointer field's address will not convert to void*.
  unsigned char* const bytes = reinterpret_cast<unsigned char*>(&a);
  int i = 0;
  for_each_arg(a, [&](const auto& field) {
    const std::size_t offset = reinterpret_cast<std::uintptr_t>(&field) - reinterpret_cast<std::uintptr_t>(&a);
    if (i < args.count() && args.size(i) == sizeof(field))
      std::memcpy(bytes + offset, args.data()[i], sizeof(field));
    else
      ADD_FAILURE() << "argument " << i << " is not field " << i << " of this Args struct";
    ++i;
  });
  EXPECT_EQ(args.count(), i + descriptors) << "arguments vs the Args struct's fields";
  return a;
}

}  // namespace mojo::op_test
