#include <gtest/gtest.h>

#include "mojo/cache.hpp"
#include "mojo/runtime.hpp"
#include "test_util.hpp"

using namespace mojo;

namespace {
KeyInputs base() {
  return KeyInputs{"__global__ void k() {}", "k", "dtype=bf16 hidden=4096", "sm_90", "nvrtc-13.0 --minimal",
                   Emit::cubin};
}
}  // namespace

TEST(KernelKey, SameInputsSameKey) {
  EXPECT_EQ(compute_key(base()), compute_key(base()));
  EXPECT_EQ(compute_key(base()).hex().size(), 32u);
}

TEST(KernelKey, EveryComponentChangesTheKey) {
  const KernelKey k = compute_key(base());
  KeyInputs in = base();
  in.source = "__global__ void k() { }";
  EXPECT_NE(compute_key(in), k) << "source";
  in = base(), in.kernels = "k2";
  EXPECT_NE(compute_key(in), k) << "kernel names";
  in = base(), in.params = "dtype=bf16 hidden=4097";
  EXPECT_NE(compute_key(in), k) << "params";
  in = base(), in.target = "sm_90a";
  EXPECT_NE(compute_key(in), k) << "target";
  in = base(), in.compiler = "nvrtc-13.1 --minimal";
  EXPECT_NE(compute_key(in), k) << "compiler";
  in = base(), in.kind = Emit::ptx;
  EXPECT_NE(compute_key(in), k) << "stage";
  in = base(), in.kind = EntryKind::tuning();
  EXPECT_NE(compute_key(in), k) << "entry kind";
}

TEST(KernelKey, FieldsCannotBleedIntoEachOther) {
  KeyInputs a = base(), b = base();
  a.kernels = "ab", a.params = "c";
  b.kernels = "a", b.params = "bc";
  EXPECT_NE(compute_key(a), compute_key(b));
}

TEST(KernelKey, HexRoundTrips) {
  KernelKey k = compute_key(base());
  EXPECT_EQ(KernelKey::from_hex(k.hex()), k);
  EXPECT_FALSE(KernelKey::from_hex("xyz").has_value());
  EXPECT_FALSE(KernelKey::from_hex(std::string(32, 'G')).has_value());
}

TEST(KernelKey, SpecializationKeyIsStableAcrossProcesses) {
  test::TempDir dir;
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  TensorSpec x(DType::bf16, {4096, 4096}), w(DType::bf16, {4096});
  KernelKey here = rt.key("rms_norm", {{x}, {x}, {w}}, {}, Target::parse("sm_90"), Emit::cubin);
  for (int i = 0; i < 2; ++i) {
    auto r = test::run_command(std::string(MOJO_TEST_CLI) + " describe rms_norm --dtype bf16 --shape x=4096x4096 " +
                               "--arch sm_90 --cache-dir " + dir.str());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("key:      " + here.hex()), std::string::npos) << r.output;
  }
}

TEST(KernelKey, DependsOnTheTemplateSourceNotItsLocation) {
  test::TempDir a, b;
  TensorSpec x(DType::f32, {8, 64}), w(DType::f32, {64});
  auto key_with = [&](const std::filesystem::path& dir, const std::string& extra) {
    std::filesystem::copy(MOJO_TEST_TEMPLATE_DIR + "/rms_norm.cu", dir / "rms_norm.cu",
                          std::filesystem::copy_options::overwrite_existing);
    if (!extra.empty()) test::write_file(dir / "rms_norm.cu", test::read_file(dir / "rms_norm.cu") + extra);
    RuntimeOptions o;
    o.disk_cache = false;
    o.template_paths = {dir};
    return Runtime(o).key("rms_norm", {{x}, {x}, {w}}, {}, Target::parse("sm_80"), Emit::ptx);
  };
  EXPECT_EQ(key_with(a.path(), ""), key_with(b.path(), "")) << "same text in two directories";
  EXPECT_NE(key_with(a.path(), ""), key_with(a.path(), "\n// edited\n")) << "an edit must change the key";
}
