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

import numpy as _numpy
from numpy import ndarray as _numpy_ndarray

from . import _C
from ._runtime import runtime

# mojo-jit's dtype names by the names array libraries give their dtypes.
_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "i32", "int64": "i64", "uint8": "u8"}
_FLOAT = ("f32", "f16", "bf16")
_NUMPY_NAMES = {_numpy.dtype(k): v for k, v in _DTYPES.items() if k != "bfloat16"}


def _is_torch(array: Any) -> bool:
    tensor_type = _torch_tensor_type()
    return tensor_type is not None and isinstance(array, tensor_type)


def _torch_strided() -> Any:
    return sys.modules["torch"].strided


def _torch_tensor_type() -> Any:
    torch = sys.modules.get("torch")
    return torch.Tensor if torch is not None else None


_TORCH_NAMES: dict = {}


def _torch_names() -> dict:
    if not _TORCH_NAMES:
        import torch

        _TORCH_NAMES.update({getattr(torch, k): v for k, v in _DTYPES.items()})
    return _TORCH_NAMES


def array_meta(array: Any, name: str = "array") -> tuple[str, tuple[int, ...], str]:
    """(dtype, shape, device) of an array as a launch sees it ("f32", (16, 4096), "cpu" or "cuda:N"): read off numpy
    and torch arrays directly, others through the module's converter, which raises the launch's errors."""
    if type(array) is _numpy_ndarray:
        dtype = _NUMPY_NAMES.get(array.dtype)
        if dtype is not None:
            return dtype, array.shape, "cpu"
    else:
        tensor_type = _torch_tensor_type()
        if tensor_type is not None and isinstance(array, tensor_type):
            dtype = _torch_names().get(array.dtype)
            if dtype is not None:
                device = array.device
                return dtype, tuple(array.shape), "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
    return _C.array_spec(array, name)


def dtype_name(array: Any) -> str:
    """mojo-jit's name of an array's element type ("f32", "bf16", ...); DTypeError for one it does not take."""
    return array_meta(array)[0]


def _raw(array: Any) -> Any:
    """A torch tensor as the tuple the module takes without DLPack (dtype, shape, strides, address, device; 4x
    faster); anything else as it is."""
    tensor_type = _torch_tensor_type()
    if tensor_type is None or not isinstance(array, tensor_type):
        return array
    dtype = _torch_names().get(array.dtype)
    if dtype is None or array.layout is not _torch_strided():
        return array  # the converter says what is wrong with it
    return torch_tuple(array, dtype)


def torch_tuple(tensor: Any, dtype: str) -> tuple:
    """A strided torch tensor of mojo-jit's dtype `dtype` as the module takes it: (dtype, shape, strides, address,
    device index, -1 for the host)."""
    device = tensor.device
    index = -1 if device.type == "cpu" else device.index or 0
    return dtype, tuple(tensor.shape), tensor.stride(), tensor.data_ptr(), index


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


def _stream_of(arrays: list[Any]) -> int:
    for a in arrays:
        if a is not None and _is_torch(a) and a.device.type == "cuda":
            import torch

            return torch.cuda.current_stream(a.device).cuda_stream
    return 0


def launch_device(metas: dict) -> str | None:
    """Where arrays of these array_metas launch: their GPU; None (default_device(), asked at the launch) for host
    arrays."""
    return next((m[2] for m in metas.values() if m[2] != "cpu"), None)


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
        self._keywords = {n: "tensor" for n in self.tensor_names}
        self._keywords.update({n: "scalar" for n in self.scalar_defaults})
        self._keywords.update({"device": "device", "stream": "stream"})
        if "out" not in self.tensor_names:
            self._keywords["out"] = "out"
        self._allocations: dict = {}
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
        arrays, scalars, out, device, stream = self._parse(args, kwargs)
        if out is not None:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            required = [n for n in self.outputs if n not in self.optional]
            if len(outs) != len(required):
                raise _C.InvalidArgumentError(
                    f"{self.name}: out= gives {len(outs)} arrays; the op writes {len(required)} ({', '.join(required)})")
            arrays.update(zip(required, outs))
        metas = {n: array_meta(a, n) for n, a in arrays.items()}
        for name, dtype, shape in self.missing_outputs(metas, scalars):
            if shape is None:
                continue  # absent for these inputs (moe_dispatch's sorted_x without x)
            arrays[name] = empty_like_array(arrays[self.inputs[0]] if self.inputs else None, shape, dtype)
            metas[name] = (dtype, shape, metas[self.inputs[0]][2] if self.inputs else "cpu")
        self.launch(arrays, metas, scalars, device, stream)
        written = [arrays[n] for n in self.outputs if n in arrays] or [arrays[n] for n in self.in_place]
        return written[0] if len(written) == 1 else tuple(written)

    def _parse(self, args: tuple, kwargs: dict) -> tuple:
        """(arrays by name, scalars, out, device, stream) of a call, checked as Python checks a signature (bind() is
        4x slower)."""
        if len(args) > len(self.inputs):
            raise TypeError(f"{self.name}() takes {len(self.inputs)} positional arguments but {len(args)} were given")
        arrays = dict(zip(self.inputs, args))
        given_none = [n for n, a in arrays.items() if a is None]
        if given_none:
            raise TypeError(f"{self.name}() argument '{given_none[0]}' is required: an array, not None")
        scalars = {}
        out = device = stream = None
        for key, value in kwargs.items():
            kind = self._keywords.get(key)
            if kind is None:
                raise TypeError(f"{self.name}() got an unexpected keyword argument '{key}'")
            if kind == "tensor":
                if key in arrays:
                    raise TypeError(f"{self.name}() got multiple values for argument '{key}'")
                if value is not None:
                    arrays[key] = value
            elif kind == "scalar":
                scalars[key] = value
            elif key == "out":
                out = value
            elif key == "device":
                device = value
            else:
                stream = value
        if len(args) < len(self.inputs):
            missing = [n for n in self.inputs if n not in arrays]
            if missing:
                raise TypeError(f"{self.name}() missing required arguments: {', '.join(missing)}")
        return arrays, scalars, out, device, stream

    def missing_outputs(self, metas: dict, scalars: dict) -> list:
        """(name, dtype, shape) of each output not given for arrays of these (dtype, shape, device)s (shape None:
        absent for these inputs): what the op's shape rules say, an output that takes an input's dtype in that
        input's (moe_dispatch's in ids'), remembered per dtypes, shapes and scalars."""
        dtype = next((metas[n][0] for n in self.inputs if metas[n][0] in _FLOAT), self.info["dtypes"][0])
        try:
            key = (tuple([m[0] for m in metas.values()]), tuple(metas), tuple([m[1] for m in metas.values()]),
                   tuple(scalars.items()))
            hit = self._allocations.get(key)
        except TypeError:  # an unhashable scalar: the op will say what is wrong with it
            key, hit = None, None
        if hit is None:
            shapes = {n: m[1] for n, m in metas.items()}
            follows = self.info["dtype_of"]
            hit = [(name, metas[follows[name]][0] if follows.get(name) in metas else d, shape)
                   for name, d, shape in _C.tensor_specs(self.name, dtype, shapes, scalars)
                   if name not in metas and name in self.outputs and name not in self.optional]
            if key is not None and len(self._allocations) < 1024:
                self._allocations[key] = hit
        return hit

    def launch(self, arrays: dict, metas: dict, scalars: dict, device: str | None, stream: int | None) -> None:
        """One launch of the op on these arrays (by tensor name; metas: their array_meta)."""
        if device is None:
            device = launch_device(metas)
        self.launch_on(arrays, scalars, device, stream)

    def launch_on(self, arrays: dict, scalars: dict, device: str | None, stream: int | None = None) -> None:
        """One launch on `device` (None: default_device()), the arrays checked already (array_meta)."""
        tensors = [arrays.get(n) for n in self.tensor_names]
        if stream is None:
            stream = _stream_of(tensors)
        runtime(device).launch(self.name, [_raw(t) for t in tensors], scalars, stream)

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
