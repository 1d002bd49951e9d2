#!/usr/bin/env bash
# The Python package with its two modules (mojo_jit._C, mojo_jit._check) built for THIS machine's python3,
# against a build's shared libraries. For a machine whose Python is not the build machine's: the lent GPU
# machine runs Python 3.12, the build machine Debian's 3.11, and a module built for one does not import in
# the other. Needs a C++20 compiler, Python.h and nanobind (pip) for that python3, and the headers of fmt and
# nlohmann/json (tools/gpu_pack.sh carries them as .gpu/headers.tar.xz for a machine without them).
#
#   tools/python_modules.sh [BUILD_DIR] [OUT_DIR]     # default build, BUILD_DIR/python-here
#   PYTHONPATH=OUT_DIR python3 -c "import mojo_jit"
#
# On the lent machine the build's libraries come from .gpu: run it as `bash .gpu/run bash tools/python_modules.sh`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=$(realpath "${1:-build}")
out=${2:-$build/python-here}
py=${PYTHON:-python3}
cxx=${CXX:-c++}

fail() { echo "python_modules: $*" >&2; exit 1; }
nanobind=$("$py" -c "import nanobind, os; print(os.path.dirname(nanobind.__file__))" 2>/dev/null) ||
  fail "no nanobind for $("$py" --version 2>&1) (pip install nanobind)"
python_include=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
[ -f "$python_include/Python.h" ] || fail "no Python.h in $python_include (the python3 development headers)"
suffix=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
version=$(sed -n 's/^project(mojo_jit VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)  # as python/CMakeLists.txt gives it
# By their SONAMEs, which the lent machine's unpacked build has too (tools/gpu_pack.sh).
for lib in libmojo_jit.so.0 libmojo_jit_check.so.0; do
  [ -e "$build/$lib" ] || fail "no $build/$lib: build the project first"
done

rm -rf "$out/mojo_jit" "$out/obj" "$out/include"
mkdir -p "$out/obj"
cp -r python/mojo_jit "$out/mojo_jit"
rm -f "$out"/mojo_jit/*.so
includes=(-Iinclude -Itools/mojo-jit)
if [ -f .gpu/headers.tar.xz ]; then  # the build machine's fmt and nlohmann/json, the versions the build used
  mkdir -p "$out/include"
  tar -C "$out/include" -xJf .gpu/headers.tar.xz
  includes+=(-I"$out/include")
fi
# fmt header-only: the module formats its own messages and does not link the build machine's libfmt.
common=(-std=c++20 -O2 -fPIC -DNDEBUG -DFMT_HEADER_ONLY "${includes[@]}")
nb_flags=(-I"$python_include" -I"$nanobind/include" -isystem "$nanobind/ext/robin_map/include" -fvisibility=hidden)

# nanobind itself and the inspect library, once; then each module. In parallel: the machine has cores.
"$cxx" "${common[@]}" "${nb_flags[@]}" -DNB_BUILD -DNB_COMPACT_ASSERTIONS -fno-strict-aliasing \
  -c "$nanobind/src/nb_combined.cpp" -o "$out/obj/nanobind.o" &
"$cxx" "${common[@]}" -c tools/mojo-jit/inspect.cpp -o "$out/obj/inspect.o" &
# mojo_jit._C's sources: python/CMakeLists.txt's list (src/: the launch sink the overhead benchmark uses).
c_sources=(module arrays runtime eager)
for source in "${c_sources[@]}"; do
  "$cxx" "${common[@]}" "${nb_flags[@]}" -Isrc -DMOJO_JIT_VERSION="\"$version\"" \
    -c "python/src/$source.cpp" -o "$out/obj/$source.o" &
done
"$cxx" "${common[@]}" "${nb_flags[@]}" -c python/src/check_module.cpp -o "$out/obj/check_module.o" &
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
((status == 0)) || fail "a compile failed (above)"

link=(-shared -Wl,--gc-sections -Wl,-rpath,"$build")
c_objects=("${c_sources[@]/#/$out/obj/}")
"$cxx" "${link[@]}" "${c_objects[@]/%/.o}" "$out/obj/inspect.o" "$out/obj/nanobind.o" "$build/libmojo_jit.so.0" \
  -o "$out/mojo_jit/_C$suffix"
"$cxx" "${link[@]}" "$out/obj/check_module.o" "$out/obj/inspect.o" "$out/obj/nanobind.o" \
  "$build/libmojo_jit_check.so.0" "$build/libmojo_jit.so.0" -o "$out/mojo_jit/_check$suffix"
rm -rf "$out/obj" "$out/include"
PYTHONPATH=$out "$py" -c "import mojo_jit, mojo_jit._check" || fail "the modules built but do not import"
echo "python_modules: $out/mojo_jit for $("$py" --version 2>&1) (PYTHONPATH=$out)"
