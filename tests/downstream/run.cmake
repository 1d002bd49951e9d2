# Installs the build into a scratch prefix, then configures, builds and runs
# tests/downstream against it with find_package(mojo_jit), runs the installed
# CLI, and builds and runs the same app with pkg-config.

# Runs COMMAND...; a failure stops the test, saying WHAT failed.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${what} failed: ${rc}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${MOJO_BUILD_DIR}" --prefix "${WORK_DIR}/prefix"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
step("configuring the downstream project" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build"
     "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
step("building the downstream project" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("the downstream app" "${WORK_DIR}/build/app")

# The installed CLI runs from its prefix (its run path finds the library beside it).
execute_process(COMMAND "${WORK_DIR}/prefix/bin/mojo-jit" --emit=ptx rms_norm --dtype f16 --shape x=2x64 --arch sm_80
                        --no-cache RESULT_VARIABLE rc OUTPUT_VARIABLE ptx ERROR_VARIABLE err)
if(rc OR NOT ptx MATCHES "\\.entry rms_norm_f16")
  message(FATAL_ERROR "the installed mojo-jit failed (${rc}): ${err}")
endif()

# The same app built with pkg-config instead of CMake.
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} "${WORK_DIR}/prefix/lib/pkgconfig")
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs mojo_jit RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc)
    message(FATAL_ERROR "pkg-config does not know mojo_jit: ${rc}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  step("building the downstream app with pkg-config" c++ "${SOURCE_DIR}/app.cpp" -o "${WORK_DIR}/app_pkgconfig" ${flags})
  step("the pkg-config-built downstream app" "${WORK_DIR}/app_pkgconfig")
endif()
