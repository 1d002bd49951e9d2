#!/usr/bin/env bash
# Verifies the whole library on a machine with a GPU, step by step, within a time budget:
#
#   tools/gpu_check.sh OUT_DIR [STEP...]        (no STEP: all of them, in this order)
#
#   tests        every test, in gtest shards run at once (one per core)   -> OUT/tests-*.txt|xml
#   pdl          the GPU tests and CheckOp again, every launch with programmatic dependent launch
#                (MOJO_JIT_PDL=1: each kernel may start while the one before it finishes) -> OUT/pdl-*.txt
#   conformance  the CPU device's emulation of each prelude primitive vs the GPU -> OUT/conformance.txt
#   example      the Qwen3-8B decoder layer at full size, checked step by step -> OUT/example.txt
#   sass         both gemm paths' SASS: HMMA / HGMMA, no local memory    -> OUT/sass.txt
#   memcheck synccheck initcheck   the GPU tests and CheckOp under compute-sanitizer, sharded -> OUT/<tool>-*.txt
#   racecheck    one test per kernel family under compute-sanitizer racecheck (slow: shared memory)
#   bench        mojo-bench, every table                                   -> OUT/bench.md, OUT/ops.json
#   compile      mojo-bench's compile tables alone (cold compiles, each stage's share) -> OUT/compile.md
#   cases:NAME   tools/bench/cases/NAME.txt, ours against PyTorch eager (vs_torch.sh) -> OUT/cases-NAME.md
#   cases-pdl:NAME  the same with MOJO_JIT_PDL=1                           -> OUT/cases-NAME-pdl.md
#   profile:NAME Nsight Compute's sections of each kernel of one launch of every case of
#                tools/bench/cases/NAME.txt (bench/profile.sh; `profile:profile`: the slowest) -> OUT/profile-NAME.txt
#   torch        PyTorch eager and torch.compile on the benchmarked ops    -> OUT/torch.md
#   python       the Python package's tests on the GPU, and its per-call overhead -> OUT/python.txt
#
# Each step runs under `timeout` with what is left of the budget (GPU_CHECK_BUDGET seconds, default 560:
# the lent machine's commands stop at 600), so a hung kernel costs one step, not the run; a hung shard's
# last "[ RUN ]" line names the test. OUT/summary.md gets a line per step as it ends. Exits non-zero if
# any step failed. Environment: GPU_CHECK_BUILD (default build), GPU_CHECK_JOBS (default: cores), GPU_CHECK_TAR
# (a .tgz to pack OUT_DIR into at the end),
# the torch step's GPU_CHECK_OPS_JSON (default OUT/ops.json, from the bench step) and GPU_CHECK_TORCH_ROWS
# (a slice of its rows, e.g. 0:45; default all ~90, each compiled anew by torch.compile).
# On the lent GPU machine (see ../shared/gpu/README.md): 15 minutes of device time a session, starts
# included, at most 10 a command, and at most 8 files back from $OUT. `bash tools/gpu_pack.sh` here, then
# carry .gpu, write OUT_DIR outside $OUT and have it packed into one file (GPU_CHECK_TAR), most needed
# first; on 2026-11-27 one H200 call ran `tests sass` (154 s on 16 cores) and both vs_torch case files.
# Since 2026-11-28 NVRTC runs with --no-cache: kernels the tests compiled before, in other Runtimes, came
# from the CUDA driver's cache then and are compiled now, so `tests` may take longer (not yet measured).
# The machine's start takes minutes of the 15, so one full call, then a second only if the machine is still
# warm and `status` leaves it time, in the order of docs/benchmarks.md's "Measuring again":
#   GPU_CHECK_BUDGET=540 GPU_CHECK_TAR=$OUT/check.tgz bash .gpu/run bash tools/gpu_check.sh /tmp/check \
#     tests cases:issue27 cases:issue28 sass
#   GPU_CHECK_BUDGET=<what is left, less a minute> GPU_CHECK_TAR=$OUT/check2.tgz bash .gpu/run \
#     bash tools/gpu_check.sh /tmp/check2 profile:profile cases:pdl cases-pdl:pdl pdl compile
# Then, in a later session's machine: memcheck racecheck synccheck initcheck; bench (its ops.json, copied into
# the working tree, feeds GPU_CHECK_OPS_JSON=ops.json GPU_CHECK_TORCH_ROWS=0:45 ... torch in a later call).
set -uo pipefail
out=${1:?usage: tools/gpu_check.sh OUT_DIR [tests pdl conformance example sass memcheck racecheck synccheck initcheck bench torch python compile cases:NAME cases-pdl:NAME profile:NAME]}
shift
steps=("$@")
((${#steps[@]})) || steps=(tests pdl conformance example sass memcheck racecheck synccheck initcheck bench torch python)
build=${GPU_CHECK_BUILD:-build}
export PATH=$PATH:${CUDA_HOME:-/usr/local/cuda}/bin  # cuobjdump, compute-sanitizer
jobs=${GPU_CHECK_JOBS:-$(nproc)}
deadline=$((SECONDS + ${GPU_CHECK_BUDGET:-560}))
tests="$build/tests/mojo_tests"
mkdir -p "$out"
# One fresh cache for what uses the default one (the CLI, the bench, the example); each GPU test has its own.
if [ -z "${MOJO_JIT_CACHE_DIR:-}" ]; then
  MOJO_JIT_CACHE_DIR=$(mktemp -d)
  trap 'rm -rf "$MOJO_JIT_CACHE_DIR"' EXIT
  export MOJO_JIT_CACHE_DIR
fi
failed=()
# The toolkit's libraries (NVRTC) for the compiler plugins, wherever this machine keeps them.
for d in "${CUDA_HOME:-/usr/local/cuda}"/{lib64,lib,targets/x86_64-linux/lib}; do
  [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH
# What this machine has, and what the build cannot find on it: read this first when everything fails.
{
  nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  for f in "$build"/libmojo_jit*.so* "$tests" "$build/tools/mojo-jit"; do
    ldd "$f" 2>&1 | grep "not found" | sed "s|^|missing for $f: |"
  done
  # The CPU-device tests build kernels with the host compiler this build was configured with (c++ here).
  command -v "${MOJO_JIT_HOST_CXX:-c++}" >/dev/null || echo "no host C++ compiler: the CPU-device tests will fail"
  for tool in compute-sanitizer cuobjdump python3; do command -v $tool >/dev/null || echo "no $tool"; done
} >"$out/device.txt" 2>&1
cat "$out/device.txt"
[ -f "$out/summary.md" ] || printf '| step | result | seconds | detail |\n|---|---|---:|---|\n' >"$out/summary.md"

left() { echo $((deadline - SECONDS > 10 ? deadline - SECONDS - 5 : 5)); }
# The last test a shard started, for a shard that timed out.
last_test() { grep -h '^\[ RUN' "$1" | tail -n 1 | sed 's/^\[ RUN *\] //'; }

# sharded NAME CMD...: CMD (a gtest binary, maybe under a tool) in $jobs shards at once, each into
# OUT/NAME-i.txt; prints the failed tests and any timed-out shard, returns non-zero if any.
sharded() {
  local name=$1 limit i status bad=0
  shift
  limit=$(left)
  local pids=()
  for ((i = 0; i < jobs; i++)); do
    GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i GTEST_OUTPUT="xml:$out/$name-$i.xml" timeout -k 10 "$limit" "$@" >"$out/$name-$i.txt" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    status=$?
    if ((status == 124 || status == 137)); then
      echo "shard $i timed out after ${limit}s in $(last_test "$out/$name-$i.txt")"
      bad=1
    elif ((status)); then
      bad=1
    fi
  done
  grep -h '^\[  FAILED  \] [A-Za-z]' "$out/$name"-*.txt | grep -v ' listed below' | sort -u
  awk '/^\[  PASSED  \]/ {p += $4} /^\[  SKIPPED \] [0-9]/ {s += $4} END {printf "%d passed, %d skipped\n", p, s}' \
    "$out/$name"-*.txt
  return $bad
}

# sanitizer TOOL FILTER: the tests of FILTER under compute-sanitizer TOOL, sharded.
sanitizer() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; return 1; }
  local tool=$1 status
  sharded "$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 "$tests" --gtest_filter="$2"
  status=$?
  grep -h "ERROR SUMMARY: [1-9]" "$out/$tool"-*.txt | sort | uniq -c
  return $status
}

sass_check() {  # NAME INSTRUCTION CLI-ARGS...
  local name=$1 instruction=$2 count local_ops
  shift 2
  "$build/tools/mojo-jit" --emit=cubin "$@" -o "$out/$name.cubin" &&
    cuobjdump --dump-sass "$out/$name.cubin" >"$out/$name.sass" || return 1
  count=$(grep -c "$instruction" "$out/$name.sass" || true)
  local_ops=$(grep -cE "\b(LDL|STL)\b" "$out/$name.sass" || true)
  echo "$name: $count $instruction, $local_ops local loads/stores" | tee -a "$out/sass.txt"
  [ "$count" -gt 0 ] && [ "$local_ops" -eq 0 ]
}

# One test per kernel family that uses shared memory: racecheck is slow.
racecheck_tests=(
  'Compilers/GpuGemm.HopperPathOneShape/Nvrtc' 'Compilers/GpuGemm.LinearResidualMayBeTheOutputItself/Nvrtc'
  'Compilers/AttentionGpu.HopperPrefillMatchesTheReference/Nvrtc'
  'Compilers/AttentionGpu.PagedDecodeSplitsTheKeysAndMerges/Nvrtc'
  'Compilers/RmsNormGpu.AddRmsNormUpdatesResidualInPlace/Nvrtc' 'Compilers/SoftmaxGpu.SoftmaxAndLogSoftmax/Nvrtc'
  'Compilers/LayerNormGpu.LayerNormBackwardIsCorrectAndDeterministic/Nvrtc'
  'Compilers/SamplingGpu.TokensMatchTheSortingReference/Nvrtc' 'Compilers/MoeGpu.RoutedExpertMlpEqualsTheDenseComputation/Nvrtc'
  'Compilers/LinearCrossEntropyGpu.ByHand/Nvrtc'
)

run_step() {  # STEP: prints what it found, returns non-zero on a failure
  case $1 in
    tests) sharded tests "$tests" ;;
    pdl) MOJO_JIT_PDL=1 sharded pdl "$tests" --gtest_filter='*Gpu*:CheckOp.*' ;;
    conformance)
      timeout -k 10 "$(left)" "$tests" --gtest_filter='Conformance.*' >"$out/conformance.txt" 2>&1
      local status=$?
      grep -E "^\[ *(OK|FAILED|SKIPPED) *\]" "$out/conformance.txt"
      return $status ;;
    example)
      # The README's C++ block as written (built by the tests), then the full-size decoder layer.
      timeout -k 10 "$(left)" "$build/tests/readme_api_example" >"$out/example.txt" 2>&1 &&
        timeout -k 10 "$(left)" "$build/examples/decoder_layer" >>"$out/example.txt" 2>&1
      local status=$?
      tail -n 5 "$out/example.txt"
      return $status ;;
    sass)
      command -v cuobjdump >/dev/null || { echo "cuobjdump not found"; return 1; }
      : >"$out/sass.txt"
      local bad=0
      sass_check gemm_sm80 HMMA gemm --dtype bf16 --shape a=4096x4096 --shape b=4096x4096 --arch sm_80 || bad=1
      sass_check linear_sm90a HGMMA linear --dtype bf16 --shape x=4096x4096 --shape weight=4096x4096 --arch sm_90a ||
        bad=1
      return $bad ;;
    memcheck | synccheck | initcheck) sanitizer "$1" '*Gpu*:CheckOp.*' ;;  # CheckOp: every op at odd shapes
    racecheck)
      local IFS=:
      sanitizer racecheck "${racecheck_tests[*]}" ;;
    bench)
      timeout -k 10 "$(left)" "$build/tools/mojo-bench" --json "$out/ops.json" >"$out/bench.md" 2>&1
      local status=$?
      cat "$out/bench.md"
      return $status ;;
    torch)
      local ops_json=${GPU_CHECK_OPS_JSON:-$out/ops.json}
      [ -f "$ops_json" ] || { echo "no $ops_json: run the bench step first"; return 1; }
      python3 -c "import torch" 2>/dev/null || { echo "no PyTorch here"; return 1; }
      # Rows are printed as they are timed: a timeout keeps those done.
      timeout -k 10 "$(left)" python3 "$(dirname "$0")/bench/torch_compare.py" "$ops_json" "${GPU_CHECK_TORCH_ROWS:-:}" \
        >"$out/torch.md" 2>"$out/torch.log"
      local status=$?
      cat "$out/torch.md"
      return $status ;;
    python)
      # The Python package on the GPU: its pytest suite (torch ops, compile, goldens) and the per-call overhead.
      # The build's modules are for the build machine's Python; where they do not import, they are built here
      # for this python3 (tools/python_modules.sh), against the same libraries.
      local package=$build/python
      if ! PYTHONPATH=$package python3 -c "import mojo_jit" 2>"$out/python.log"; then
        package=$out/python-here
        timeout -k 10 "$(left)" bash "$(dirname "$0")/python_modules.sh" "$build" "$package" >>"$out/python.log" 2>&1 ||
          { echo "mojo_jit does not import here, nor build: $(tail -1 "$out/python.log")"; return 1; }
      fi
      python3 -c "import pytest" 2>>"$out/python.log" || { echo "no pytest here"; return 1; }
      MOJO_JIT_DEVICE=cuda PYTHONPATH=$package timeout -k 10 "$(left)" python3 -m pytest -q -p no:cacheprovider \
        -rs "$(dirname "$0")/../python/tests" >"$out/python.txt" 2>&1
      local status=$?
      PYTHONPATH=$package timeout -k 10 "$(left)" python3 "$(dirname "$0")/bench/python_overhead.py" \
        >>"$out/python.txt" 2>&1 || status=1
      tail -40 "$out/python.txt"
      return $status ;;
    compile)
      timeout -k 10 "$(left)" "$build/tools/mojo-bench" --only compile,modes >"$out/compile.md" 2>&1
      local status=$?
      grep -v '^ptxas' "$out/compile.md"
      return $status ;;
    profile:*)
      local name=${1#profile:}
      [ -f "$(dirname "$0")/bench/cases/$name.txt" ] || { echo "no tools/bench/cases/$name.txt"; return 2; }
      timeout -k 10 "$(left)" bash "$(dirname "$0")/bench/profile.sh" "$(dirname "$0")/bench/cases/$name.txt" \
        "$build" >"$out/profile-$name.txt" 2>&1
      local status=$?
      grep -E '^(== |profile:)|Duration|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy' \
        "$out/profile-$name.txt"
      return $status ;;
    cases:* | cases-pdl:*)
      # A cases file of tools/bench/cases against PyTorch eager (vs_torch.sh), with programmatic dependent launch
      # for cases-pdl; a case that fails or hangs costs its row (VS_TORCH_CASE_TIMEOUT).
      local name=${1#*:} pdl=0 table
      [[ $1 == cases-pdl:* ]] && pdl=1
      table=$out/cases-$name$([ $pdl = 1 ] && echo -pdl).md
      [ -f "$(dirname "$0")/bench/cases/$name.txt" ] || { echo "no tools/bench/cases/$name.txt"; return 2; }
      MOJO_JIT_PDL=$pdl VS_TORCH_EAGER_ONLY=1 timeout -k 10 "$(left)" \
        bash "$(dirname "$0")/bench/vs_torch.sh" "$(dirname "$0")/bench/cases/$name.txt" "$build" >"$table" 2>&1
      local status=$?
      cat "$table"
      return $status ;;
    *) echo "unknown step '$1'"; return 2 ;;
  esac
}

for step in "${steps[@]}"; do
  if ((deadline - SECONDS < 15)); then
    echo "== $step: skipped, the budget is spent"
    printf '| %s | skipped: no time left | 0 | |\n' "$step" >>"$out/summary.md"
    failed+=("$step")
    continue
  fi
  echo "== $step"
  start=$SECONDS
  run_step "$step" 2>&1 | tee "$out/$step.log"
  status=${PIPESTATUS[0]}
  result=passed
  ((status == 0)) || { result=FAILED; failed+=("$step"); }
  detail=$(grep -E 'passed,|timed out|FAILED|not found|ERROR SUMMARY|: [0-9]+ (HMMA|HGMMA)' "$out/$step.log" | head -n 6 |
    tr '\n' ';')
  [ -n "$detail" ] || ((status == 0)) || detail=$(tail -n 1 "$out/$step.log")
  detail=${detail//|/\\|}
  printf '| %s | %s | %d | %s |\n' "$step" "$result" $((SECONDS - start)) "$detail" >>"$out/summary.md"
done

cat "$out/summary.md"
# Everything in one file, for a machine that returns few (the lent one: 8).
[ -z "${GPU_CHECK_TAR:-}" ] || tar -C "$out" -czf "$GPU_CHECK_TAR" .
if ((${#failed[@]})); then
  echo "gpu_check: FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu_check: all passed"
