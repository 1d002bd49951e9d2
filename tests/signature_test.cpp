// Every kernel's parameter list as the compilers wrote it into PTX against
// what its op packs (KernelArgs): the count, each size, and the alignment of
// the by-value structs (the TMA descriptors: 128 bytes aligned to 64, at the
// positions the kernel reads them from). Every op x dtype at its example
// shapes, for sm_80 and sm_90a, with each compiler; no GPU needed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <regex>

#include "mojo/manifest.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;

namespace {

struct PtxParam {
  std::size_t size, alignment;  // alignment: 0 where PTX states none (scalars are naturally aligned)
};

// The parameters of `.entry NAME(...)` in `ptx`, in order.
std::vector<PtxParam> entry_params(const std::string& ptx, const std::string& name) {
  const std::size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string::npos) return {};
  const std::string list = ptx.substr(at, ptx.find(')', at) - at);
  static const std::regex param(R"(\.param\s+([^,\n]*))");
  static const std::regex array(R"(\.align\s+(\d+)\s+\.b8\s+\S+\[(\d+)\])");
  static const std::regex scalar(R"(\.[usbf](8|16|32|64)\b)");
  std::vector<PtxParam> out;
  for (auto it = std::sregex_iterator(list.begin(), list.end(), param); it != std::sregex_iterator(); ++it) {
    const std::string text = (*it)[1];
    std::smatch m;
    if (std::regex_search(text, m, array)) out.push_back({std::stoul(m[2]), std::stoul(m[1])});
    else if (std::regex_search(text, m, scalar)) out.push_back({std::stoul(m[1]) / 8, 0});
    else ADD_FAILURE() << name << ": cannot read the parameter '" << text << "'";
  }
  return out;
}

struct Signatures : ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Signatures, EveryKernelTakesWhatItsOpPacks) {
  test::TempDir cache;
  RuntimeOptions o;
  o.cache_dir = cache.path();
  o.compiler = GetParam();
  Runtime rt(o);
  std::size_t checked = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Target target = Target::parse(arch);
    // The sm_90a gemm packs TMA descriptors: the CPU device encodes them without a driver.
    const Device cpu = Device::cpu(target);
    const std::vector<PrewarmItem> items = Manifest::examples().items({target});
    const std::vector<Bundle> bundles = rt.compile_all(items, Emit::ptx);
    ASSERT_EQ(bundles.size(), 1u);
    const std::string& ptx = *bundles[0].binary;
    for (const PrewarmItem& item : items) {
      SCOPED_TRACE(item.label);
      const OpDef& op = find_op(item.op);
      std::vector<Tensor> tensors = item.tensors;
      for (std::size_t i = 0; i < tensors.size(); ++i)
        if (tensors[i].spec.rank() != 0) tensors[i].data = DevicePtr(i + 1) << 20;  // distinct, aligned, never read
      const std::vector<ScalarArg> scalars = item.scalar_args();
      const Params params = op.specialize(tensors, scalars, target);
      const Workspace workspace{.scratch = op.workspace_bytes(params, tensors) ? DevicePtr(1) << 30 : 0,
                                .sync = op.sync_words(params, tensors) ? DevicePtr(1) << 31 : 0};
      for (const Params& step : op.plan(params)) {  // every kernel of the op's plan
        KernelArgs args;
        op.pack_args(step, tensors, scalars, workspace, args);
        const std::string name = op.kernel_name(step);
        const std::vector<PtxParam> want = entry_params(ptx, name);
        ASSERT_FALSE(want.empty()) << "no .entry " << name << " in the bundle's PTX";
        ASSERT_EQ(std::size_t(args.count()), want.size()) << name << ": packed arguments vs kernel parameters";
        for (std::size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(args.size(int(i)), want[i].size) << name << " parameter " << i << " (size)";
          if (want[i].alignment != 0)
            EXPECT_EQ(args.alignment(int(i)), want[i].alignment) << name << " parameter " << i;
        }
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 2 * all_ops().size()) << "every op, for both targets";
}

INSTANTIATE_TEST_SUITE_P(Compilers, Signatures, ::testing::ValuesIn(test::compilers()),
                         [](const auto& info) { return test::compiler_test_name(info.param); });
