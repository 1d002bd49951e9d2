// softmax: params and errors without a GPU, the CPU reference against facts that do not
// depend on it, and the device output against the reference (the GPU, or the CPU device).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "op_test_util.hpp"

using namespace mojo;
using namespace mojo::op_test;
using test::error_of;
using test::GpuTensor;

TEST(SoftmaxOp, VocabularyRowsUseWholeBlocksOrChunksWhenFew) {
  // Rows read twice (over 16 vectors a thread) keep their first vectors in shared memory, all a block may hold.
  EXPECT_EQ(params("softmax", DType::bf16, "x=512x151936").str(),
            "dtype=bf16 cols=151936 vec=8 threads=1024 rows=1 cache=14400 log=0");
  // Fewer rows than the H100's 132 SMs: each row over several blocks, about two blocks an SM in all (at most
  // 32 a row), a plan of two steps (the rows' parts, then the output).
  EXPECT_EQ(params("softmax", DType::bf16, "x=32x151936").str(),
            "dtype=bf16 cols=151936 vec=8 threads=512 chunks=8 cooperative=0 log=0");
  EXPECT_EQ(params("softmax_backward", DType::f16, "out=4x151936").str(),
            "dtype=f16 cols=151936 vec=8 threads=128 chunks=32 cooperative=0");
  // A grid that fits on half the SMs (one or two rows of a vocabulary): both steps in one cooperative launch,
  // each thread's share of its chunk in registers (5 vectors here).
  const OpDef& op = find_op("softmax");
  const std::vector<Tensor> t = example(op, DType::f32, "x=1x151936");
  const Params p = op.specialize(t, {}, kSm90);
  EXPECT_EQ(p.str(), "dtype=f32 cols=151936 vec=4 threads=256 chunks=32 cooperative=1 log=0");
  ASSERT_EQ(op.plan(p).size(), 1u);
  EXPECT_EQ(op.entry_macro(p), "MOJO_KERNEL_softmax_cooperative");
  EXPECT_EQ(op.geometry(p, t).grid.x, 32u) << "one row over 32 blocks";
  EXPECT_TRUE(op.geometry(p, t).cooperative);
  EXPECT_EQ(op.workspace_bytes(p, t), 32u * 2 * sizeof(float)) << "a max and a sum per block";
  EXPECT_EQ(op.sync_words(p, t), 2u) << "the row's barrier and its count of blocks done";
  // cooperative = 0: the two steps (an A/B on one machine).
  const Params two = op.specialize(t, {{"cooperative", 0}}, kSm90);
  ASSERT_EQ(op.plan(two).size(), 2u);
  EXPECT_EQ(op.entry_macro(op.plan(two)[1]), "MOJO_KERNEL_softmax_chunks");
  EXPECT_FALSE(op.geometry(op.plan(two)[1], t).cooperative);
  EXPECT_EQ(op.sync_words(two, t), 0u);
  EXPECT_EQ(params("softmax_backward", DType::bf16, "out=2x151936").get("cooperative"), 1);
  EXPECT_EQ(params("log_softmax", DType::f16, "x=4x151936", {{"cooperative", 1}}).get("cooperative"), 1);
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("softmax", DType::f32, "x=512x4096", {{"cooperative", 1}});
            }),
            "softmax: cooperative = 1 is for few long rows split over blocks; these 512 rows take a block each");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("softmax", DType::f32, "x=1x1048576", {{"cooperative", 1}});
            }),
            "softmax: cooperative = 1 keeps a thread's share of a chunk in registers, at most 8 vectors; these rows "
            "need 16");
  EXPECT_EQ(params("softmax", DType::f32, "x=1x1048576").get("cooperative"), 0) << "too long for the registers";
  // Asked for where the rule's chunks would not fit on the SMs: fewer a row (5 rows of 26 on sm_90's 132), while
  // a thread's share still fits its registers.
  EXPECT_EQ(params("softmax", DType::f32, "x=5x151936", {{"cooperative", 1}}).str(),
            "dtype=f32 cols=151936 vec=4 threads=256 chunks=26 cooperative=1 log=0");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("softmax", DType::f32, "x=20x151936", {{"cooperative", 1}});
            }),
            "softmax: cooperative = 1 keeps a thread's share of a chunk in registers, at most 8 vectors; these rows "
            "need 13");
  EXPECT_EQ(error_of<InvalidArgumentError>([] {
              params("softmax", DType::f32, "x=100x4096", {{"cooperative", 1}});
            }),
            "softmax: cooperative = 1 is for few long rows split over blocks; these 100 rows take a block each");
  EXPECT_EQ(params("log_softmax", DType::f32, "x=4x31").str(),
            "dtype=f32 cols=31 vec=1 threads=32 rows=4 cache=0 log=1");
  EXPECT_EQ(params("softmax", DType::f16, "x=1000x8").str(),
            "dtype=f16 cols=8 vec=8 threads=1 rows=128 cache=0 log=0");
  EXPECT_EQ(error_of<ShapeError>([] { params("softmax", DType::f16, "x=4x2000000"); }),
            "softmax: the last dim of x is 2000000; supported: 1 to 1048576");
}

TEST(Reference, SoftmaxRowsSumToOneAndLogSoftmaxAgrees) {
  std::vector<float> x = {1, 2, 3, -1e4f, 0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<float> y(8), ly(8);
  reference::softmax(DType::f32, x.data(), y.data(), 2, 4, false);
  reference::softmax(DType::f32, x.data(), ly.data(), 2, 4, true);
  EXPECT_NEAR(y[0] + y[1] + y[2] + y[3], 1.0, 1e-6);
  EXPECT_EQ(y[3], 0.f);
  EXPECT_FLOAT_EQ(y[4], 0.25f);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(std::exp(double(ly[i])), y[i], 1e-6);
}

TEST(Reference, SoftmaxBackwardMatchesFiniteDifferences) {
  std::vector<float> x = {0.3f, -1.2f, 2.0f, 0.1f}, g = {0.5f, -0.25f, 1.0f, 0.75f}, y(4), dx(4);
  reference::softmax(DType::f32, x.data(), y.data(), 1, 4, false);
  reference::softmax_backward(DType::f32, g.data(), y.data(), dx.data(), 1, 4);
  for (std::size_t i = 0; i < 4; ++i) {
    auto loss = [&](float delta) {
      std::vector<float> xs = x, ys(4);
      xs[i] += delta;
      reference::softmax(DType::f32, xs.data(), ys.data(), 1, 4, false);
      double l = 0;
      for (int j = 0; j < 4; ++j) l += double(ys[j]) * g[j];
      return l;
    };
    EXPECT_NEAR(dx[i], (loss(1e-3f) - loss(-1e-3f)) / 2e-3, 1e-3) << i;
  }
}

struct SoftmaxGpu : GpuOps {};

TEST_P(SoftmaxGpu, SoftmaxAndLogSoftmax) {
  for (const char* op : {"softmax", "log_softmax"})
    for (DType d : kFloatTypes)
      for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{2, 4097}, Rows{2, 151936}, Rows{1, 262148}}) {
        SCOPED_TRACE(fmt::format("{} {} {}", op, dtype_name(d), str(s)));
        const TensorSpec x(d, {s.rows, s.cols});
        const auto xh = random_tensor(d, s.rows * s.cols, 10, 0.2f, 8.f);
        GpuTensor out(x), xin(x, xh);
        rt->launch(op, {out, xin});
        sync();
        std::vector<std::uint8_t> want(x.nbytes());
        reference::softmax(d, xh.data(), want.data(), s.rows, s.cols, std::string_view(op) == "log_softmax");
        test::expect_close(d, out.read(), want, "out");
        EXPECT_EQ(xin.read(), xh);
      }
}

TEST_P(SoftmaxGpu, SoftmaxOfMaskedRows) {
  // -inf entries (an attention or vocabulary mask) get probability 0 (log: -inf).
  for (const char* op : {"softmax", "log_softmax"})
    for (std::int64_t cols : {31, 4097, 262148}) {
      SCOPED_TRACE(fmt::format("{} cols {}", op, cols));
      auto values = test::random_values(std::size_t(2 * cols), 11, 0.2f, 8.f);
      for (std::size_t i = 0; i < values.size(); i += 3) values[i] = -INFINITY;
      const TensorSpec x(DType::f32, {2, cols});
      const auto xh = reference::encode(DType::f32, values);
      GpuTensor out(x), xin(x, xh);
      rt->launch(op, {out, xin});
      sync();
      std::vector<std::uint8_t> want(x.nbytes());
      reference::softmax(DType::f32, xh.data(), want.data(), 2, cols, std::string_view(op) == "log_softmax");
      test::expect_close(DType::f32, out.read(), want, "out");
    }
}

TEST_P(SoftmaxGpu, SoftmaxBackward) {
  for (DType d : kFloatTypes)
    for (Rows s : {Rows{1, 1}, Rows{3, 31}, Rows{2, 4097}, Rows{2, 151936}, Rows{1, 70001}}) {  // chunked: the last 2
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d), str(s)));
      const std::int64_t n = s.rows * s.cols;
      const TensorSpec x(d, {s.rows, s.cols});
      std::vector<std::uint8_t> out_h(x.nbytes());
      reference::softmax(d, random_tensor(d, n, 12, 0.2f, 8.f).data(), out_h.data(), s.rows, s.cols, false);
      const auto gh = random_tensor(d, n, 13);
      GpuTensor grad_x(x), grad_out(x, gh), out(x, out_h);
      rt->launch("softmax_backward", {grad_x, grad_out, out});
      sync();
      std::vector<std::uint8_t> want(x.nbytes());
      reference::softmax_backward(d, gh.data(), out_h.data(), want.data(), s.rows, s.cols);
      test::expect_close(d, grad_x.read(), want, "grad_x");
      EXPECT_EQ(out.read(), out_h);
    }
}

// Few long rows: one cooperative launch (each thread's share of its chunk in registers, a barrier of the row's
// blocks) computes the same sums in the same order as the two launches, so the same bits. Each runs twice with
// debug checks, which read the sync words back after the launch: the first launch must leave them zero for the
// second; and a captured graph of it replays.
TEST_P(SoftmaxGpu, FewLongRowsGiveTheSameBitsInOneCooperativeLaunchAsInTwo) {
  RuntimeOptions o = options();
  o.debug_checks = true;
  Runtime checked(o);
  struct Case {
    const char* op;
    DType dtype;
    Rows shape;
  };
  // (On sm_80's 108 SMs two vocabulary rows of 32 blocks are past half of them: two rows of 20,000 here.)
  for (const Case c :
       {Case{"softmax", DType::bf16, Rows{1, 151936}}, Case{"log_softmax", DType::f32, Rows{2, 20000}},
        Case{"softmax_backward", DType::f16, Rows{1, 151936}}, Case{"softmax_backward", DType::f32, Rows{2, 4097}}}) {
    SCOPED_TRACE(fmt::format("{} {} {}", c.op, dtype_name(c.dtype), str(c.shape)));
    const bool backward = std::string_view(c.op) == "softmax_backward";
    const std::int64_t n = c.shape.rows * c.shape.cols;
    const TensorSpec x(c.dtype, {c.shape.rows, c.shape.cols});
    GpuTensor out(x), in(x, random_tensor(c.dtype, n, 15, 0.2f, 8.f)), y(x, random_tensor(c.dtype, n, 16, 0.f, 1.f));
    const std::vector<Tensor> tensors = backward ? std::vector<Tensor>{out, in, y} : std::vector<Tensor>{out, in};
    ASSERT_EQ(find_op(c.op).specialize(tensors, {}, rt->device().target()).get("cooperative"), 1);
    checked.launch(c.op, tensors, {{"cooperative", 0}});
    sync();
    const std::vector<std::uint8_t> two_launches = out.read();
    for (int run = 0; run < 2; ++run) {
      out.poison();
      checked.launch(c.op, tensors);
      sync();
      EXPECT_EQ(out.read(), two_launches) << "run " << run;
    }
    Stream stream;
    const Graph graph = Graph::capture(stream, [&] { rt->launch(c.op, tensors, {}, stream); });
    for (int replay = 0; replay < 2; ++replay) {
      out.poison();
      graph.launch(stream);
      stream.synchronize();
      EXPECT_EQ(out.read(), two_launches) << "replay " << replay;
    }
  }
}

// Rows too long for the registers, and as many as the device's reference GPU has SMs (one block a row, not
// chunked): the first `cache` vectors of each row wait in shared memory for the writing pass, the rest are read
// again, and both kinds of vector must come out right (f32 keeps fewer in registers than 16-bit types).
TEST_P(SoftmaxGpu, WideRowsKeepTheirFirstVectorsInSharedMemory) {
  const std::int64_t rows = reference_sm_count(rt->device().target());
  struct Case {
    const char* op;
    std::int64_t cols;
  };
  for (const Case c : {Case{"softmax", 65540}, Case{"log_softmax", 65540}, Case{"softmax_backward", 40000}}) {
    SCOPED_TRACE(fmt::format("{} [{}, {}]", c.op, rows, c.cols));
    const bool backward = std::string_view(c.op) == "softmax_backward";
    const TensorSpec x(DType::f32, {rows, c.cols});
    const auto xh = random_tensor(DType::f32, rows * c.cols, 14, 0.2f, 8.f);
    std::vector<std::uint8_t> want(x.nbytes()), out_h(x.nbytes());
    GpuTensor out(x), in(x, xh);
    const Params p = find_op(c.op).specialize(backward ? std::vector<Tensor>{out, in, in} : std::vector<Tensor>{out, in},
                                              {}, rt->device().target());
    EXPECT_GT(p.get("cache"), 0) << p.str();
    EXPECT_LT(p.get("cache"), c.cols / p.get("vec")) << p.str() << ": some vectors are read again";
    if (backward) {
      reference::softmax(DType::f32, xh.data(), out_h.data(), rows, c.cols, false);
      GpuTensor y(x, out_h);
      rt->launch(c.op, {out, in, y});
      reference::softmax_backward(DType::f32, xh.data(), out_h.data(), want.data(), rows, c.cols);
    } else {
      rt->launch(c.op, {out, in});
      reference::softmax(DType::f32, xh.data(), want.data(), rows, c.cols, std::string_view(c.op) == "log_softmax");
    }
    sync();
    test::expect_close(DType::f32, out.read(), want, backward ? "grad_x" : "out");
  }
}

// Vocabulary-wide rows at 512 rows (one block of up to 1,024 threads a row) through each compiler to a cubin:
// no stack. Held in registers up to 16 vectors a thread, rows of 100,000 to 131,072 16-bit or 65,536 f32
// columns spilled 80 to 720 bytes (MOJO_ROW_REGISTER_VECTORS says why they are read twice now); cached, ptxas
// squeezed some to 32 registers and 8 bytes of stack for two blocks an SM that the cache leaves no room for
// (their launch bounds now say one).
struct SoftmaxCompiles : ::testing::TestWithParam<std::string> {};

TEST_P(SoftmaxCompiles, VocabularyRowsDoNotSpill) {
  Runtime rt(memory_only(GetParam()));
  for (const char* op : {"softmax", "softmax_backward"})
    for (DType d : {DType::f32, DType::bf16})
      for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{512, 32768},
                                       {512, 65536},
                                       {512, 100000},
                                       {512, 131072},
                                       {512, 151936},
                                       {1, 151936},
                                       {2, 65536}}) {  // 1, 2: cooperative
        const TensorSpec x(d, {rows, cols});
        const std::vector<Tensor> t = std::string_view(op) == "softmax" ? std::vector<Tensor>{{x, 0}, {x, 0}}
                                                                        : std::vector<Tensor>{{x, 0}, {x, 0}, {x, 0}};
        const Artifact a = rt.compile(op, t, {}, Target::parse("sm_90a"), Emit::cubin);
        EXPECT_EQ(a.resources.stack_bytes, 0u) << op << " " << a.params.str();
      }
}

INSTANTIATE_TEST_SUITE_P(Compilers, SoftmaxCompiles, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });

INSTANTIATE_TEST_SUITE_P(Compilers, SoftmaxGpu, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
