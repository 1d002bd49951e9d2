#!/usr/bin/env bash
# Packs a build for the lent GPU machine into .gpu/ with ../shared/gpu/pack, adding what that script
# leaves out: it copies regular ELF files only, so the libraries' SONAME links (libmojo_jit.so.0) go along
# here as files. Without them the GPU machine's loader would look for libmojo_jit.so.0 at this machine's
# absolute build path (the RUNPATH) and nothing would start there.
#
#   bash tools/gpu_pack.sh [BUILD_DIR]       # then carry .gpu: bash .gpu/run bash tools/gpu_check.sh $OUT ...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
shared=${MOJO_SHARED_DIR:-../shared}
[ -x "$shared/gpu/pack" ] || { echo "gpu_pack: no $shared/gpu/pack (set MOJO_SHARED_DIR)" >&2; exit 1; }
# pack notes .gpu/ in .git/info/exclude; a fresh clone may have no .git/info folder.
mkdir -p "$(git rev-parse --git-dir)/info"
links=()
while IFS= read -r -d '' link; do links+=("$link"); done < <(find "$build" -maxdepth 1 -type l -name 'lib*.so.*' -print0)
# The Downstream test's install trees hold copies of the libraries (the LLVM plugin is 85 MB, LLVM linked in)
# and no test there needs them: set aside while packing.
aside=$(mktemp -d)
trap 'if [ -d "$aside/downstream" ]; then mv "$aside/downstream" "$build/tests/"; fi; rmdir "$aside"' EXIT
if [ -d "$build/tests/downstream" ]; then mv "$build/tests/downstream" "$aside/"; fi
bash "$shared/gpu/pack" "$build" "${links[@]}"
# The headers tools/python_modules.sh needs to build the Python modules there for that machine's Python.
tar -C /usr/include -cJf .gpu/headers.tar.xz fmt nlohmann
