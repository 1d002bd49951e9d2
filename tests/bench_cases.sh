#!/usr/bin/env bash
# Every case of tools/bench/cases/*.txt names a specialization the runtime takes: its op, dtype, shapes and
# params pass `mojo-jit cache explain` (which compiles nothing), and each --fill names an input tensor of its
# op. A broken line is found here, not in a GPU lease's minutes (vs_torch.sh runs each line on the GPU).
#   tests/bench_cases.sh CLI CASES_DIR
set -uo pipefail
cli=${1:?usage: bench_cases.sh CLI CASES_DIR} cases_dir=${2:?usage: bench_cases.sh CLI CASES_DIR}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cases=0 bad=0
for file in "$cases_dir"/*.txt; do
  while read -r line; do
    line=${line%%#*}
    [ -n "${line// /}" ] || continue
    cases=$((cases + 1))
    read -ra words <<<"$line"
    args=() fills=()
    for ((i = 0; i < ${#words[@]}; i++)); do
      if [ "${words[i]}" = --fill ]; then
        fills+=("${words[i + 1]%%=*}")
        i=$((i + 1))
      else
        args+=("${words[i]}")
      fi
    done
    if ! out=$("$cli" cache explain "${args[@]}" --arch sm_90a --cache-dir "$scratch" 2>&1); then
      printf '%s: %s\n  %s\n' "${file##*/}" "$line" "$(tail -1 <<<"$out")"
      bad=$((bad + 1))
      continue
    fi
    for name in "${fills[@]}"; do
      if ! grep -Eq "^tensor: +$name = " <<<"$out"; then
        printf '%s: %s\n  --fill %s: the op has no input tensor of that name\n' "${file##*/}" "$line" "$name"
        bad=$((bad + 1))
      fi
    done
  done <"$file"
done
echo "$cases cases, $bad bad"
((cases > 0 && bad == 0))
