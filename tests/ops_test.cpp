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

// A param an op's code asks for and its params lack is a broken invariant between two parts of mojo-jit, not the
// caller's mistake: InternalError, which a user can tell from the InvalidArgumentErrors and report.
TEST(Ops, AParamAskedForAndNeverAddedIsAnInternalError) {
  Params p;
  p.add("bm", 64);
  EXPECT_EQ(test::error_of<InternalError>([&] { (void)p.get("bn"); }), "internal error: no param 'bn' in {bm=64}");
}

// An op's code names its tensors' places by the names of its table (slot), computed when it compiles (a name
// the table lacks does not compile).
TEST(Ops, TensorSlotsAreTheTablesPlacesByName) {
  static constexpr TensorArgInfo table[] = {{"out", "out", ""}, {"x", "in", ""}, {"weight", "in", ""}};
  constexpr std::size_t out = slot(table, "out"), weight = slot(table, "weight");
  EXPECT_EQ(out, 0u);
  EXPECT_EQ(weight, 2u);
  EXPECT_EQ(table[weight].name, "weight");
}

TEST(Ops, ExampleShapesReadAsCommandLineOptions) {
  EXPECT_EQ(shapes_as_options("q=1x2  k=3"), "--shape q=1x2 --shape k=3");
  EXPECT_EQ(error_of<ShapeError>([] { parse_shapes(find_op("softmax"), "y=3"); }),
            "softmax has no tensor 'y'; its tensors: out, x");
  EXPECT_EQ(error_of<ShapeError>([] { find_op("embedding").specs_from_shapes(DType::f16, {}); }),
            "embedding: give the shape of ids, e.g. --shape ids=32 --shape weight=151936x4096");
}

// OpDef::check_memory, by addresses alone (nothing is launched): what shares an element is refused, what lies
// interleaved in one buffer is not.
TEST(Ops, WrittenTensorsMustNotShareMemoryButInPlaceOfTheirDeclaredInput) {
  const DevicePtr base = 1 << 20;
  const auto view = [&](DType d, std::initializer_list<std::int64_t> shape, std::initializer_list<std::int64_t> strides,
                        std::int64_t element) {
    const std::vector<std::int64_t> dims(shape), steps(strides);
    return Tensor{TensorSpec(d, dims, steps), base + DevicePtr(element) * dtype_size(d)};
  };
  // q and k as slices of one [5, (4 + 2 + 2) x 64] qkv: rotary writes both, and no element is shared.
  const OpDef& rotary = find_op("rotary_embedding");
  const Tensor q = view(DType::bf16, {5, 4, 64}, {512, 64, 1}, 0), k = view(DType::bf16, {5, 2, 64}, {512, 64, 1}, 256);
  const Tensor positions{TensorSpec(DType::i64, {5}), base + 100000},
      cache{TensorSpec(DType::bf16, {16, 64}), base + 200000};
  rotary.check_memory(std::vector<Tensor>{q, k, positions, cache});
  // k one head earlier: its first head is q's last.
  const Tensor k_over_q = view(DType::bf16, {5, 2, 64}, {512, 64, 1}, 192);
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              rotary.check_memory(std::vector<Tensor>{q, k_over_q, positions, cache});
            }),
            "rotary_embedding: q and k share memory; give q memory of its own");
  // k ending where the next token's q begins is apart; one element further is not.
  rotary.check_memory(std::vector<Tensor>{q, view(DType::bf16, {5, 2, 64}, {512, 64, 1}, 384), positions, cache});
  EXPECT_EQ(
      error_of<InvalidArgumentError>([&] {
        rotary.check_memory(std::vector<Tensor>{q, view(DType::bf16, {5, 2, 64}, {512, 64, 1}, 385), positions, cache});
      }),
      "rotary_embedding: q and k share memory; give q memory of its own");

  // rms_norm's out may be exactly x (in place), not x one element along, nor x's rows at another stride.
  const OpDef& rms_norm = find_op("rms_norm");
  const Tensor x = view(DType::f32, {4, 64}, {64, 1}, 0), w{TensorSpec(DType::f32, {64}), base + 100000};
  rms_norm.check_memory(std::vector<Tensor>{x, x, w});
  const std::string shared =
      "rms_norm: out and x share memory; give out memory of its own (or exactly x's, to write it in place)";
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              rms_norm.check_memory(std::vector<Tensor>{view(DType::f32, {4, 64}, {64, 1}, 1), x, w});
            }),
            shared);
  EXPECT_EQ(error_of<InvalidArgumentError>([&] {
              rms_norm.check_memory(std::vector<Tensor>{view(DType::f32, {4, 64}, {128, 1}, 0), x, w});
            }),
            shared);
  // Two inputs may share memory (read only); an empty tensor shares nothing.
  rms_norm.check_memory(
      std::vector<Tensor>{view(DType::f32, {4, 64}, {64, 1}, 1000), x, view(DType::f32, {64}, {1}, 0)});
  rms_norm.check_memory(std::vector<Tensor>{view(DType::f32, {0, 64}, {64, 1}, 1), x, w});
  // Null pointers are pack_args' to name ("a null pointer"), not shared memory.
  rms_norm.check_memory(std::vector<Tensor>{Tensor{x.spec, 0}, Tensor{x.spec, 0}, Tensor{w.spec, 0}});
  // A tensor written over an input it does not declare: moe_dispatch's positions over ids read ids later.
  const OpDef& dispatch = find_op("moe_dispatch");
  const std::vector<Tensor> moe = example(dispatch, DType::bf16, "expert_offsets=9 ids=100x8 x=100x72");
  std::vector<Tensor> over = moe;
  for (std::size_t i = 0; i < over.size(); ++i) over[i].data = base + DevicePtr(i) * 1000000;
  dispatch.check_memory(over);
  const auto infos = dispatch.tensor_args();
  std::size_t positions_at = 0, ids_at = 0;
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].name == "positions") positions_at = i;
    if (infos[i].name == "ids") ids_at = i;
  }
  over[positions_at].data = over[ids_at].data;
  EXPECT_EQ(error_of<InvalidArgumentError>([&] { dispatch.check_memory(over); }),
            "moe_dispatch: positions and ids share memory; give positions memory of its own");
}
