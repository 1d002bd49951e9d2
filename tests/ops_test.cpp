// The operator library without a GPU: every op's params from shapes and
// alignment, its errors by content, and the CPU references checked against
// facts that do not depend on them (known values, sums, a finite-difference
// gradient), since the GPU tests trust them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mojo/error.hpp"
#include "mojo/op.hpp"
#include "op_test_util.hpp"
#include "reference/reference.hpp"
#include "test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;

TEST(Ops, EveryOpHasAWorkingExampleAndDocumentedTensors) {
  for (const OpDef* op : all_ops()) {
    SCOPED_TRACE(std::string(op->name()));
    auto tensors = example(*op, DType::bf16, op->example_shapes());
    EXPECT_EQ(tensors.size(), op->tensor_args().size());
    Params p = op->specialize(tensors, {}, kSm90);
    EXPECT_EQ(p.dtype("dtype"), DType::bf16);
    // The kernels a launch runs, each entered by its template's macro (a one-kernel op by MOJO_KERNEL_<op>).
    const std::vector<Params> plan = op->plan(p);
    ASSERT_FALSE(plan.empty());
    for (const Params& step : plan) {
      const std::string kernel = op->kernel_name(step), line = op->entry_line(step);
      EXPECT_EQ(line.rfind(fmt::format("struct {}_p {{", kernel), 0), 0u) << line;
      EXPECT_NE(line.find(fmt::format("\n{}({}, {}_p)", op->entry_macro(step), kernel, kernel)), std::string::npos);
    }
    if (plan.size() == 1) EXPECT_EQ(op->entry_macro(plan[0]).rfind(fmt::format("MOJO_KERNEL_{}", op->name()), 0), 0u);
    // Every step launches in some run of the plan (a plan run per slice skips some steps in some runs).
    const std::int64_t runs = op->repeats(p, tensors);
    for (const Params& step : plan) {
      unsigned most = 0;
      for (std::int64_t r = 0; r < runs; ++r) {
        Params run = step;
        if (runs > 1) run.add("repeat", r);
        const LaunchGeometry g = op->geometry(run, tensors);
        most = std::max(most, g.grid.x);
        EXPECT_GT(g.block.x, 0u);
        EXPECT_LE(g.block.x, 1024u);
      }
      EXPECT_GT(most, 0u) << step.str();
    }
    for (const TensorArgInfo& t : op->tensor_args()) EXPECT_FALSE(t.doc.empty()) << t.name;
  }
}

TEST(Ops, ExampleShapesReadAsCommandLineOptions) {
  EXPECT_EQ(shapes_as_options("q=1x2  k=3"), "--shape q=1x2 --shape k=3");
  EXPECT_EQ(error_of<ShapeError>([] { parse_shapes(find_op("softmax"), "y=3"); }),
            "softmax has no tensor 'y'; its tensors: out, x");
  EXPECT_EQ(error_of<ShapeError>([] { find_op("embedding").specs_from_shapes(DType::f16, {}); }),
            "embedding: give the shape of ids, e.g. --shape ids=32 --shape weight=151936x4096");
}
