// The main job: compile rms_norm for this machine's GPU (or sm_90 when there
// is none), show where the cache is and what it holds, then launch it — on
// the GPU, or where there is none on the CPU device (the same template built
// for the host and emulated: that build is what runs, and the output says so)
// — and check it against the CPU reference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "mojo/mojo.hpp"
#include "reference/reference.hpp"

int main() try {
  const std::int64_t rows = 64, hidden = 4096;
  const mojo::DType dtype = mojo::DType::bf16;
  const mojo::TensorSpec x_spec(dtype, {rows, hidden}), w_spec(dtype, {hidden});

  const bool gpu = mojo::device_available();
  mojo::RuntimeOptions options;
  if (!gpu && std::getenv("MOJO_JIT_DEVICE") == nullptr) options.device = "cpu";
  mojo::Runtime rt(options);
  const bool on_cpu = rt.device().is_cpu();
  const mojo::Target target = on_cpu ? mojo::Target::parse("sm_90") : rt.device().target();
  std::printf("device:  %s\n", rt.device().name().c_str());

  // 1. Compile (or find in the cache) the specialization, no GPU needed.
  mojo::Artifact a = rt.compile("rms_norm", {{x_spec}, {x_spec}, {w_spec}}, {}, target, mojo::Emit::cubin);
  std::printf("kernel:  %s for %s (%s, %zu bytes of cubin)%s\n", a.kernel_name.c_str(), target.sm_name().c_str(),
              a.compiled ? "compiled now" : "found in the cache", a.binary->size(),
              on_cpu ? ": what a GPU would run, not what the CPU device launches" : "");
  // The CPU device runs the same template built for the host, for the GPU it emulates: that build is launched below.
  if (on_cpu) {
    mojo::Artifact h =
        rt.compile("rms_norm", {{x_spec}, {x_spec}, {w_spec}}, {}, rt.device().target(), mojo::Emit::host);
    std::printf("kernel:  %s for %s (%s, %zu bytes of host shared object): what the launch below runs\n",
                h.kernel_name.c_str(), rt.device().name().c_str(), h.compiled ? "compiled now" : "found in the cache",
                h.binary->size());
  }

  // 2. The cache: where it is and what it holds.
  mojo::DiskCache cache(rt.cache_dir());
  auto entries = cache.list();
  std::printf("cache:   %s, %zu entries\n", cache.dir().c_str(), entries.size());
  for (const auto& e : entries)
    std::printf("  %s.%s  %llu bytes\n", e.key.hex().c_str(), std::string(e.kind.name()).c_str(),
                (unsigned long long)e.payload_bytes);

  // 3. Launch (on the GPU, or emulated on the CPU device) and compare with the CPU reference.
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> xf(static_cast<std::size_t>(rows * hidden)), wf(static_cast<std::size_t>(hidden));
  for (float& v : xf) v = dist(rng);
  for (float& v : wf) v = dist(rng);
  auto x_host = mojo::reference::encode(dtype, xf), w_host = mojo::reference::encode(dtype, wf);

  mojo::DeviceBuffer x(x_host.size()), w(w_host.size()), out(x_host.size());
  x.copy_from_host(x_host.data(), x_host.size());
  w.copy_from_host(w_host.data(), w_host.size());
  const std::uint64_t compiles = rt.stats().compiles;
  rt.launch("rms_norm", {out.as(x_spec), x.as(x_spec), w.as(w_spec)}, {{"eps", 1e-6f}});
  rt.device().synchronize();
  const bool launch_compiled = rt.stats().compiles > compiles;

  std::vector<std::uint8_t> got(x_host.size()), want(x_host.size());
  out.copy_to_host(got.data(), got.size());
  mojo::reference::rms_norm(dtype, x_host.data(), w_host.data(), want.data(), rows, hidden, 1e-6);
  double max_err = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < std::size_t(rows * hidden); ++i) {
    double g = mojo::reference::load(dtype, got.data(), i), r = mojo::reference::load(dtype, want.data(), i);
    double err = std::abs(g - r);
    max_err = std::max(max_err, err);
    if (!(err <= 1e-2 + 1e-2 * std::abs(r))) ++bad;  // bf16: one rounding of 2^-8 relative, plus slack
  }
  std::printf("launch:  %lldx%lld bf16 on %s (%s %s): max |device - reference| = %.3g, %zu elements off -> %s\n",
              (long long)rows, (long long)hidden, rt.device().name().c_str(), on_cpu ? "host build" : "cubin",
              launch_compiled ? "compiled now" : "found in the cache", max_err, bad, bad == 0 ? "PASS" : "FAIL");
  return bad == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "quickstart: error: %s\n", e.what());
  return 1;
}
