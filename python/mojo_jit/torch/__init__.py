"""Every mojo-jit op as a torch op, `torch.ops.mojo_jit.<op>`, and as a function here with a backend switch.

    import mojo_jit.torch as mt
    y = mt.rms_norm(x, w, eps=1e-6)                     # the kernel (or the golden function: MOJO_JIT_BACKEND)
    y = torch.ops.mojo_jit.rms_norm(x, w, eps=1e-6)     # the registered op: torch.compile keeps it as one node

Each op is registered once with a schema and a fake kernel (the outputs' shapes and dtypes, from the op's own shape
rules), so torch.compile(fullgraph=True) traces through it. In the schema the tensors the op reads come first, in the
op's order; tensors it updates in place (add_rms_norm's residual, store_kv_cache's caches, gemm's c) are declared
mutated; outputs whose shape the inputs do not give (moe_gate's ids and weights) and optional outputs (layer_norm's
mean and rstd, attention's lse) are mutated arguments too; the others are returned. Scalars are floats.

Autograd, through mt.<op>: rms_norm, add_rms_norm, layer_norm, softmax, sdpa (its lse and sinks too) and
linear_cross_entropy (its loss and its lse) differentiate through their backward kernels (rms_norm_backward,
layer_norm_backward, softmax_backward, sdpa_backward, linear_cross_entropy_backward), rotary_embedding through itself
(the inverse rotation), linear through gemm, and log_softmax and the activations (silu, gelu, swiglu, gelu_and_mul)
through torch operations on what they saved, eager and under torch.compile. Any other op, in a call that updates no
tensor it is given, runs its kernel forward and differentiates through its golden function, run again in the backward
(exact, at that function's speed: a warning says so once an op; under torch.compile, and where that function's graph
does not reach an input, backward raises instead). The registered ops (torch.ops.mojo_jit.<op>) have no autograd
formula, which would cost every call through the dispatcher: torch warns at backward there, as for the other calls
that update a tensor through mt.<op>.

The functions here (mt.rms_norm, ...) take the eager fast path outside torch.compile (the op's call in C++, no
dispatcher: a repeat of a call's dtypes, shapes and scalars reads the tensors, allocates the outputs and launches) and
the registered op inside it, and choose a backend (`backend=` per call, else $MOJO_JIT_BACKEND):
  auto   the kernel; where it cannot run (no GPU for CPU tensors, a dtype, arch or compile error) the golden function,
         with one warning per op and reason;
  mojo   the kernel, or the error;
  torch  the golden function (mojo_jit.torch.golden), always.
"""
from __future__ import annotations

import math
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
# What _C.TorchEager takes of torch (the module never imports it).
_TORCH = {"Tensor": torch.Tensor, "strided": torch.strided, "dtypes": _DTYPE_NAMES,
          "current_stream": torch._C._cuda_getCurrentRawStream, "grad_enabled": torch.is_grad_enabled}


class _Op:
    """One op's torch face: its schema, fake kernel and eager implementation."""

    def __init__(self, f: _ops.OpFunction):
        self.f = f
        self.name = f.name
        # Outputs the caller gives: optional ones, and those whose shapes the inputs do not determine.
        self.given = [n for n in f.outputs if n in f.optional or n in f.shape_needed]
        self.returned = [n for n in f.outputs if n not in self.given]
        self.args = f.inputs + [n for n in f.tensor_names if n not in f.inputs and n not in self.returned]
        # The eager call, in C++: a repeat of a call's dtypes, shapes, devices and scalars reads the tensors,
        # allocates the outputs and launches, with no Python between.
        self.eager = _C.TorchEager(self.name, self.args, len(f.inputs), self.returned, self.plan, _runtime.runtime,
                                   _TORCH)

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

    def _output_specs(self, metas: dict, scalars: dict) -> list:
        """(name, torch dtype, shape; None where absent) of each returned output, in the schema's order."""
        return [(n, _TORCH_DTYPES[d], s) for n, d, s in self.f.missing_outputs(metas, scalars) if n in self.returned]

    def fake(self, *args: Any, **kwargs: Any) -> Any:
        """The returned outputs, empty, as the eager call allocates them (one absent for these inputs, moe_dispatch's
        sorted_x without x, empty)."""
        tensors, scalars = self.split(args, kwargs)
        # From the tensors' metadata only: under torch.compile they are fake, with no memory to look at, and their
        # sizes may be symbolic (int() specialises them).
        metas = {n: (_DTYPE_NAMES.get(t.dtype), tuple(int(d) for d in t.shape), "cpu") for n, t in tensors.items()}
        like = tensors[self.f.inputs[0]]
        return _as_returned([like.new_empty(shape or (0,), dtype=dtype)
                             for _, dtype, shape in self._output_specs(metas, scalars)])

    def plan(self, tensors: dict, scalars: dict) -> tuple[list, Any]:
        """What the eager call (_C.TorchEager) needs for the first call of a signature: the returned outputs' specs,
        and the runtime that launches (None: the default device's, asked each call). Raises what is wrong with the
        tensors."""
        metas = {n: _ops.array_meta(t, n) for n, t in tensors.items()}
        device = _ops.launch_device(metas)
        return self._output_specs(metas, scalars), None if device is None else _runtime.runtime(device)


def _as_returned(out: list) -> Any:
    """A schema's return: None, one tensor or a tuple."""
    return None if not out else out[0] if len(out) == 1 else tuple(out)


_lib = torch.library.Library("mojo_jit", "DEF")
_registered: dict[str, _Op] = {}
for _f in _ops._functions.values():
    _op = _registered[_f.name] = _Op(_f)
    _lib.define(_op.schema())
    _lib.impl(_f.name, _op.eager.call, "CPU")
    _lib.impl(_f.name, _op.eager.call, "CUDA")
    torch.library.register_fake(f"mojo_jit::{_f.name}", _op.fake, lib=_lib)


def schema(op: str) -> str:
    """The schema op `op` is registered with."""
    return _registered[op].schema()


# ---- autograd ----------------------------------------------------------------------------------------------------
# mt.<op> records its call where grad mode is on and an input requires grad: the ops with a backward kernel
# (rms_norm and add_rms_norm, layer_norm, softmax, sdpa, linear_cross_entropy) through an autograd.Function whose
# backward calls it (linear's: gemm; log_softmax's and the activations': torch operations; rotary's: itself); any
# other op, in a call that updates no tensor it is given, through one whose backward is its golden function's. Each
# runs its kernel through the registered op (traceable: torch.compile records it). The registered ops themselves have no
# autograd formula: one in Python costs every call through the dispatcher about 2 us (torch.ops.mojo_jit.rms_norm
# 5.6 -> 8.1 us on the development machine), grad or not.
class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return torch.ops.mojo_jit.rms_norm(x, weight, eps=eps)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        # A gradient may come with any strides (and x with strided rows): the backward kernel takes contiguous ones.
        grad_x, grad_weight = torch.ops.mojo_jit.rms_norm_backward(grad_out.contiguous(), x.contiguous(), weight,
                                                                   eps=ctx.eps)
        return grad_x, grad_weight, None


class _AddRmsNorm(torch.autograd.Function):
    """add_rms_norm: the sum residual + x (on a copy, which the caller copies into residual: see _updated) and
    out = rms_norm(sum). The backward kernel adds the updated residual's own gradient (from the layers after) and
    gives the gradient of both x and the old residual."""

    @staticmethod
    def forward(ctx, residual, x, weight, eps):
        summed = residual.clone()
        out = torch.ops.mojo_jit.add_rms_norm(summed, x, weight, eps=eps)
        ctx.save_for_backward(summed, weight)
        ctx.eps = eps
        return out, summed

    @staticmethod
    def backward(ctx, grad_out, grad_residual):
        summed, weight = ctx.saved_tensors
        grad_sum, grad_weight = torch.ops.mojo_jit.rms_norm_backward(
            grad_out.contiguous(), summed.contiguous(), weight,
            None if grad_residual is None else grad_residual.contiguous(), eps=ctx.eps)
        return grad_sum, grad_sum, grad_weight, None


class _LayerNorm(torch.autograd.Function):
    """layer_norm with its mean and rstd, which the op writes only when given, kept for layer_norm_backward (and
    returned, not differentiable)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        mean = x.new_empty(rows, dtype=torch.float32)
        rstd = torch.empty_like(mean)
        out = torch.ops.mojo_jit.layer_norm(x, weight, bias, mean, rstd, eps=eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.mark_non_differentiable(mean, rstd)
        return out, mean, rstd

    @staticmethod
    def backward(ctx, grad_out, grad_mean, grad_rstd):
        x, weight, mean, rstd = ctx.saved_tensors
        grad_x, grad_weight, grad_bias = torch.ops.mojo_jit.layer_norm_backward(grad_out.contiguous(), x.contiguous(),
                                                                                weight, mean, rstd)
        return grad_x, grad_weight, grad_bias, None


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cooperative):
        out = torch.ops.mojo_jit.softmax(x, cooperative=cooperative)
        ctx.save_for_backward(out)
        ctx.cooperative = cooperative
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (out,) = ctx.saved_tensors
        return torch.ops.mojo_jit.softmax_backward(grad_out.contiguous(), out, cooperative=ctx.cooperative), None


class _LogSoftmax(torch.autograd.Function):
    """log_softmax, whose backward has no kernel of its own: grad_x = grad_out - softmax * sum(grad_out), in torch
    (f32 inside), from the saved output."""

    @staticmethod
    def forward(ctx, x, cooperative):
        out = torch.ops.mojo_jit.log_softmax(x, cooperative=cooperative)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (out,) = ctx.saved_tensors
        g = grad_out.float()
        return (g - out.float().exp() * g.sum(-1, keepdim=True)).to(out.dtype), None


class _CrossEntropy(torch.autograd.Function):
    """The fused loss, and its lse: linear_cross_entropy_backward differentiates both (grad_lse: None where the lse
    was not used; torch.compile passes zeros, which add nothing)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, scalars):
        loss, lse = torch.ops.mojo_jit.linear_cross_entropy(hidden, weight, labels, **scalars)
        ctx.save_for_backward(hidden, weight, labels, lse)
        ctx.scalars = scalars
        return loss, lse

    @staticmethod
    def backward(ctx, grad_loss, grad_lse):
        hidden, weight, labels, lse = ctx.saved_tensors
        grad_hidden, grad_weight = torch.ops.mojo_jit.linear_cross_entropy_backward(
            grad_loss.contiguous(), hidden, weight, labels, lse,
            None if grad_lse is None else grad_lse.float().contiguous(), **ctx.scalars)
        return grad_hidden, grad_weight, None, None


def _activation_slope(z: torch.Tensor, activation: int) -> torch.Tensor:
    """d act(z) / dz for the activation codes of linear and the gated ops (golden._act's: 1 gelu, 2 gelu with tanh,
    3 silu; 0 none)."""
    if activation == 1:
        return 0.5 * (1 + torch.erf(z * math.sqrt(0.5))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    if activation == 2:
        c = math.sqrt(2 / math.pi)
        t = torch.tanh(c * (z + 0.044715 * z * z * z))
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z)
    if activation == 3:
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    return torch.ones_like(z)


class _Linear(torch.autograd.Function):
    """linear: the gradients of x and weight are two gemm launches (grad_out weight, and grad_out^T x through
    trans_a), bias's a sum over the rows, residual's grad_out itself; through an activation, its slope at the
    pre-activation, which the backward computes again (one more linear launch) rather than keeping it."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, scalars):
        ctx.save_for_backward(x, weight, bias)
        ctx.scalars = scalars
        return torch.ops.mojo_jit.linear(x, weight, bias, residual, **scalars)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, bias = ctx.saved_tensors
        activation, tf32 = int(ctx.scalars.get("activation", 0)), ctx.scalars.get("tf32", 0)
        n, k = weight.shape
        g = grad_out.reshape(-1, n)
        if activation:
            z = torch.ops.mojo_jit.linear(x, weight, bias, tf32=tf32).reshape(-1, n).float()
            g = (g.float() * _activation_slope(z, activation)).to(x.dtype)
        g = g.contiguous()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = g.new_empty(g.shape[0], k)
            torch.ops.mojo_jit.gemm(grad_x, g, weight.contiguous(), tf32=tf32)  # [M, N] x [N, K]
            grad_x = grad_x.reshape(x.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = g.new_empty(n, k)
            torch.ops.mojo_jit.gemm(grad_weight, g, x.reshape(-1, k).contiguous(), trans_a=1, tf32=tf32)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = g.float().sum(0).to(bias.dtype)
        grad_residual = grad_out if ctx.needs_input_grad[3] else None
        return grad_x, grad_weight, grad_bias, grad_residual, None


class _Gemm(torch.autograd.Function):
    """gemm and gemm_batched, c = alpha op(a) op(b) + beta c, on a copy of c (which the caller copies into c: see
    _updated): each input's gradient is one more launch of the same op, its operands in the layouts that give it
    as a and b are stored (op(x) = x^T where x is stored transposed); the old c's is beta times c's. A gradient in
    f32 (c may be f32 for 16-bit a and b) is rounded to a's dtype first, which the products take."""

    @staticmethod
    def forward(ctx, c, a, b, name, scalars):
        updated = c.clone(memory_format=torch.contiguous_format)
        getattr(torch.ops.mojo_jit, name)(updated, a, b, **scalars)
        ctx.save_for_backward(a, b)
        ctx.name, ctx.scalars = name, scalars
        return updated

    @staticmethod
    def backward(ctx, grad_c):
        a, b = ctx.saved_tensors
        s = ctx.scalars
        alpha, beta = s.get("alpha", 1.0), s.get("beta", 0.0)
        ta, tb = int(s.get("trans_a", 0)), int(s.get("trans_b", 0))
        product = getattr(torch.ops.mojo_jit, ctx.name)
        common = {n: v for n, v in s.items() if n in ("tf32", "path")}
        g = grad_c.to(a.dtype).contiguous()
        grad_in = grad_a = grad_b = None
        if ctx.needs_input_grad[0] and beta != 0:
            grad_in = grad_c * beta
        if ctx.needs_input_grad[1]:  # dA = alpha dC op(b)^T, stored as a is
            grad_a = torch.empty_like(a, memory_format=torch.contiguous_format)
            if ta:
                product(grad_a, b, g, alpha=alpha, trans_a=tb, trans_b=1, **common)
            else:
                product(grad_a, g, b, alpha=alpha, trans_b=1 - tb, **common)
        if ctx.needs_input_grad[2]:  # dB = alpha op(a)^T dC, stored as b is
            grad_b = torch.empty_like(b, memory_format=torch.contiguous_format)
            if tb:
                product(grad_b, g, a, alpha=alpha, trans_a=1, trans_b=ta, **common)
            else:
                product(grad_b, a, g, alpha=alpha, trans_a=1 - ta, **common)
        return grad_in, grad_a, grad_b, None, None


def _act_and_mul_grads(gate: torch.Tensor, up: torch.Tensor, grad: torch.Tensor, code: int) -> tuple:
    """The gradients of act(gate) up at gate and at up, for its output's gradient (f32)."""
    return grad * up * _activation_slope(gate, code), grad * golden._act(gate, code)


def _gated_grad(h: torch.Tensor, grad: torch.Tensor, code: int) -> torch.Tensor:
    """The gradient of act(gate) up at the pre-activation h (gate_j, up_j interleaved along its rows, as the gated
    products' weights), from the gradient of its output; f32 inside, h's dtype out."""
    hf = h.float()
    return torch.stack(_act_and_mul_grads(hf[:, 0::2], hf[:, 1::2], grad.float(), code), dim=-1).flatten(1) \
        .to(h.dtype)


def _experts_backward(x, weight, offsets, g, scalars, wants_x: bool, wants_weight: bool, weight_kn: int = 0):
    """The gradients of group_gemm(x, weight, offsets, weight_kn) (ungated) for its output's gradient g, through
    kernels: x's one more group_gemm over the same weights read in the other layout (no transposed copy), rows in no
    group (before the first group's, after the last's) none; weight's one group_gemm_weight_grad launch (g^T x over
    each group's rows, or x^T g for [groups, K, N] weights). The offsets stay on the device: no host
    synchronisation, and torch.compile traces it whole."""
    x, g = x.contiguous(), g.contiguous()
    grad_x = grad_weight = None
    if wants_x:
        every = torch.ops.mojo_jit.group_gemm(g, weight, offsets, weight_kn=1 - weight_kn, **scalars)
        rows = torch.arange(x.shape[0], device=x.device)
        grouped = (rows >= offsets[0]) & (rows < offsets[-1])  # the rows group_gemm wrote
        grad_x = torch.where(grouped.unsqueeze(-1), every, 0.0)
    if wants_weight:
        pair = (x, g) if weight_kn else (g, x)
        grad_weight = torch.ops.mojo_jit.group_gemm_weight_grad(*pair, offsets, **scalars)
    return grad_x, grad_weight


class _GroupGemm(torch.autograd.Function):
    """group_gemm, the MoE experts' products, through _experts_backward; gated (out = act(gate) up), the pre-activation
    computed again (one ungated launch) and the act-and-mul's gradient taken in torch. Eager and compiled."""

    @staticmethod
    def forward(ctx, x, weight, offsets, scalars):
        ctx.save_for_backward(x, weight, offsets)
        ctx.scalars = scalars
        return torch.ops.mojo_jit.group_gemm(x, weight, offsets, **scalars)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, offsets = ctx.saved_tensors
        gated, kn = int(ctx.scalars.get("gated_activation", 0)), int(ctx.scalars.get("weight_kn", 0))
        common = {n: v for n, v in ctx.scalars.items() if n in ("tf32", "path")}
        g = grad_out
        if gated:
            g = _gated_grad(torch.ops.mojo_jit.group_gemm(x, weight, offsets, weight_kn=kn, **common), grad_out, gated)
        return (*_experts_backward(x, weight, offsets, g, common, *ctx.needs_input_grad[:2], kn), None, None)


class _MoeDispatch(torch.autograd.Function):
    """moe_dispatch with x: sorted_x, x's rows gathered in expert order, is differentiable; x's gradient is the sum
    of its rows' gradients over its slots, by moe_combine (in slot order: the same bits every run). The offsets
    are written to a buffer of the Function's own, which the caller copies into its expert_offsets (_updated)."""

    @staticmethod
    def forward(ctx, ids, expert_offsets, x):
        offsets = torch.empty_like(expert_offsets)
        token_of_row, positions, sorted_x = torch.ops.mojo_jit.moe_dispatch(ids, offsets, x)
        ctx.save_for_backward(positions)
        ctx.mark_non_differentiable(token_of_row, positions, offsets)
        return token_of_row, positions, sorted_x, offsets

    @staticmethod
    def backward(ctx, grad_tokens, grad_positions, grad_sorted_x, grad_offsets):
        (positions,) = ctx.saved_tensors
        ones = positions.new_ones(positions.shape, dtype=torch.float32)
        return None, None, torch.ops.mojo_jit.moe_combine(grad_sorted_x.contiguous(), positions, ones)


class _MoeMlp(torch.autograd.Function):
    """moe_mlp, the routed MLP, through kernels: the pairs sorted and the tokens gathered again (moe_dispatch), the
    experts' pre-activation computed again (a group_gemm launch; act(gate) up from it in torch), then each product's
    gradients by _experts_backward, and x's summed over its slots by moe_combine (in slot order: the same bits every
    run). The routing weights' gradient needs no second forward product: a row's y . g, y = act w2^T, is
    act . (g w2), and g w2 is the down product's input gradient before its routing weight scales it. So the
    backward's products are 2.5 times the forward's: the up product again, and two a product for its gradients.
    Nothing is read on the host: eager and compiled."""

    @staticmethod
    def forward(ctx, x, ids, weights, w13, w2, scalars):
        ctx.save_for_backward(x, ids, weights, w13, w2)
        ctx.scalars = scalars
        return torch.ops.mojo_jit.moe_mlp(x, ids, weights, w13, w2, **scalars)

    @staticmethod
    def backward(ctx, grad_out):
        x, ids, weights, w13, w2 = ctx.saved_tensors
        code, common = int(ctx.scalars.get("activation", 3)), {"path": ctx.scalars.get("path", 0)}
        x = x.contiguous()
        offsets = ids.new_empty(w13.shape[0] + 1)
        token_of_row, positions, xs = torch.ops.mojo_jit.moe_dispatch(ids, offsets, x)
        h = torch.ops.mojo_jit.group_gemm(xs, w13, offsets, **common)
        gate, up = h[:, 0::2].float(), h[:, 1::2].float()
        act = (golden._act(gate, code) * up).to(x.dtype)
        routed = positions >= 0
        # Each sorted row's routing weight, 0 past the routed rows (a slot routed nowhere writes the spare last one).
        row_weight = weights.new_zeros(xs.shape[0] + 1, dtype=torch.float32).scatter_(
            0, torch.where(routed, positions, xs.shape[0]).long().flatten(), weights.float().flatten())[:-1]
        g_rows = grad_out.contiguous()[token_of_row.long().clamp(min=0)]
        want_x, want_w13, want_w2 = ctx.needs_input_grad[0], ctx.needs_input_grad[3], ctx.needs_input_grad[4]
        want_weights = ctx.needs_input_grad[2]
        grad_x = grad_weights = grad_w13 = grad_w2 = None
        if want_x or want_w13 or want_weights:
            g_act, _ = _experts_backward(act, w2, offsets, g_rows, common, True, False)  # g w2, a row
            g_act = g_act.float()
            if want_weights:
                per_row = (act.float() * g_act).sum(-1)
                grad_weights = torch.where(routed, per_row[positions.long().clamp(min=0)], 0.0).to(weights.dtype)
            if want_x or want_w13:
                dh = _gated_grad(h, g_act * row_weight.unsqueeze(-1), code)
                d_xs, grad_w13 = _experts_backward(xs, w13, offsets, dh, common, want_x, want_w13)
                if want_x:
                    grad_x = torch.ops.mojo_jit.moe_combine(d_xs, positions, torch.ones_like(weights))
        if want_w2:
            dy = (g_rows.float() * row_weight.unsqueeze(-1)).to(x.dtype)
            _, grad_w2 = _experts_backward(act, w2, offsets, dy, common, False, True)
        return grad_x, None, grad_weights, grad_w13, grad_w2, None


class _Activation(torch.autograd.Function):
    """silu and gelu, and the gated swiglu and gelu_and_mul (x = [gate, up] along the last dim, out = act(gate) up):
    their backward is elementwise, in torch (f32 inside), from the saved input."""

    @staticmethod
    def forward(ctx, x, op, scalars):
        ctx.save_for_backward(x)
        ctx.code = 3 if op in ("silu", "swiglu") else 2 if scalars.get("approximate", 0) else 1
        ctx.gated = op in ("swiglu", "gelu_and_mul")
        return getattr(torch.ops.mojo_jit, op)(x, **scalars)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        g, xf = grad_out.float(), x.float()
        if not ctx.gated:
            return (g * _activation_slope(xf, ctx.code)).to(x.dtype), None, None
        return torch.cat(_act_and_mul_grads(*xf.chunk(2, dim=-1), g, ctx.code), dim=-1).to(x.dtype), None, None


class _Rotary(torch.autograd.Function):
    """rotary_embedding of one tensor (q or k) on a copy, which the caller copies into it (see _updated), the other
    given as none of its heads. A rotation's gradient is the inverse rotation: the same kernel on a copy of the
    gradient, with the cache's sin negated (positions out of range leave both alone)."""

    @staticmethod
    def forward(ctx, t, positions, cos_sin_cache, neox):
        rotated = t.clone()
        torch.ops.mojo_jit.rotary_embedding(rotated, _no_heads(rotated), positions, cos_sin_cache, neox=neox)
        ctx.save_for_backward(positions, cos_sin_cache)
        ctx.neox = neox
        return rotated

    @staticmethod
    def backward(ctx, grad):
        positions, cache = ctx.saved_tensors
        if ctx.needs_input_grad[2]:
            raise NotImplementedError("mojo_jit rotary_embedding has no gradient for cos_sin_cache: detach it, or "
                                      "call with backend=\"torch\" (its golden function, differentiable)")
        half = cache.shape[1] // 2
        inverse = torch.cat([cache[:, :half], -cache[:, half:]], dim=1)
        grad = grad.clone(memory_format=torch.contiguous_format)
        torch.ops.mojo_jit.rotary_embedding(grad, _no_heads(grad), positions, inverse, neox=ctx.neox)
        return grad, None, None, None


def _no_heads(t: torch.Tensor) -> torch.Tensor:
    return t.new_empty(t.shape[0], 0, t.shape[2])


class _Sdpa(torch.autograd.Function):
    """sdpa and its lse through its backward kernel, sdpa_backward, from the forward's out and lse; the sinks'
    gradient too where they require one."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, scalars):
        lse = q.new_empty(q.shape[1], q.shape[0], dtype=torch.float32)
        out = torch.ops.mojo_jit.sdpa(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, lse, **scalars)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, sinks)
        ctx.scalars = {n: v for n, v in scalars.items() if n in ("scale", "window", "softcap", "causal")}
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, cu_q, cu_k, sinks = ctx.saved_tensors
        grad_sinks = torch.empty_like(sinks) if ctx.needs_input_grad[5] else None
        grad_q, grad_k, grad_v = torch.ops.mojo_jit.sdpa_backward(
            grad_out.contiguous(), q, k, v, out, lse, cu_q, cu_k, sinks, grad_sinks,
            None if grad_lse is None else grad_lse.float().contiguous(), **ctx.scalars)
        return grad_q, grad_k, grad_v, None, None, grad_sinks, None


class _ThroughGolden(torch.autograd.Function):
    """An op with no backward of its own: the forward is the kernel, the gradient autograd through the op's golden
    function, run again on the saved inputs (PyTorch; float64 inside where it computes): the definition's exact
    derivative, at the golden function's speed and memory (a warning says so, once an op). Where the golden
    function's graph does not reach an input that wants a gradient (it computes that part outside autograd), and
    under torch.compile, which does not trace it, backward raises, naming the op."""

    @staticmethod
    def forward(ctx, op, scalars, *tensors):
        ctx.op, ctx.scalars = op, scalars
        ctx.save_for_backward(*tensors)
        return getattr(torch.ops.mojo_jit, op.name)(*tensors, **scalars)

    @staticmethod
    def backward(ctx, *grads):
        op, tensors = ctx.op, ctx.saved_tensors
        if _is_compiling():
            raise NotImplementedError(
                f"mojo_jit {op.name} has no backward kernel, and its gradient through its golden function is not "
                f"traced by torch.compile: call it outside the compiled region, or under torch.no_grad()")
        wanted = [i for i, t in enumerate(tensors) if ctx.needs_input_grad[i + 2]]
        leaves = [t.detach().requires_grad_() if i in wanted else t for i, t in enumerate(tensors)]
        named = dict(zip(op.args, leaves))
        with torch.enable_grad():
            out = getattr(golden, op.name)(*(named[n] for n in op.f.inputs),
                                           **{n: named[n] for n in op.args[len(op.f.inputs):]}, **ctx.scalars)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        found = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wanted], [g for _, g in pairs],
                                    allow_unused=True) if pairs else [None] * len(wanted)
        result = [None] * len(tensors)
        for i, g in zip(wanted, found):
            if g is None:
                raise NotImplementedError(
                    f"mojo_jit {op.name} has no backward, and its golden function gives {op.args[i]} no gradient: "
                    f"call it under torch.no_grad() or with {op.args[i]} detached")
            result[i] = g
        if (op.name, "backward") not in _warned:
            _warned.add((op.name, "backward"))
            warnings.warn(f"mojo_jit {op.name} has no backward kernel: its gradient is autograd through its golden "
                          f"function (PyTorch), run again on the saved inputs: exact, and as slow as that function")
        return (None, None, *result)


def _updated(given: torch.Tensor, result: torch.Tensor) -> None:
    """An op that updates a tensor it is given, through autograd: its Function computes the update on a copy, and
    this copies that into the caller's tensor (a view of another included), which autograd records as any copy_.
    A Function that updated its input in place (marked dirty) gave wrong gradients under torch.compile wherever that
    input came into the compiled region from outside (torch 2.11, aot_eager: rotary_embedding's q got grad_out
    itself, gemm's a none)."""
    given.copy_(result)


def _wants_grad(args: tuple, kwargs: dict) -> bool:
    """Whether autograd records this call: grad mode on and a tensor argument requiring grad."""
    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in (*args, *kwargs.values()))


def _recorded(op: _Op, args: tuple, kwargs: dict) -> Any:
    """The call as autograd records it: through the op's Function, or, for a call that updates a tensor it is given,
    the registered op (torch warns at backward there)."""
    tensors, scalars = op.split(args, kwargs)
    s = {**op.f.scalar_defaults, **scalars}
    if op.name == "rms_norm":
        return _RmsNorm.apply(tensors["x"], tensors["weight"], s["eps"])
    if op.name == "add_rms_norm":
        out, summed = _AddRmsNorm.apply(tensors["residual"], tensors["x"], tensors["weight"], s["eps"])
        _updated(tensors["residual"], summed)
        return out
    if op.name == "layer_norm":
        out, mean, rstd = _LayerNorm.apply(tensors["x"], tensors["weight"], tensors["bias"], s["eps"])
        for name, computed in (("mean", mean), ("rstd", rstd)):
            if name in tensors:  # the caller's statistics, written as the op writes them
                tensors[name].copy_(computed.reshape(tensors[name].shape))
        return out
    if op.name == "softmax":
        return _Softmax.apply(tensors["x"], s["cooperative"])
    if op.name == "log_softmax":
        return _LogSoftmax.apply(tensors["x"], s["cooperative"])
    if op.name == "linear_cross_entropy":
        return _CrossEntropy.apply(tensors["hidden"], tensors["weight"], tensors["labels"], scalars)
    if op.name in ("silu", "gelu", "swiglu", "gelu_and_mul"):
        return _Activation.apply(tensors["x"], op.name, scalars)
    if op.name == "group_gemm":
        return _GroupGemm.apply(tensors["x"], tensors["weight"], tensors["offsets"], scalars)
    if op.name == "moe_dispatch" and "x" in tensors:
        token_of_row, positions, sorted_x, offsets = _MoeDispatch.apply(tensors["ids"], tensors["expert_offsets"],
                                                                         tensors["x"])
        _updated(tensors["expert_offsets"], offsets)
        return token_of_row, positions, sorted_x
    if op.name == "moe_mlp":
        return _MoeMlp.apply(tensors["x"], tensors["ids"], tensors["weights"], tensors["w13"], tensors["w2"], scalars)
    if op.name == "linear":
        return _Linear.apply(tensors["x"], tensors["weight"], tensors.get("bias"), tensors.get("residual"), scalars)
    if op.name == "sdpa":
        out, lse = _Sdpa.apply(tensors["q"], tensors["k"], tensors["v"], tensors.get("cu_seqlens_q"),
                               tensors.get("cu_seqlens_k"), tensors.get("sinks"), scalars)
        if "lse" in tensors:  # the caller's, written as the op writes it, and differentiable
            tensors["lse"].copy_(lse)
        return out
    if op.name in ("gemm", "gemm_batched"):  # updates c, returns nothing
        _updated(tensors["c"], _Gemm.apply(tensors["c"], tensors["a"], tensors["b"], op.name, scalars))
        return None
    if op.name == "rotary_embedding":  # updates q and k, returns nothing
        for name in ("q", "k"):
            _updated(tensors[name], _Rotary.apply(tensors[name], tensors["positions"], tensors["cos_sin_cache"],
                                                  s["neox"]))
        return None
    if any(n in op.f.in_place or n in op.given for n in tensors):  # updates a tensor given (sdpa with lse, ...)
        return getattr(torch.ops.mojo_jit, op.name)(*args, **kwargs)
    return _ThroughGolden.apply(op, scalars, *(tensors.get(n) for n in op.args))


# ---- the backend switch ------------------------------------------------------------------------------------------
_warned: set[tuple[str, str]] = set()
# The errors on which auto falls back to the golden function: the kernel cannot run these tensors here.
_FALLBACK_ERRORS = (_C.DTypeError, _C.ArchError, _C.CompileError, _C.NoDeviceError)
_is_compiling = torch.compiler.is_compiling


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
    fast = op.eager.fast

    def call(*args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        if backend is None and not _is_compiling():
            # The kernel, all in C++, where $MOJO_JIT_BACKEND and the tensors let it run; NotImplemented where the
            # lines below decide. An error it raises that auto falls back on is raised again below, or falls back.
            try:
                out = fast(*args, **kwargs)
            except _FALLBACK_ERRORS:
                out = NotImplemented
            if out is not NotImplemented:
                return out
        b = _backend(backend)
        if b == "torch":
            return _fall_back(op, "MOJO_JIT_BACKEND=torch", "torch", args, kwargs, warn=False)
        if b == "auto":
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
            reason = _fallback_reason(tensors)
            if reason is not None:
                return _fall_back(op, reason, "no GPU", args, kwargs, warn=True)
        if _is_compiling():
            return _recorded(op, args, kwargs) if _wants_grad(args, kwargs) else registered(*args, **kwargs)
        try:
            return _recorded(op, args, kwargs) if _wants_grad(args, kwargs) else op.eager.call(*args, **kwargs)
        except _FALLBACK_ERRORS as e:
            if b != "auto":
                raise
            return _fall_back(op, f"{type(e).__name__}: {e}", type(e).__name__, args, kwargs, warn=True)

    call.__name__ = call.__qualname__ = op.name
    call.__doc__ = f"torch.ops.mojo_jit.{op.schema()}\n\n{op.f.__doc__}"
    return call


for _name, _op in _registered.items():
    globals()[_name] = _make_function(_op)

__all__ = list(_registered) + ["golden", "schema"]
