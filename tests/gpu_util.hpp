// Helpers for the GPU tests: a Runtime on the GPU, or on the CPU device where
// there is none (the same kernels, emulated), device tensors with poisoned
// guard bytes, random inputs that are never zero, and the comparison against
// a CPU reference with per-dtype tolerances.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mojo/check.hpp"
#include "mojo/device.hpp"
#include "reference/reference.hpp"
#include "mojo/runtime.hpp"
#include "ops/indices.hpp"
#include "test_util.hpp"

namespace mojo::test {

// Random values in ±[lo, hi]: never zero, so a kernel that writes zeros fails.
inline std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo = 0.05f, float hi = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = sign(rng) ? mag(rng) : -mag(rng);
  return v;
}

// Where the GPU tests run: the GPU when this machine has one, else the CPU
// device emulating sm_80; MOJO_JIT_TEST_DEVICE (cuda, cpu, cpu:sm_90a) chooses.
inline std::string test_device() {
  if (const char* v = std::getenv("MOJO_JIT_TEST_DEVICE"); v != nullptr && *v != '\0') return v;
  return device_available() ? "cuda" : "cpu";
}
inline bool on_cpu_device() { return test_device().starts_with("cpu"); }

// A Runtime with a private cache on test_device(), compiling with compiler().
// On the CPU device every kernel is built by the host compiler whatever the
// Runtime's compiler, so only the NVRTC instance of a test runs there.
class GpuTest : public ::testing::Test {
 protected:
  virtual std::string compiler() const { return "nvrtc"; }
  // The options of `rt`: for a second Runtime on the same cache (e.g. with debug checks).
  RuntimeOptions options() const {
    RuntimeOptions o;
    o.cache_dir = cache.path();
    o.compiler = compiler();
    o.device = test_device();
    return o;
  }
  void SetUp() override {
    if (!on_cpu_device() && !device_available()) GTEST_SKIP() << "no GPU or no CUDA driver on this machine";
    if (on_cpu_device() && compiler() != "nvrtc")
      GTEST_SKIP() << "the cpu device builds kernels with the host compiler; the Nvrtc instance runs this test";
    rt = std::make_unique<Runtime>(options());
    rt->device();
  }
  // What launches on rt's device load: cubin, or the cpu device's host library.
  Emit launch_emit() const { return rt->device().is_cpu() ? Emit::host : Emit::cubin; }
  // A Runtime that takes the sm_90a paths (wgmma, TMA): rt on a Hopper GPU, the CPU device emulating sm_90a
  // where there is no GPU; null on other GPUs.
  Runtime* hopper() {
    if (!rt->device().is_cpu()) return rt->device().target() == Target::parse("sm_90a") ? rt.get() : nullptr;
    if (!hopper_rt) {
      RuntimeOptions o = options();
      o.device = "cpu:sm_90a";
      hopper_rt = std::make_unique<Runtime>(o);
    }
    return hopper_rt.get();
  }
  TempDir cache;
  std::unique_ptr<Runtime> rt, hopper_rt;
};

// A contiguous tensor on the device followed by kGuard poisoned bytes. An
// output starts all 0xff (NaN in every float type: an element the kernel does
// not write cannot pass); an input starts with the given host bytes.
class GpuTensor {
 public:
  static constexpr std::size_t kGuard = 256;
  explicit GpuTensor(TensorSpec spec) : spec_(spec), buffer_(spec.nbytes() + kGuard) { buffer_.fill_bytes(0xff); }
  GpuTensor(TensorSpec spec, const std::vector<std::uint8_t>& host) : GpuTensor(spec) {
    EXPECT_EQ(host.size(), spec.nbytes());
    buffer_.copy_from_host(host.data(), std::min(host.size(), spec.nbytes()));
  }
  Tensor tensor() const { return buffer_.as(spec_); }
  void poison() { buffer_.fill_bytes(0xff); }
  operator Tensor() const { return tensor(); }
  // The tensor's bytes; a failure if anything was written past its end.
  std::vector<std::uint8_t> read() const {
    std::vector<std::uint8_t> all(buffer_.size());
    buffer_.copy_to_host(all.data(), all.size());
    for (std::size_t i = spec_.nbytes(); i < all.size(); ++i)
      if (all[i] != 0xff) {
        ADD_FAILURE() << "wrote past the end of a " << spec_.str() << " tensor, at byte " << i;
        break;
      }
    all.resize(spec_.nbytes());
    return all;
  }

 private:
  TensorSpec spec_;
  DeviceBuffer buffer_;
};

// The tolerances of mojo/check.hpp (default_tolerance) and the comparison of mojo/check.hpp.
using mojo::Tolerance;
inline Tolerance tolerance(DType d) { return default_tolerance(d); }
using mojo::mismatches;

inline void expect_close(DType dtype, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                         const std::string& what, Tolerance tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::vector<std::string> report;
  const std::size_t bad = mismatches(dtype, got, want, tol, &report);
  for (const std::string& line : report) ADD_FAILURE() << what << " " << line;
  EXPECT_EQ(bad, 0u) << what << ": elements outside tolerance (rtol " << tol.rtol << ", atol " << tol.atol
                     << " x max|reference|)";
}
inline void expect_close(DType dtype, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                         const std::string& what) {
  expect_close(dtype, got, want, what, tolerance(dtype));
}

// Host bytes of i32 or i64 indices.
inline std::vector<std::uint8_t> index_bytes(DType dtype, const std::vector<std::int64_t>& values) {
  return indices::encode(dtype, values);
}

}  // namespace mojo::test
