#!/usr/bin/env bash
# Verifies the whole library on a machine with a GPU, in one command:
#   1. every test (the GPU ones included) -> OUT/tests.txt, OUT/tests.xml, and the
#      conformance of the CPU device's emulation with the GPU -> OUT/conformance.txt
#   2. the GPU tests under compute-sanitizer memcheck -> OUT/memcheck.txt, one
#      shape per gemm path under racecheck -> OUT/racecheck.txt, and the SASS of
#      both gemm paths (HMMA / HGMMA, no local memory) -> OUT/sass.txt
#   3. the benchmark -> OUT/bench.md (and its op table as OUT/ops.json)
#   4. PyTorch eager and torch.compile on the same ops, when torch is there -> OUT/torch.md
# Exits non-zero if any step failed. Run it from the repository root after
# `bash tools/setup.sh` (or, on the lent GPU machine, `bash .gpu/run bash tools/gpu_check.sh $OUT`).
set -uo pipefail
out=${1:?usage: tools/gpu_check.sh OUT_DIR [BUILD_DIR]}
build=${2:-build}
mkdir -p "$out"
export MOJO_JIT_CACHE_DIR=${MOJO_JIT_CACHE_DIR:-$(mktemp -d)}
failed=()

nvidia-smi -L >"$out/device.txt" 2>&1 || true
echo "== tests"
"$build/tests/mojo_tests" --gtest_output="xml:$out/tests.xml" >"$out/tests.txt" 2>&1 || failed+=(tests)
tail -n 3 "$out/tests.txt"

echo "== the CPU device's emulation of each prelude primitive against the GPU"
"$build/tests/mojo_tests" --gtest_filter='Conformance.*' >"$out/conformance.txt" 2>&1 || failed+=(conformance)
grep -E "^\[ *(OK|FAILED|SKIPPED) *\]" "$out/conformance.txt"

echo "== compute-sanitizer memcheck on the GPU tests"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/mojo_tests" --gtest_filter='*Gpu*' \
    >"$out/memcheck.txt" 2>&1 || failed+=(memcheck)
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.txt" | tail -n 3
else
  echo "compute-sanitizer not found" | tee "$out/memcheck.txt"
  failed+=(memcheck)
fi

echo "== compute-sanitizer racecheck on one shape per gemm path and the attention kernels"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool racecheck --error-exitcode 1 "$build/tests/mojo_tests" \
    --gtest_filter='*GpuGemm.HopperPathOneShape/Nvrtc:*GpuGemm.LinearResidualMayBeTheOutputItself/Nvrtc:*AttentionGpu.HopperPrefillMatchesTheReference/Nvrtc:*AttentionGpu.PagedDecodeSplitsTheKeysAndMerges/Nvrtc' \
    >"$out/racecheck.txt" 2>&1 || failed+=(racecheck)
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$out/racecheck.txt" | tail -n 3
fi

echo "== SASS of both gemm paths (tensor-core instructions, no local memory)"
cli="$build/tools/mojo-jit"
if command -v cuobjdump >/dev/null; then
  sass_check() {  # NAME INSTRUCTION ARGS...
    local name=$1 instruction=$2
    shift 2
    "$cli" --emit=cubin "$@" -o "$out/$name.cubin" && cuobjdump --dump-sass "$out/$name.cubin" >"$out/$name.sass" ||
      { failed+=(sass); return; }
    local count local_ops
    count=$(grep -c "$instruction" "$out/$name.sass" || true)
    local_ops=$(grep -cE "\b(LDL|STL)\b" "$out/$name.sass" || true)
    echo "$name: $count $instruction, $local_ops local loads/stores" | tee -a "$out/sass.txt"
    { [ "$count" -gt 0 ] && [ "$local_ops" -eq 0 ]; } || failed+=(sass)
  }
  : >"$out/sass.txt"
  sass_check gemm_sm80 HMMA gemm --dtype bf16 --shape a=4096x4096 --shape b=4096x4096 --arch sm_80
  sass_check linear_sm90a HGMMA linear --dtype bf16 --shape x=4096x4096 --shape weight=4096x4096 --arch sm_90a
else
  echo "cuobjdump not found" | tee "$out/sass.txt"
fi

echo "== benchmark"
"$build/tools/mojo-bench" --json "$out/ops.json" >"$out/bench.md" 2>&1 || failed+=(bench)
cat "$out/bench.md"

echo "== PyTorch on the same ops"
if [ -f "$out/ops.json" ] && python3 -c "import torch" 2>/dev/null; then
  python3 "$(dirname "$0")/bench/torch_compare.py" "$out/ops.json" >"$out/torch.md" 2>"$out/torch.log" || failed+=(torch)
  cat "$out/torch.md"
else
  echo "skipped: no ops.json or no PyTorch" | tee "$out/torch.md"
fi

if ((${#failed[@]})); then
  echo "gpu_check: FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu_check: all passed"
