#!/usr/bin/env bash
# Nsight Compute's sections of each kernel a case launches, one case a line as vs_torch.sh takes them:
#
#   tools/bench/profile.sh CASES [BUILD_DIR]      # prints ncu's report, a "== case" line before each
#
# ncu profiles the first launch of the case's plan that `mojo-bench --op` makes (its random or --fill data,
# before the timed graphs): as many kernel launches as `mojo-jit describe` counts in the plan (its kernels
# times its runs). Clocks are left as they are (--clock-control none), as the lent GPU machines ask.
# PROFILE_SECTIONS overrides the sections; PROFILE_CASE_TIMEOUT (seconds, default 120) ends a case that hangs,
# which then costs its report only.
set -uo pipefail
cases=${1:?usage: tools/bench/profile.sh CASES [BUILD_DIR]}
build=${2:-build}
command -v ncu >/dev/null || { echo "profile: ncu not found" >&2; exit 2; }
read -ra sections <<<"${PROFILE_SECTIONS:-SpeedOfLight Occupancy LaunchStats MemoryWorkloadAnalysis WarpStateStats}"
section_args=()
for s in "${sections[@]}"; do section_args+=(--section "$s"); done
report=$(mktemp)
trap 'rm -f "$report"' EXIT
failed=0
while read -r line; do
  line=${line%%#*}
  [ -n "${line// /}" ] || continue
  read -ra words <<<"$line"
  described=()  # the case without its fills, which describe does not take
  for ((i = 0; i < ${#words[@]}; i++)); do
    if [ "${words[i]}" = --fill ]; then i=$((i + 1)); else described+=("${words[i]}"); fi
  done
  echo "== $line"
  launches=$("$build/tools/mojo-jit" describe "${described[@]}" --json </dev/null |
    python3 -c 'import json, sys; d = json.load(sys.stdin); print(len(d["kernels"]) * d["runs"])') || {
    echo "profile: mojo-jit describe failed"
    failed=$((failed + 1))
    continue
  }
  # shellcheck disable=SC2086  # the case's words are mojo-bench's arguments
  timeout "${PROFILE_CASE_TIMEOUT:-120}" ncu --clock-control none --launch-count "$launches" "${section_args[@]}" \
    "$build/tools/mojo-bench" --op $line </dev/null >"$report" 2>&1
  status=$?
  grep -v '^==PROF== Profiling' "$report"  # ncu's progress lines
  if ((status != 0)); then
    echo "profile: status $status$( ((status == 124)) && echo ", past ${PROFILE_CASE_TIMEOUT:-120} s")"
    failed=$((failed + 1))
  fi
done <"$cases"
((failed == 0))
