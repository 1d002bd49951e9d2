#!/usr/bin/env bash
# A build without the LLVM compiler (MOJO_JIT_WITH_LLVM=OFF: CI's TSan build, cmake --preset tsan), end to end
# through the CLI and the quickstart: what differs from the default build is only that `llvm` is not a compiler
# (src/compiler/compiler.cpp), and the default build's suite covers the rest of the same code. Usage: tests/nollvm_smoke.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
cli="$build/tools/mojo-jit"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MOJO_JIT_CACHE_DIR="$work/cache"
step() { echo "== nollvm: $*"; }
# Runs a command and requires `pattern` in its output (read whole: a grep -q on a pipe would cut it short).
expect() {
  local pattern=$1 out
  shift
  out=$("$@" 2>&1) || { echo "failed: $*"$'\n'"$out" >&2; exit 1; }
  grep -q -- "$pattern" <<<"$out" || { echo "no '$pattern' in the output of: $*"$'\n'"$out" >&2; exit 1; }
  tail -1 <<<"$out"
}

step "the LLVM compiler is refused with a clear error"
if out=$("$cli" --emit=ptx --compiler=llvm rms_norm --dtype bf16 --shape x=4x64 --arch sm_90a 2>&1); then
  echo "expected --compiler=llvm to fail in a build without LLVM; got: $out" >&2
  exit 1
fi
grep -q "MOJO_JIT_WITH_LLVM=OFF" <<<"$out" || { echo "unexpected error: $out" >&2; exit 1; }

step "NVRTC: PTX, cubin, and a bundle of several ops in one module"
expect "\.entry" "$cli" --emit=ptx rms_norm --dtype bf16 --shape x=32x4096 --arch sm_90a
"$cli" --emit=cubin linear --dtype bf16 --shape x=16x256 --shape weight=512x256 --arch sm_90a -o "$work/linear.cubin"
test -s "$work/linear.cubin"
expect kernels "$cli" compile-all --ops rms_norm,linear,sdpa,sample --arch sm_90a -j 2 -o "$work/bundle.bin"
test -s "$work/bundle.bin"

step "a prewarm, then the same prewarm compiles nothing"
expect " 0 failed" "$cli" prewarm --ops rms_norm,softmax,linear --arch sm_80,sm_90a -j 2
expect " 0 compiled" "$cli" prewarm --ops rms_norm,softmax,linear --arch sm_80,sm_90a -j 2

step "the CPU device against the references"
expect PASS "$cli" run rms_norm --dtype bf16 --shape x=17x896 --device cpu
expect PASS "$cli" run linear --dtype f16 --shape x=17x72 --shape weight=40x72 --device cpu
expect PASS env MOJO_JIT_DEVICE=cpu "$build/examples/quickstart"
echo "== nollvm: passed"
