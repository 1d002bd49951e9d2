// Any text as a prewarm manifest: parse() and items() either succeed or throw
// mojo::Error with a message; nothing else (no crash, no other exception).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mojo/error.hpp"
#include "mojo/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    mojo::Manifest m = mojo::Manifest::parse(text, "fuzz.toml");
    std::size_t n = 0;
    for (const auto& k : m.kernels) {
      std::size_t shapes = 1;
      for (const auto& s : k.shapes)
        for (const auto& [name, dims] : s)
          for (const auto& d : dims) shapes *= d.size();
      n += shapes * k.dtypes.size();
    }
    if (n < 4096) m.items({mojo::Target::parse("sm_90")});  // bounded: buckets multiply
  } catch (const mojo::Error&) {
  }
  return 0;
}
