"""Runtimes by device, and what works without one: emit, describe, prewarm, the cache."""
from __future__ import annotations

import os
import threading
from typing import Any, Mapping, Sequence

from . import _C

Runtime = _C.Runtime

_runtimes: dict[str, _C.Runtime] = {}
_lock = threading.Lock()


_gpu: list[bool] = []


def gpu_present() -> bool:
    """Whether this process sees a GPU (asked once: 3 us a call, and a GPU does not come or go in a process)."""
    if not _gpu:
        _gpu.append(_C.device_available())
    return _gpu[0]


def default_device() -> str:
    """$MOJO_JIT_DEVICE, else "cuda" where there is a GPU, else "cpu" (the emulator)."""
    return os.environ.get("MOJO_JIT_DEVICE") or ("cuda" if gpu_present() else "cpu")


def runtime(device: str | None = None) -> _C.Runtime:
    """The process's Runtime for `device` ("cuda", "cuda:N", "cpu", "cpu:sm_90a", "cpu:sm_90a,sms=4"; None:
    default_device()), made on first use with the options of the environment (README, "Environment")."""
    device = device or default_device()
    rt = _runtimes.get(device)  # made once; the lock only orders two threads making it
    if rt is not None:
        return rt
    with _lock:
        rt = _runtimes.get(device)
        if rt is None:
            rt = _runtimes[device] = _C.Runtime(device=device)
        return rt


def _shapes(shapes: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    return {name: (dims,) if isinstance(dims, int) else tuple(int(d) for d in dims) for name, dims in shapes.items()}


def emit(op: str, shapes: Mapping[str, Any], dtype: str = "f32", arch: str | None = None, emit: str = "ptx",
         **scalars: float) -> str | bytes:
    """What one specialization compiles to, as `mojo-jit --emit=...` prints it: PTX or LLVM IR (str), a cubin (bytes).
    Needs no GPU. `shapes`: {"x": (32, 4096)}; the op derives the rest."""
    return runtime("cpu").emit(op, _shapes(shapes), dtype, scalars, arch or "", emit)


def describe(op: str, shapes: Mapping[str, Any], dtype: str = "f32", arch: str | None = None, sms: int = 0,
             **scalars: float) -> dict:
    """`mojo-jit describe --json`: params, each kernel's grid, block, registers, occupancy and waves on `sms` SMs
    (0: the target's reference GPU's), the ideal bytes, FLOPs and roofline time, the cache key."""
    return runtime("cpu").describe(op, _shapes(shapes), dtype, scalars, arch or "", sms)


def prewarm(manifest: str | os.PathLike | None = None, ops: Sequence[str] = (), arch: Sequence[str] = (),
            emit: str = "cubin", jobs: int = 0) -> dict:
    """Compiles a TOML manifest's specializations (or every dtype of `ops` at their example shapes, "all" for every
    op) into the disk cache, on `jobs` threads (0: one per core); no GPU needed. Returns the counts and failures."""
    return runtime("cpu").prewarm(os.fspath(manifest) if manifest else "", list(ops), list(arch), emit, jobs)


def cache(action: str = "stats", cache_dir: str | os.PathLike | None = None, max_bytes: int = 0,
          remote: str = "") -> dict:
    """`mojo-jit cache ACTION --json`: path, stats, ls, verify, prune, clear, push, pull."""
    return _C.cache(action, os.fspath(cache_dir) if cache_dir else "", max_bytes, remote)


def op_names() -> list[str]:
    """Every op, in `mojo-jit list`'s order."""
    return [info["name"] for info in _C.ops()]


def op_info(op: str) -> dict:
    """What `mojo-jit list` shows of one op: summary, tensors (name, role, doc), scalars (name, default, doc),
    dtypes, template, example shapes."""
    for info in _C.ops():
        if info["name"] == op:
            return info
    raise UnknownOpError(f"unknown op '{op}'; known ops: {', '.join(op_names())}")


UnknownOpError = _C.UnknownOpError
