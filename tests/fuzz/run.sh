#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS (default 20).
#   bash tests/fuzz/run.sh 20      # CI smoke run
#   bash tests/fuzz/run.sh 600     # a longer run; record it in docs/fuzzing.md
# A crash stops the run with the reproducer saved under build-fuzz/ and exit 1.
set -euo pipefail
seconds=${1:-20}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
build=$top/build-fuzz
clang=$(command -v clang++-14 || command -v clang++ || true)
[ -n "$clang" ] || { echo "fuzz: needs clang++ (Debian: clang-14 libclang-rt-14-dev)" >&2; exit 1; }
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$clang" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build"

# Seeds: a real cache entry (made by the entry code itself), the manifests here, and cubins.
mkdir -p "$build/corpus/entry" "$build/corpus/manifest" "$build/corpus/cubin"
cp "$here"/seeds/manifest/* "$build/corpus/manifest/"
# The cubin seeds: reproducers as they are, and real cubins assembled from
# the PTX kept here (the repository holds no binaries it can build).
ptxas=${CUDA_HOME:-/usr/local/cuda}/bin/ptxas
for seed in "$here"/seeds/cubin/*; do
  case "$seed" in
    *.ptx) "$ptxas" -arch=sm_80 "$seed" -o "$build/corpus/cubin/$(basename "$seed" .ptx).cubin" ;;
    *) cp "$seed" "$build/corpus/cubin/" ;;
  esac
done
printf 'MOJOJIT\0' >"$build/corpus/entry/magic-only"
for target in entry manifest cubin; do
  echo "== fuzz_$target for ${seconds}s"
  max_len=4096
  [ "$target" = cubin ] && max_len=16384  # the seed is a whole rms_norm cubin
  (cd "$build" && ./fuzz_$target -max_total_time="$seconds" -max_len=$max_len -print_final_stats=1 \
     "corpus/$target" 2>&1 | tail -n 12)
done
