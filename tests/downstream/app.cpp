// Compiles rms_norm for sm_80 to PTX through the installed library.
#include <cstdio>
#include <mojo/mojo.hpp>

int main() {
  mojo::RuntimeOptions options;
  options.disk_cache = false;
  mojo::Runtime rt(options);
  mojo::TensorSpec x(mojo::DType::f16, {2, 64}), w(mojo::DType::f16, {64});
  mojo::Artifact a = rt.compile("rms_norm", {{x}, {x}, {w}}, {}, mojo::Target::parse("sm_80"), mojo::Emit::ptx);
  bool ok = a.binary->find(".entry " + a.kernel_name) != std::string::npos;
  std::printf("downstream: %s %s\n", a.kernel_name.c_str(), ok ? "OK" : "MISSING");
  return ok ? 0 : 1;
}
