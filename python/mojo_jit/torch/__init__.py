"""Every mojo-jit op as a torch op, `torch.ops.mojo_jit.<op>`, and as a function here with a backend switch.

    import mojo_jit.torch as mt
    y = mt.rms_norm(x, w, eps=1e-6)                     # the kernel (or the golden function: MOJO_JIT_BACKEND)
    y = torch.ops.mojo_jit.rms_norm(x, w, eps=1e-6)     # the registered op: torch.compile keeps it as one node

Each op is registered once with a schema and a fake kernel (the outputs' shapes and dtypes, from the op's own shape
rules), so torch.compile(fullgraph=True) traces through it. In the schema the tensors the op reads come first, in the
op's order; tensors it updates in place (add_rms_norm's residual, store_kv_cache's caches, gemm's c) are declared
mutated; outputs whose shape the inputs do not give (moe_gate's ids and weights) and optional outputs (layer_norm's
mean and rstd, attention's lse) are mutated arguments too; the others are returned. Scalars are floats.

The functions here (mt.rms_norm, ...) take the eager fast path outside torch.compile (the op function itself, no
dispatcher) and the registered op inside it, and choose a backend (`backend=` per call, else $MOJO_JIT_BACKEND):
  auto   the kernel; where it cannot run (no GPU for CPU tensors, a dtype, arch or compile error) the golden function,
         with one warning per op and reason;
  mojo   the kernel, or the error;
  torch  the golden function (mojo_jit.torch.golden), always.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from .. import _C, _runtime
from .. import ops as _ops
from . import golden

_TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
                 "i64": torch.int64, "u8": torch.uint8}
_DTYPE_NAMES = {v: k for k, v in _TORCH_DTYPES.items()}
_BACKENDS = ("auto", "mojo", "torch")


class _Op:
    """One op's torch face: its schema, fake kernel and eager implementation."""

    def __init__(self, f: _ops.OpFunction):
        self.f = f
        self.name = f.name
        # Outputs the caller gives: optional ones, and those whose shapes the inputs do not determine.
        self.given = [n for n in f.outputs if n in f.optional or n in f.shape_needed]
        self.returned = [n for n in f.outputs if n not in self.given]
        self.args = f.inputs + [n for n in f.tensor_names if n not in f.inputs and n not in self.returned]
        self._plans: dict = {}

    def schema(self) -> str:
        f, parts = self.f, []
        for n in self.args:
            mutated = n in f.in_place or n in self.given
            alias = f"(a{len(parts)}!)" if mutated else ""
            optional = "?" if n in f.optional else ""
            parts.append(f"Tensor{alias}{optional} {n}" + ("=None" if optional else ""))
        parts += [f"float {n}={float(v)!r}" for n, v in f.scalar_defaults.items()]
        returns = ", ".join("Tensor" for _ in self.returned)
        returns = f"({returns})" if len(self.returned) != 1 else "Tensor"
        return f"{self.name}({', '.join(parts)}) -> {returns}"

    def split(self, args: tuple, kwargs: dict) -> tuple[dict, dict]:
        """The tensors (by name) and scalars of a call in the schema's order."""
        names = self.args + list(self.f.scalar_defaults)
        values = dict(zip(names, args))
        values.update(kwargs)
        tensors = {n: values[n] for n in self.args if values.get(n) is not None}
        scalars = {n: values[n] for n in self.f.scalar_defaults if n in values}
        return tensors, scalars

    def outputs(self, tensors: dict, metas: dict, scalars: dict) -> tuple[dict, Any]:
        """The returned outputs for these inputs (metas: their array_meta), empty: (those the op writes, by name; the
        op's return value, where an output absent for these inputs, moe_dispatch's sorted_x without x, is an empty
        tensor). The fake kernel's answer and the eager path's memory."""
        return self._allocate(self._output_specs(metas, scalars), tensors[self.f.inputs[0]].device)

    def _output_specs(self, metas: dict, scalars: dict) -> list:
        """(name, torch dtype, shape; None where absent) of each returned output, in the schema's order."""
        return [(n, _TORCH_DTYPES[d], s) for n, d, s in self.f.missing_outputs(metas, scalars) if n in self.returned]

    @staticmethod
    def _allocate(specs: list, device: Any) -> tuple[dict, Any]:
        written, returned = {}, []
        for name, dtype, shape in specs:
            t = torch.empty(shape or (0,), dtype=dtype, device=device)
            if shape is not None:
                written[name] = t
            returned.append(t)
        return written, _as_returned(returned)

    def fake(self, *args: Any, **kwargs: Any) -> Any:
        tensors, scalars = self.split(args, kwargs)
        # From the tensors' metadata only: under torch.compile they are fake, with no memory to look at, and their
        # sizes may be symbolic (int() specialises them).
        metas = {n: (_DTYPE_NAMES.get(t.dtype), tuple(int(d) for d in t.shape), "cpu") for n, t in tensors.items()}
        return self.outputs(tensors, metas, scalars)[1]

    def eager(self, *args: Any, **kwargs: Any) -> Any:
        tensors, scalars = self.split(args, kwargs)
        # What the first call with these dtypes, shapes, devices and scalars worked out (the tensors' checks, the
        # outputs' specs, where it launches), remembered: a repeat allocates and launches, nothing else.
        try:
            key = (tuple([(n, t.dtype, t.shape, t.device, t.layout) for n, t in tensors.items()]),
                   tuple(scalars.items()))
            plan = self._plans.get(key)
        except TypeError:  # an unhashable scalar: the op will say what is wrong with it
            key, plan = None, None
        if plan is None:
            metas = {n: _ops.array_meta(t, n) for n, t in tensors.items()}
            plan = (self._output_specs(metas, scalars), _ops.launch_device(metas))
            if key is not None and len(self._plans) < 1024:
                self._plans[key] = plan
        specs, device = plan
        on = tensors[self.f.inputs[0]].device
        written, returned = self._allocate(specs, on)
        tensors.update(written)
        # ops.OpFunction.launch_on for tensors the plan checked: each as the module's tuple, read off directly.
        raw = [None if t is None else _ops.torch_tuple(t, _DTYPE_NAMES[t.dtype])
               for t in map(tensors.get, self.f.tensor_names)]
        stream = torch.cuda.current_stream(on).cuda_stream if on.type == "cuda" else 0
        _runtime.runtime(device).launch(self.name, raw, scalars, stream)
        return returned


def _as_returned(out: list) -> Any:
    """A schema's return: None, one tensor or a tuple."""
    return None if not out else out[0] if len(out) == 1 else tuple(out)


_lib = torch.library.Library("mojo_jit", "DEF")
_registered: dict[str, _Op] = {}
for _f in _ops._functions.values():
    _op = _registered[_f.name] = _Op(_f)
    _lib.define(_op.schema())
    _lib.impl(_f.name, _op.eager, "CPU")
    _lib.impl(_f.name, _op.eager, "CUDA")
    torch.library.register_fake(f"mojo_jit::{_f.name}", _op.fake, lib=_lib)


def schema(op: str) -> str:
    """The schema op `op` is registered with."""
    return _registered[op].schema()


# ---- the backend switch ------------------------------------------------------------------------------------------
_warned: set[tuple[str, str]] = set()


def _backend(backend: str | None) -> str:
    b = backend or os.environ.get("MOJO_JIT_BACKEND") or "auto"
    if b not in _BACKENDS:
        raise _C.InvalidArgumentError(f"MOJO_JIT_BACKEND={b}: expected one of {', '.join(_BACKENDS)}")
    return b


def _fallback_reason(tensors: list) -> str | None:
    """Why the kernel cannot run on these tensors before trying: CPU tensors where no GPU is (and no one asked for
    the CPU device, the emulator)."""
    on_gpu = any(t.is_cuda for t in tensors)
    if not on_gpu and not os.environ.get("MOJO_JIT_DEVICE") and not _runtime.gpu_present():
        return "no GPU (set MOJO_JIT_DEVICE=cpu to run the kernels on the CPU device, an emulator)"
    return None


def _fall_back(op: _Op, reason: str, kind: str, args: tuple, kwargs: dict, warn: bool) -> Any:
    golden_fn = getattr(golden, op.name, None)
    if golden_fn is None:
        raise NotImplementedError(f"mojo_jit.torch.golden has no {op.name} yet, and the kernel cannot run: {reason}")
    if warn and (op.name, kind) not in _warned:
        _warned.add((op.name, kind))
        warnings.warn(f"mojo_jit: {op.name} runs its golden function (PyTorch): {reason}", stacklevel=3)
    return golden_fn(*args, **kwargs)


def _make_function(op: _Op):
    registered = getattr(torch.ops.mojo_jit, op.name)

    def call(*args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        b = _backend(backend)
        if b == "torch":
            return _fall_back(op, "MOJO_JIT_BACKEND=torch", "torch", args, kwargs, warn=False)
        if b == "auto":
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
            reason = _fallback_reason(tensors)
            if reason is not None:
                return _fall_back(op, reason, "no GPU", args, kwargs, warn=True)
        if torch.compiler.is_compiling():
            return registered(*args, **kwargs)
        try:
            return op.eager(*args, **kwargs)
        except (_C.DTypeError, _C.ArchError, _C.CompileError, _C.NoDeviceError) as e:
            if b != "auto":
                raise
            return _fall_back(op, f"{type(e).__name__}: {e}", type(e).__name__, args, kwargs, warn=True)

    call.__name__ = call.__qualname__ = op.name
    call.__doc__ = f"torch.ops.mojo_jit.{op.schema()}\n\n{op.f.__doc__}"
    return call


for _name, _op in _registered.items():
    globals()[_name] = _make_function(_op)

__all__ = list(_registered) + ["golden", "schema"]
