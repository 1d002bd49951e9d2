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
#include "reference/reference.hpp"
#include "op_test_util.hpp"
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
    const std::vector<Params> plan = op->plan(p);  // the kernels a launch runs; the first enters by MOJO_KERNEL_<op>
    ASSERT_FALSE(plan.empty());
    const std::string kernel = op->kernel_name(plan[0]);
    EXPECT_EQ(op->entry_line(plan[0]).rfind(fmt::format("struct {}_p {{ using dtype = mojo::bf16;", kernel), 0), 0u);
    EXPECT_NE(op->entry_line(plan[0]).find(fmt::format("\nMOJO_KERNEL_{}", op->name())), std::string::npos);
    for (const Params& step : plan) {
      LaunchGeometry g = op->geometry(step, tensors);
      EXPECT_GT(g.grid.x, 0u);
      EXPECT_GT(g.block.x, 0u);
      EXPECT_LE(g.block.x, 1024u);
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
