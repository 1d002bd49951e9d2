"""Every op as a plain function, named and ordered as `mojo-jit list` shows it, on any array type.

    out = mojo_jit.ops.rms_norm(x, weight, eps=1e-6)

- The tensors the op reads (in, inout) come first, positionally, in the op's order; optional ones (absent by
  default: linear's bias, sdpa's sinks) are keywords.
- Scalars are keywords, with the op's defaults.
- The tensors it writes are allocated like the first input (numpy in, numpy out; torch on a GPU in, torch on that GPU
  out) unless given, each by its name, or all as `out=` (a tuple where the op writes several; an op whose output is
  called out takes just that one). Optional outputs (layer_norm's
  mean and rstd, attention's lse) are written only when given.
- Returns what the op writes: one array, or a tuple in the op's order; an op that only updates tensors in place
  (store_kv_cache) returns those.
- `device`: where it runs ("cuda", "cuda:N", "cpu"); None: the arrays' GPU, else mojo_jit.default_device(). Host arrays
  on a GPU runtime are copied there and back. `stream`: a CUDA stream handle (int); None: torch's current stream for
  torch tensors, else the default stream.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, Callable

from . import _C
from ._runtime import runtime, default_device

# mojo-jit's dtype names by the names array libraries give their dtypes.
_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "i32", "int64": "i64", "uint8": "u8"}
_FLOAT = ("f32", "f16", "bf16")


def dtype_name(array: Any) -> str:
    """mojo-jit's name of an array's element type ("f32", "bf16", ...); DTypeError for one it does not take."""
    return _C.array_spec(array)[0]


def _is_torch(array: Any) -> bool:
    return type(array).__module__.startswith("torch") and "torch" in sys.modules


def empty_like_array(like: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """An uninitialised array of `shape` and `dtype` ("f32", ...) of the same kind and device as `like`."""
    library_name = {v: k for k, v in _DTYPES.items()}[dtype]
    if _is_torch(like):
        import torch

        return torch.empty(shape, dtype=getattr(torch, library_name), device=like.device)
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is not None and dtype != "bf16":
        xp = namespace()
        return xp.empty(shape, dtype=getattr(xp, library_name))
    import numpy

    if dtype == "bf16":
        try:
            import ml_dtypes

            return numpy.empty(shape, dtype=ml_dtypes.bfloat16)
        except ImportError:
            raise _C.DTypeError("a bf16 output in numpy needs ml_dtypes (pip install ml_dtypes), or give it as out=")
    return numpy.empty(shape, dtype=getattr(numpy, library_name))


def _device_of(devices: list[str]) -> str:
    """The arrays' GPU ("cuda:N") if any is on one, else the default device."""
    return next((d for d in devices if d != "cpu"), None) or default_device()


def _stream_of(arrays: list[Any]) -> int:
    for a in arrays:
        if _is_torch(a) and a.device.type == "cuda":
            import torch

            return torch.cuda.current_stream(a.device).cuda_stream
    return 0


class OpFunction:
    """One op as a function; its signature and docstring come from the op's metadata (`mojo-jit list`)."""

    def __init__(self, info: dict):
        self.name = info["name"]
        self.info = info
        tensors = info["tensors"]
        self.tensor_names = [t[0] for t in tensors]
        self.roles = {t[0]: t[1] for t in tensors}
        self.scalar_defaults = {s[0]: s[1] for s in info["scalars"]}
        # From the op's own shape rules at its example shapes: optional tensors are those it leaves absent, or that
        # it drops when they are left out of the example; outputs it cannot derive (moe_gate's ids: k is their
        # shape) are those without which the example fails.
        example = {}
        for item in info["example_shapes"].split():
            name, dims = item.split("=")
            example[name] = tuple(int(d) for d in dims.split("x"))
        dtype = info["dtypes"][-1]
        specs = _C.tensor_specs(self.name, dtype, example)
        self.optional = {name for name, _, shape in specs if shape is None}
        self.shape_needed = set()
        for name in example:
            rest = {n: d for n, d in example.items() if n != name}
            try:
                if dict((n, shape) for n, _, shape in _C.tensor_specs(self.name, dtype, rest))[name] is None:
                    self.optional.add(name)
            except _C.Error:
                if self.roles[name] not in ("in", "inout"):
                    self.shape_needed.add(name)
        self.inputs = [n for n in self.tensor_names if self.roles[n] in ("in", "inout") and n not in self.optional]
        self.outputs = [n for n in self.tensor_names if self.roles[n] not in ("in", "inout")]
        self.in_place = [n for n in self.tensor_names if self.roles[n] == "inout"]
        P = inspect.Parameter
        params = [P(n, P.POSITIONAL_OR_KEYWORD) for n in self.inputs]
        params += [P(n, P.KEYWORD_ONLY, default=None) for n in self.tensor_names if n not in self.inputs]
        params += [P(n, P.KEYWORD_ONLY, default=_number(v)) for n, v in self.scalar_defaults.items()]
        if "out" not in self.tensor_names:  # else out= is that tensor
            params.append(P("out", P.KEYWORD_ONLY, default=None))
        params += [P("device", P.KEYWORD_ONLY, default=None), P("stream", P.KEYWORD_ONLY, default=None)]
        self.__signature__ = inspect.Signature(params)
        self.__name__ = self.__qualname__ = self.name
        lines = [info["summary"], ""]
        lines += [f"    {t[0]} ({t[1]}{', optional' if t[0] in self.optional else ''}): {t[2]}" for t in tensors]
        lines += [f"    {s[0]} = {_number(s[1])}: {s[2]}" for s in info["scalars"]]
        lines += ["", f"dtypes: {', '.join(info['dtypes'])}"]
        self.__doc__ = "\n".join(lines)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self.__signature__.bind(*args, **kwargs)
        given = bound.arguments
        arrays = {n: given[n] for n in self.tensor_names if given.get(n) is not None}
        out = None if "out" in self.tensor_names else given.get("out")
        if out is not None:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            required = [n for n in self.outputs if n not in self.optional]
            if len(outs) != len(required):
                raise _C.InvalidArgumentError(
                    f"{self.name}: out= gives {len(outs)} arrays; the op writes {len(required)} ({', '.join(required)})")
            arrays.update(zip(required, outs))
        scalars = {n: given[n] for n in self.scalar_defaults if n in given}
        reads = [arrays[n] for n in self.inputs]
        specs = {n: _C.array_spec(a, n) for n, a in arrays.items()}  # (dtype, shape, device), as the launch sees it
        dtype = next((specs[n][0] for n in self.inputs if specs[n][0] in _FLOAT), self.info["dtypes"][0])
        shapes = {n: spec[1] for n, spec in specs.items()}
        allocated = []
        for name, spec_dtype, shape in _C.tensor_specs(self.name, dtype, shapes, scalars):
            if name not in arrays and shape is not None and name in self.outputs and name not in self.optional:
                arrays[name] = empty_like_array(reads[0] if reads else None, shape, spec_dtype)
                allocated.append(name)
        tensors = [arrays.get(n) for n in self.tensor_names]
        present = [a for a in tensors if a is not None]
        device = given.get("device") or _device_of([spec[2] for spec in specs.values()])
        stream = given.get("stream")
        runtime(device).launch(self.name, tensors, scalars, _stream_of(present) if stream is None else stream)
        written = [arrays[n] for n in self.outputs if n in arrays] or [arrays[n] for n in self.in_place]
        return written[0] if len(written) == 1 else tuple(written)

    def __repr__(self) -> str:
        return f"<mojo_jit op {self.name}{self.__signature__}>"


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _make_all() -> dict[str, OpFunction]:
    return {info["name"]: OpFunction(info) for info in _C.ops()}


_functions = _make_all()
globals().update(_functions)
__all__ = list(_functions) + ["dtype_name", "empty_like_array"]


def get(op: str) -> Callable[..., Any]:
    """The function of op `op`; UnknownOpError naming the known ops otherwise."""
    if op not in _functions:
        raise _C.UnknownOpError(f"unknown op '{op}'; known ops: {', '.join(_functions)}")
    return _functions[op]
