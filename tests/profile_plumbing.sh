#!/usr/bin/env bash
# tools/bench/profile.sh's plumbing, with a stand-in ncu that prints its arguments: each case gets a launch count
# of its plan's kernels times its runs (sample f32 at B 256: one kernel, 10 phases; layer_norm_backward: 2
# kernels), its fills go to mojo-bench but not to describe, and a case whose ncu fails fails the script after
# the other cases ran.
#   tests/profile_plumbing.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=${1:?usage: profile_plumbing.sh SOURCE_DIR BUILD_DIR} build=${2:?usage: profile_plumbing.sh SOURCE_DIR BUILD_DIR}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/bin"
cat >"$scratch/bin/ncu" <<'STUB'
#!/usr/bin/env bash
echo "ncu $*"
case " $* " in *" rms_norm "*) exit 3 ;; esac
STUB
chmod +x "$scratch/bin/ncu"
cat >"$scratch/cases.txt" <<'CASES'
# a comment, then three cases
sample --dtype f32 --shape logits=256x151936 --fill logits=0
rms_norm --dtype bf16 --shape x=64x4096
layer_norm_backward --dtype bf16 --shape x=16384x4096
CASES
out=$(PATH=$scratch/bin:$PATH bash "$src/tools/bench/profile.sh" "$scratch/cases.txt" "$build" 2>&1)
rc=$?
echo "$out"
fail() { echo "profile_plumbing: $1" >&2; exit 1; }
((rc != 0)) || fail "passed with a failing case"
grep -q -- '--launch-count 10 .*mojo-bench --op sample --dtype f32 --shape logits=256x151936 --fill logits=0$' <<<"$out" ||
  fail "sample: not 10 launches with its fill"
grep -q -- '--launch-count 2 .*--op layer_norm_backward' <<<"$out" || fail "layer_norm_backward: not 2 launches"
grep -q '^profile: status 3$' <<<"$out" || fail "the failing case is not named"
[ "$(grep -c '^== ' <<<"$out")" -eq 3 ] || fail "not every case ran"
echo "profile_plumbing: passed"
