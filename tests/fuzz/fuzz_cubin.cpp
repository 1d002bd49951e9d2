// libFuzzer target: kernel_resources on arbitrary bytes (a cubin from a
// cache entry or a file is untrusted). It must return or throw
// InvalidArgumentError, never read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mojo/compiler.hpp"
#include "mojo/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)mojo::kernel_resources(bytes, "rms_norm_bf16_hidden_4096_vec_8_threads_256_rows_1");
  } catch (const mojo::InvalidArgumentError&) {
  }
  return 0;
}
