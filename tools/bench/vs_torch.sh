#!/usr/bin/env bash
# Ours and PyTorch's (eager and torch.compile) at the shapes a cases file names, in one run on one GPU:
#
#   tools/bench/vs_torch.sh CASES [BUILD_DIR]      # prints the markdown table of torch_compare.py
#
# VS_TORCH_EAGER_ONLY=1 skips torch.compile (seconds a row), for a short GPU lease. VS_TORCH_CASE_TIMEOUT
# (seconds, default 120) ends a case of ours that runs longer (a hang), which then costs its row only.
#
# CASES: one case a line, as `mojo-bench --op` takes it after the op (# starts a comment):
#   rotary_embedding --dtype bf16 --shape q=4096x32x128 --shape k=4096x8x128 --shape cos_sin_cache=40960x128
# Each line is timed by `mojo-bench --op ... --json` (CUDA graph, random operands); the rows then go to
# torch_compare.py, which times PyTorch on the same shapes the same way. For a few ops after a change,
# where `mojo-bench --only ops` would time every op.
# Without a GPU, tests/bench_cases.sh (ctest Tools.bench_cases_are_valid) checks every line of the case files.
set -euo pipefail
cases=${1:?usage: tools/bench/vs_torch.sh CASES [BUILD_DIR]}
build=${2:-build}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
i=0 failed=0
while read -r line; do
  line=${line%%#*}
  [ -n "${line// /}" ] || continue
  rc=0
  # shellcheck disable=SC2086  # the case's words are mojo-bench's arguments
  timeout "${VS_TORCH_CASE_TIMEOUT:-120}" "$build/tools/mojo-bench" --op $line --json "$scratch/$((i + 1)).json" \
    </dev/null >"$scratch/log.txt" 2>&1 || rc=$?
  if ((rc == 0)); then
    i=$((i + 1))
  else  # a failed case costs its row, not the table (a GPU lease is short): said here, and in the exit status
    ((rc != 124)) || echo "vs_torch: ran past ${VS_TORCH_CASE_TIMEOUT:-120} s (hung, or too slow):" >&2
    echo "vs_torch: mojo-bench --op $line failed (status $rc):" >&2
    cat "$scratch/log.txt" >&2
    failed=$((failed + 1))
  fi
done <"$cases"
python3 - "$scratch" "$i" >"$scratch/ops.json" <<'EOF'
import json, sys
folder, count = sys.argv[1], int(sys.argv[2])
rows = [json.load(open(f"{folder}/{i}.json")) for i in range(1, count + 1)]
print(json.dumps({"ops": rows, "launch_floor_us": 0.0}))
EOF
python3 "$here/torch_compare.py" "$scratch/ops.json" ${VS_TORCH_EAGER_ONLY:+--eager-only}
((failed == 0))
