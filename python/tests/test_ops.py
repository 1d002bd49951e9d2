"""Every op through mojo_jit.ops on numpy arrays, against the op's float64 C++ reference (mojo_jit._check), at small
shapes like CheckOp's: the Python plumbing (argument order, scalars, outputs allocated, in-place tensors written back)
checked end to end."""
import numpy as np
import pytest

import mojo_jit
from mojo_jit import _C, _check

NUMPY = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "u8": np.uint8}

# (op, dtype, shapes, scalars): every op, f32 where it has it (numpy has no bf16).
CASES = [
    ("rms_norm", "f32", {"x": (17, 896)}, {}),
    ("add_rms_norm", "f32", {"x": (17, 896)}, {"eps": 1e-5}),
    ("rms_norm_backward", "f32", {"x": (17, 896), "grad_residual": (17, 896)}, {}),
    ("layer_norm", "f32", {"x": (17, 640), "mean": (17,), "rstd": (17,)}, {}),
    ("layer_norm_backward", "f32", {"x": (17, 896)}, {}),
    ("softmax", "f32", {"x": (5, 896)}, {}),
    ("log_softmax", "f32", {"x": (5, 1000)}, {}),
    ("softmax_backward", "f32", {"out": (5, 896)}, {}),
    ("silu", "f32", {"x": (17, 896)}, {}),
    ("gelu", "f32", {"x": (17, 640)}, {"approximate": 1}),
    ("swiglu", "f32", {"x": (17, 1792)}, {}),
    ("gelu_and_mul", "f32", {"x": (3, 1024)}, {}),
    ("rotary_embedding", "f32", {"q": (17, 4, 128), "k": (17, 2, 128), "cos_sin_cache": (100, 128)}, {}),
    ("embedding", "f32", {"ids": (33,), "weight": (100, 896)}, {}),
    ("store_kv_cache", "f32", {"k_cache": (20, 16, 2, 128), "k": (17, 2, 128)}, {}),
    ("gemm", "f32", {"a": (100, 200), "b": (40, 200), "c": (100, 40)}, {"trans_b": 1, "beta": 0.5}),
    ("gemm_batched", "f32", {"a": (3, 72, 17), "b": (3, 72, 136), "c": (3, 17, 136)}, {"trans_a": 1}),
    ("linear", "f32", {"x": (17, 200), "weight": (136, 200), "bias": (136,)}, {"activation": 3}),
    ("group_gemm", "f32", {"x": (100, 72), "weight": (4, 136, 72), "offsets": (5,)}, {}),
    ("group_gemm_weight_grad", "f32", {"grad_out": (100, 136), "x": (100, 72), "offsets": (9,)}, {}),
    ("sdpa", "f16", {"q": (40, 4, 64), "k": (40, 2, 64)}, {}),
    ("sdpa_backward", "f16", {"q": (40, 4, 64), "k": (40, 2, 64), "cu_seqlens_q": (3,)}, {}),
    ("paged_prefill_gqa", "f16",
     {"q": (40, 8, 64), "k_cache": (40, 8, 1, 64), "cu_seqlens_q": (3,), "block_tables": (2, 16)}, {}),
    ("paged_decode_gqa", "f16", {"q": (2, 4, 128), "k_cache": (40, 16, 1, 128), "block_tables": (2, 20)}, {}),
    ("apply_penalties_temperature", "f32", {"logits": (17, 1000), "token_ids": (17, 40)}, {}),
    ("sample", "f32", {"logits": (17, 1000)}, {}),
    ("reject_sample", "f32", {"target_probs": (9, 4, 1000)}, {}),
    ("moe_gate", "f32", {"logits": (17, 128), "ids": (17, 8)}, {}),
    ("moe_dispatch", "f32", {"expert_offsets": (9,), "ids": (100, 2), "x": (100, 72)}, {}),
    ("moe_combine", "f32", {"expert_out": (800, 72), "positions": (100, 8)}, {}),
    ("moe_mlp", "f32", {"x": (33, 72), "ids": (33, 2), "w13": (4, 80, 72)}, {}),
    ("linear_cross_entropy", "f32", {"hidden": (17, 72), "weight": (300, 72)}, {}),
    ("linear_cross_entropy_backward", "f32", {"hidden": (17, 72), "weight": (300, 72)}, {"vocab_chunk": 128}),
]


def test_every_op_has_a_case():
    assert [c[0] for c in CASES] == mojo_jit.op_names()


def _inputs(op, dtype, shapes, scalars):
    """(name, array or None) for every tensor: the op's random inputs, None for what it only writes and for absent
    optional tensors."""
    specs = _C.tensor_specs(op, dtype, shapes, scalars)
    data = _check.random_inputs(op, dtype, shapes, scalars, seed=7)
    out = []
    for (name, tdtype, shape), raw in zip(specs, data):
        out.append((name, None if raw is None else np.frombuffer(raw, NUMPY[tdtype]).reshape(shape).copy(), shape,
                    tdtype))
    return out


@pytest.mark.parametrize("op,dtype,shapes,scalars", CASES, ids=[c[0] for c in CASES])
def test_op_matches_its_reference(op, dtype, shapes, scalars):
    f = mojo_jit.ops.get(op)
    tensors = _inputs(op, dtype, shapes, scalars)
    args, kwargs = [], dict(scalars)
    for name, array, shape, tdtype in tensors:
        if name in f.inputs:
            args.append(array.copy())
        elif array is not None:
            kwargs[name] = array.copy()  # an optional input
        elif shape is not None and (name in f.optional or name in shapes):
            kwargs[name] = np.empty(shape, NUMPY[tdtype])  # an optional output asked for, or one given
    got = f(*args, **kwargs)
    got = got if isinstance(got, tuple) else (got,)

    # The reference on the same inputs, in the op's tensor order.
    want = {}
    ref_arrays = []
    for name, array, shape, tdtype in tensors:
        ref = array.copy() if array is not None else None if shape is None else np.zeros(shape, NUMPY[tdtype])
        ref_arrays.append(ref)
        want[name] = ref
    _check.reference(op, ref_arrays, scalars)

    written = [n for n, a, s, _ in tensors if n in f.outputs and (s is not None)] or f.in_place
    assert len(got) == len(written), f"{op} returned {len(got)} arrays; it writes {written}"
    for name, array in zip(written, got):
        assert array.shape == want[name].shape and array.dtype == want[name].dtype, name
        rtol, atol = _check.tolerance(op, dtype, shapes, scalars, name)
        wrong, report = _check.mismatches(np.ascontiguousarray(array), want[name], rtol, atol)
        assert wrong == 0, f"{op} {name}: {wrong} of {array.size} elements outside rtol {rtol} atol {atol}: {report}"


def test_empty_arrays_run():
    """numpy gives an empty array strides of 0 (torch a null pointer): an empty batch is ordinary input, and what
    an empty sum gives is written (a norm backward's weight gradient, moe_dispatch's offsets)."""
    x = np.zeros((0, 64), np.float32)
    assert x.strides == (0, 0)
    assert mojo_jit.ops.rms_norm(x, np.ones(64, np.float32)).shape == (0, 64)
    grad_x, grad_weight = mojo_jit.ops.rms_norm_backward(x, x, np.ones(64, np.float32))
    assert grad_x.shape == (0, 64) and np.array_equal(grad_weight, np.zeros(64, np.float32))
    offsets = mojo_jit.ops.moe_dispatch(np.zeros((0, 2), np.int64), expert_offsets=np.full(9, -5, np.int64))
    offsets = offsets[0] if isinstance(offsets, tuple) else offsets
    assert np.array_equal(offsets, np.zeros(9, np.int64))


def test_none_or_a_scalar_for_a_required_array_says_so():
    with pytest.raises(TypeError, match="rms_norm\\(\\) argument 'x' is required: an array, not None"):
        mojo_jit.ops.rms_norm(None, np.ones(8, np.float32))
    with pytest.raises(mojo_jit.ShapeError, match="silu: x has no dims \\(a scalar\\); it needs at least one"):
        mojo_jit.ops.silu(np.array(1.0, np.float32))
