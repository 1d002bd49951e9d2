// activation: params and errors without a GPU, the CPU reference against facts that do not
// depend on it, and the device output against the reference (the GPU, or the CPU device).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(ActivationOps, GatedHalvesAndVectorWidths) {
  EXPECT_EQ(params("swiglu", DType::bf16, "x=4x24576").str(), "dtype=bf16 d=12288 vec=8");
  EXPECT_EQ(params("gelu_and_mul", DType::f16, "x=4x6", {{"approximate", 1}}).str(), "dtype=f16 act=2 d=3 vec=1");
  EXPECT_EQ(params("gelu", DType::f32, "x=10").str(), "dtype=f32 act=1 vec=2");
  EXPECT_EQ(params("silu", DType::f32, "x=7").get("vec"), 1);
  EXPECT_EQ(error_of<ShapeError>([] { params("swiglu", DType::bf16, "x=4x7"); }),
            "swiglu: x is bf16[4, 7]; its last dim must be even (the two halves a and b)");
  EXPECT_EQ(error_of<ShapeError>([] { params("swiglu", DType::bf16, "x=4x8 out=4x8"); }),
            "swiglu: out is bf16[4, 8] but x is bf16[4, 8]; out must be x with the last dim halved");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("gelu", DType::f32, "x=4", {{"approximate", 2}});
            }),
            "gelu: approximate is 2; expected 0 (erf) or 1 (tanh)");
}

TEST(Reference, ActivationsAtKnownPoints) {
  EXPECT_NEAR(reference::activate(Act::silu, 1.0), 0.7310585786300049, 1e-12);
  EXPECT_NEAR(reference::activate(Act::gelu, 1.0), 0.8413447460685429, 1e-12);
  EXPECT_NEAR(reference::activate(Act::gelu_tanh, 1.0), 0.8411919906082768, 1e-12);
  EXPECT_NEAR(reference::activate(Act::gelu, -3.0), -0.004049694, 1e-8);
}

struct ActivationGpu : GpuOps {};

TEST_P(ActivationGpu, Activations) {
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
        if (c.op == std::string_view("gelu"))
          rt->launch(c.op, {out, xin}, {{"approximate", c.approximate}});
        else
          rt->launch(c.op, {out, xin});
        sync();
        std::vector<std::uint8_t> want(y.nbytes());
        reference::activation(d, c.act, c.gated, xh.data(), want.data(), s.rows * s.cols, s.cols);
        test::expect_close(d, out.read(), want, "out");
        EXPECT_EQ(xin.read(), xh);
      }
}

INSTANTIATE_TEST_SUITE_P(Compilers, ActivationGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
