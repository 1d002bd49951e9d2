#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and builds mojo-jit into build/:
# installs the Debian packages it needs (only those missing), checks for the
# CUDA toolkit, makes .venv/ (nvdisasm; nanobind, numpy and pytest for the
# Python module; torch too with MOJO_JIT_SETUP_TORCH=1), then configures and
# builds with the "default" CMake preset.
#
#   bash tools/setup.sh && build/examples/quickstart     # the main job
#   bash tools/setup.sh && ctest --preset default        # the test suite
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(cmake ninja-build g++ pkg-config python3-dev python3-venv libfmt-dev libxxhash-dev libcli11-dev libtomlplusplus-dev libhiredis-dev redis-server
  nlohmann-json3-dev libgtest-dev googletest clang-14 libclang-rt-14-dev
  llvm-19-dev libclang-19-dev zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ] || [ ! -f "$cuda/include/cuda.h" ]; then
  echo "setup: no CUDA toolkit at $cuda (mojo-jit needs its NVRTC and cuda.h)." >&2
  echo "setup: install the CUDA toolkit 12.4 or newer (e.g. cuda-toolkit-13-0 from NVIDIA's apt repository) and set CUDA_HOME to it." >&2
  exit 1
fi

# nvdisasm (not in the CUDA 13.0 toolkit image here) for `--emit=sass` and the
# tests that read SASS, from PyPI into .venv/ (best effort: offline, those
# SASS checks skip and say so).
if [ ! -x .venv/bin/nvdisasm ]; then
  if python3 -m venv .venv >/dev/null 2>&1 &&
     .venv/bin/pip install -q --disable-pip-version-check "nvidia-cuda-nvdisasm>=13.0,<14" >/dev/null 2>&1; then
    ln -sf "$(find "$PWD/.venv" -path '*/bin/nvdisasm' -type f | head -1)" .venv/bin/nvdisasm
  else
    echo "setup: could not install nvdisasm from PyPI; SASS checks will be skipped" >&2
  fi
fi

# The Python module's build (nanobind) and tests (numpy, pytest), in the same .venv/ (best effort: without them the
# module is not built, and CMake says so).
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import nanobind, numpy, pytest" >/dev/null 2>&1; then
  .venv/bin/pip install -q --disable-pip-version-check "nanobind>=2.4" numpy pytest >/dev/null 2>&1 ||
    echo "setup: could not install nanobind, numpy and pytest from PyPI; the Python module will not be built" >&2
fi

# torch, for the tests of the torch layer (mojo_jit.torch) on the CPU device, when MOJO_JIT_SETUP_TORCH=1 (CI sets
# it): PyPI's wheel with its CUDA libraries, about 5 GB and 2 minutes (2026-11-28). Best effort, like the above.
if [ "${MOJO_JIT_SETUP_TORCH:-0}" = 1 ] && [ -x .venv/bin/python ] && ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing torch into .venv/ (MOJO_JIT_SETUP_TORCH=1)"
  .venv/bin/pip install -q --disable-pip-version-check torch >/dev/null 2>&1 ||
    echo "setup: could not install torch from PyPI; the torch layer's tests will not be registered" >&2
fi

cmake --preset default >/dev/null
cmake --build --preset default
