# Extracts README's "C++ API in 20 lines", the ```cpp block right after the line <!-- api-example -->, into
# OUT, a program that runs it as written: the block's leading #include lines at the top, the rest as the body of
# a function that is given `tokens` (the one name the block leaves to its context), called by a main() that picks
# the device the block's `mojo::Runtime rt;` takes (MOJO_JIT_DEVICE as given, else MOJO_JIT_TEST_DEVICE, else the
# GPU if there is one, else the CPU device) and exits 1 on any exception. #line directives point compile errors
# at README.md's own lines. tests/CMakeLists.txt runs this at build time, builds OUT and runs it (Readme.api_example).
#   cmake -DREADME=README.md -DOUT=readme_api_example.cpp -P tests/readme_example.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT README OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DREADME=README.md -DOUT=FILE.cpp -P readme_example.cmake")
endif()
file(READ "${README}" text)
set(marker "<!-- api-example -->")
string(FIND "${text}" "${marker}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no '${marker}' line (it marks the API example's ```cpp block for the test)")
endif()
string(LENGTH "${marker}" marker_length)
math(EXPR after_marker "${at} + ${marker_length}")
string(SUBSTRING "${text}" ${after_marker} -1 rest)
set(fence "```cpp\n")
string(FIND "${rest}" "${fence}" open)
if(open EQUAL -1)
  message(FATAL_ERROR "${README}: no ```cpp block after '${marker}'")
endif()
string(SUBSTRING "${rest}" 0 ${open} between)
string(STRIP "${between}" between)
if(NOT between STREQUAL "")
  message(FATAL_ERROR "${README}: '${marker}' must come right before the ```cpp block it marks")
endif()
string(LENGTH "${fence}" fence_length)
math(EXPR start "${after_marker} + ${open} + ${fence_length}")
string(SUBSTRING "${text}" ${start} -1 rest)
string(FIND "${rest}" "\n```" close)
if(close EQUAL -1)
  message(FATAL_ERROR "${README}: the ```cpp block after '${marker}' is not closed")
endif()
math(EXPR close "${close} + 1")  # with its last line's newline
string(SUBSTRING "${rest}" 0 ${close} block)

# The number of newlines in `str`, in `var`.
function(count_lines str var)
  string(REGEX MATCHALL "\n" newlines "${str}")
  list(LENGTH newlines n)
  set(${var} ${n} PARENT_SCOPE)
endfunction()

# README's line of the block's first line.
string(SUBSTRING "${text}" 0 ${start} before)
count_lines("${before}" n)
math(EXPR block_line "${n} + 1")
# The leading preprocessor and blank lines go to the top of the file; the rest is the function's body.
string(REGEX MATCH "^([ \t]*(#[^\n]*)?\n)*" head "${block}")
string(LENGTH "${head}" head_length)
string(SUBSTRING "${block}" ${head_length} -1 body)
count_lines("${head}" n)
math(EXPR body_line "${block_line} + ${n}")
if(body STREQUAL "")
  message(FATAL_ERROR "${README}: the ```cpp block after '${marker}' has no code")
endif()

# A #line directive that hands the lines after it back to OUT itself (`so_far`: the file up to the directive).
function(line_of_out so_far var)
  count_lines("${so_far}" n)
  math(EXPR next "${n} + 2")  # the directive is line n + 1; the line after it, n + 2
  set(${var} "#line ${next} \"${OUT}\"\n" PARENT_SCOPE)
endfunction()

set(out "// Generated from ${README} (the ```cpp block after ${marker}) by tests/readme_example.cmake: edit README.md.
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>

#line ${block_line} \"${README}\"
${head}")
line_of_out("${out}" directive)
string(APPEND out "${directive}"
"namespace {
void readme_api_example(std::int64_t tokens);
}  // namespace

int main() try {
  // The device of the block's Runtime: MOJO_JIT_DEVICE as given, else where the GPU tests run
  // (MOJO_JIT_TEST_DEVICE), else the GPU if there is one, else the CPU device.
  const char* device = std::getenv(\"MOJO_JIT_DEVICE\");
  if (device == nullptr || *device == '\\0') {
    const char* test_device = std::getenv(\"MOJO_JIT_TEST_DEVICE\");
    ::setenv(\"MOJO_JIT_DEVICE\",
             test_device != nullptr && *test_device != '\\0' ? test_device
             : mojo::device_available()                     ? \"cuda\"
                                                            : \"cpu\",
             1);
  }
  std::printf(\"README example on MOJO_JIT_DEVICE=%s\\n\", std::getenv(\"MOJO_JIT_DEVICE\"));
  readme_api_example(16);
  std::printf(\"README example: PASS\\n\");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, \"README example: error: %s\\n\", e.what());
  return 1;
}

namespace {
// README's block, as written.
void readme_api_example(std::int64_t tokens) {
#line ${body_line} \"${README}\"
${body}")
line_of_out("${out}" directive)
string(APPEND out "${directive}" "}
}  // namespace
")
file(WRITE "${OUT}" "${out}")
