"""mojo_jit.torch where torch is installed (skipped elsewhere, with the reason): the golden functions against the C++
float64 references, every op registered with a schema and a fake kernel, the kernels through the torch op on the CPU
device, torch.compile(fullgraph=True) keeping an op whole, and the backend switch."""
import inspect
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch to run these)")

import mojo_jit  # noqa: E402
import mojo_jit.torch as mt  # noqa: E402
from mojo_jit import _C, _check  # noqa: E402
from mojo_jit.torch import golden  # noqa: E402
from test_ops import CASES, _inputs  # noqa: E402

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32, "i64": torch.int64,
         "u8": torch.uint8}


def _schema_call(op, tensors, scalars):
    """(args, kwargs, returned names, mutated names) calling `op` in its torch schema's form on these arrays."""
    reg = mt._registered[op]
    arrays = {name: (torch.from_numpy(array.copy()) if array is not None else
                     torch.empty(shape, dtype=TORCH[dtype]) if shape is not None else None)
              for name, array, shape, dtype in tensors}
    args = [arrays[n] for n in reg.f.inputs]
    kwargs = {n: arrays[n] for n in reg.args[len(reg.f.inputs):] if arrays.get(n) is not None}
    kwargs.update({n: float(v) for n, v in scalars.items()})
    return args, kwargs, reg.returned, arrays


def _reference(op, tensors, scalars):
    ref = {}
    arrays = []
    for name, array, shape, dtype in tensors:
        a = array.copy() if array is not None else None if shape is None else np.zeros(shape, array_dtype(dtype))
        arrays.append(a)
        ref[name] = a
    _check.reference(op, arrays, scalars)
    return ref


def array_dtype(dtype):
    return {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "u8": np.uint8}[dtype]


def _expect_close(op, dtype, shapes, scalars, name, got, want):
    rtol, atol = _check.tolerance(op, dtype, shapes, scalars, name)
    wrong, report = _check.mismatches(np.ascontiguousarray(got), want, rtol, atol)
    assert wrong == 0, f"{op} {name}: {wrong} of {got.size} outside rtol {rtol} atol {atol}: {report}"


# Every op's case, and the variants whose rules a golden function restates.
GOLDEN_CASES = CASES + [
    ("moe_gate", "f32", {"logits": (17, 256), "ids": (17, 8), "bias": (256,)},
     {"sigmoid": 1, "groups": 8, "top_groups": 4, "routed_scaling": 2.5}),
    ("sample", "f32", {"logits": (3, 4097)}, {}),
    ("rotary_embedding", "f32", {"q": (17, 4, 128), "k": (17, 2, 128), "cos_sin_cache": (100, 64)}, {"neox": 0}),
    ("linear", "f32", {"x": (17, 200), "weight": (136, 200), "residual": (17, 136)}, {"activation": 1}),
    ("group_gemm", "f32", {"x": (100, 72), "weight": (4, 136, 72), "offsets": (5,), "out": (100, 68)},
     {"gated_activation": 3}),
    ("sdpa", "f16", {"q": (40, 4, 64), "k": (40, 2, 64), "sinks": (4,), "lse": (4, 40)}, {"window": 7, "softcap": 3.0}),
    ("linear_cross_entropy", "f32", {"hidden": (17, 72), "weight": (300, 72), "loss": (17,)},
     {"reduction": 0, "label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 3.0}),
    # The backward ops' lse inputs are their forwards' at the case's scalars (random_data sees them), as the golden
    # functions, which recompute the attention or the logits, assume.
    ("sdpa_backward", "f16", {"q": (30, 4, 64), "k": (50, 2, 64), "cu_seqlens_q": (3,), "cu_seqlens_k": (3,),
                              "sinks": (4,), "grad_sinks": (4,), "grad_lse": (4, 30)}, {"softcap": 5.0, "window": 9}),
    ("linear_cross_entropy_backward", "f32", {"hidden": (17, 72), "weight": (300, 72), "grad_lse": (17,)},
     {"z_loss": 1e-3, "label_smoothing": 0.1, "softcap": 3.0}),
]


def test_every_op_has_a_golden_function():
    assert [op for op in mojo_jit.op_names() if not hasattr(golden, op)] == []


def test_every_golden_function_takes_every_scalar_of_its_op():
    """A call the kernel takes falls back to the golden function as it stands (backend torch, or auto where the
    kernel cannot run): softmax's cooperative, gemm's splits and sdpa's key_tile were refused there."""
    missing = {}
    for op in mojo_jit.op_names():
        params = inspect.signature(getattr(golden, op)).parameters
        names = [n for n in mt._registered[op].f.scalar_defaults if n not in params]
        if names:
            missing[op] = names
    assert missing == {}
    x = torch.randn(3, 100)
    torch.testing.assert_close(mt.softmax(x, cooperative=0, backend="torch"), golden.softmax(x))


@pytest.mark.parametrize("op,dtype,shapes,scalars", GOLDEN_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(GOLDEN_CASES)])
def test_golden_matches_the_reference(op, dtype, shapes, scalars):
    tensors = _inputs(op, dtype, shapes, scalars)
    args, kwargs, returned, arrays = _schema_call(op, tensors, scalars)
    result = getattr(golden, op)(*args, **kwargs)
    result = () if result is None else result if isinstance(result, tuple) else (result,)
    assert len(result) == len(returned)
    got = dict(zip(returned, result))
    want = _reference(op, tensors, scalars)
    reg = mt._registered[op]
    for name in set(returned) | set(reg.f.in_place) | {n for n in reg.given if arrays.get(n) is not None}:
        value = got[name] if name in got else arrays[name]
        _expect_close(op, dtype, shapes, scalars, name, value.numpy(), want[name])


def test_every_op_is_registered_with_a_schema():
    for op in mojo_jit.op_names():
        assert hasattr(torch.ops.mojo_jit, op), op
    assert mt.schema("rms_norm") == "rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor"
    assert mt.schema("add_rms_norm").startswith("add_rms_norm(Tensor(a0!) residual, Tensor x, Tensor weight")
    assert "Tensor(a6!)? lse=None" in mt.schema("sdpa")


def test_the_torch_op_runs_the_kernel_and_matches():
    x = torch.randn(17, 896)
    w = torch.randn(896)
    y = torch.ops.mojo_jit.rms_norm(x, w, eps=1e-6)
    torch.testing.assert_close(y, golden.rms_norm(x, w, 1e-6), rtol=1e-5, atol=1e-5)
    residual = torch.randn(17, 896)
    updated = residual + x
    out = torch.ops.mojo_jit.add_rms_norm(residual, x, w)
    torch.testing.assert_close(residual, updated)
    torch.testing.assert_close(out, golden.rms_norm(updated, w), rtol=1e-5, atol=1e-5)


def test_the_eager_path_remembers_a_call_and_nothing_of_its_tensors():
    """A repeat of a call's dtypes, shapes and scalars takes the plan of the first: new outputs each call, the
    new inputs' data; another shape, dtype or scalar works its own plan out, and a bad one is still refused."""
    w = torch.randn(96)
    first, second = torch.randn(3, 96), torch.randn(3, 96)
    y1 = mt.rms_norm(first, w, eps=1e-6, backend="mojo")
    y2 = mt.rms_norm(second, w, eps=1e-6, backend="mojo")
    assert y1.data_ptr() != y2.data_ptr()
    torch.testing.assert_close(y1, golden.rms_norm(first, w, 1e-6), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y2, golden.rms_norm(second, w, 1e-6), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mt.rms_norm(second, w, eps=0.5, backend="mojo"), golden.rms_norm(second, w, 0.5),
                               rtol=1e-5, atol=1e-5)
    wide = torch.randn(5, 96)
    assert mt.rms_norm(wide, w, eps=1e-6, backend="mojo").shape == (5, 96)
    half = second.half()
    torch.testing.assert_close(mt.rms_norm(half, w.half(), eps=1e-6, backend="mojo").float(),
                               golden.rms_norm(half.float(), w.float(), 1e-6), rtol=2e-3, atol=2e-3)
    with pytest.raises(mojo_jit.DTypeError):
        mt.rms_norm(second.double(), w.double(), backend="mojo")


def test_the_fast_path_reads_the_backend_switch_each_call_and_refuses_what_the_schema_does_not_take(monkeypatch):
    """mt.<op>'s eager call in C++: one plan per signature; $MOJO_JIT_BACKEND read at every call, a plan made
    before notwithstanding; outputs of another dtype than the first input's (sample's tokens); arguments checked as
    Python checks a signature."""
    eager = mt._registered["rms_norm"].eager
    x, w = torch.randn(5, 64), torch.randn(64)
    before = eager.plans
    mt.rms_norm(torch.randn(5, 64), w, eps=1e-5)
    torch.testing.assert_close(mt.rms_norm(x, w, eps=1e-5), golden.rms_norm(x, w, 1e-5), rtol=1e-5, atol=1e-5)
    assert eager.plans == before + 1
    monkeypatch.setattr(golden, "rms_norm", lambda *args, **kwargs: "the golden function")
    monkeypatch.setenv("MOJO_JIT_BACKEND", "torch")
    assert mt.rms_norm(x, w, eps=1e-5) == "the golden function"
    monkeypatch.setenv("MOJO_JIT_BACKEND", "mojo")
    assert isinstance(mt.rms_norm(x, w, eps=1e-5), torch.Tensor)
    monkeypatch.delenv("MOJO_JIT_BACKEND")

    logits = torch.randn(3, 100).half()
    offset = torch.zeros(3, dtype=torch.int64)
    tokens, logprobs = mt.sample(logits, torch.zeros(3, dtype=torch.int64), torch.ones(3), torch.zeros(3),
                                 torch.arange(3), offset, backend="mojo")
    assert (tokens.dtype, logprobs.dtype) == (torch.int64, torch.float32)
    assert tokens.shape == (3,) and bool(((tokens >= 0) & (tokens < 100)).all()) and offset.tolist() == [1, 1, 1]
    torch.testing.assert_close(logprobs, torch.log_softmax(logits.float(), -1).gather(1, tokens[:, None])[:, 0],
                               rtol=1e-3, atol=1e-3)

    with pytest.raises(TypeError, match=r"rms_norm\(\) got an unexpected keyword argument 'epsilon'"):
        mt.rms_norm(x, w, epsilon=1e-5)
    with pytest.raises(TypeError, match=r"rms_norm\(\) takes 3 positional arguments but 4 were given"):
        mt.rms_norm(x, w, 1e-5, 2.0)
    with pytest.raises(TypeError, match=r"rms_norm\(\) missing required argument: 'weight'"):
        mt.rms_norm(x)
    with pytest.raises(mojo_jit.InvalidArgumentError, match="tensor x is no strided torch tensor"):
        mt.rms_norm(x.numpy(), w, backend="mojo")
    with pytest.raises(mojo_jit.InvalidArgumentError, match="scalar eps: a str is no number"):
        mt.rms_norm(x, w, eps="small")


@pytest.mark.parametrize("op,dtype,shapes,scalars", GOLDEN_CASES, ids=[c[0] for c in GOLDEN_CASES])
def test_opcheck(op, dtype, shapes, scalars):
    """The schema (what the kernel mutates is declared, nothing else) and the fake kernel (outputs of the kernel's
    shapes, dtypes and strides) of every op and the variants whose scalars change its outputs (a gated group_gemm's
    out was allocated whole), on the kernels (the CPU device here)."""
    args, kwargs, _, _ = _schema_call(op, _inputs(op, dtype, shapes, scalars), scalars)
    torch.library.opcheck(getattr(torch.ops.mojo_jit, op), tuple(args), kwargs,
                          test_utils=("test_schema", "test_faketensor"))


def test_compile_keeps_the_op_whole():
    def step(x, w, residual):
        return torch.ops.mojo_jit.add_rms_norm(residual, x, w) * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x, w, r = torch.randn(4, 128), torch.randn(128), torch.randn(4, 128)
    r_eager = r.clone()
    torch.testing.assert_close(compiled(x, w, r), step(x, w, r_eager), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r, r_eager)


def test_backend_switch(monkeypatch):
    x, w = torch.randn(4, 128), torch.randn(128)
    want = golden.rms_norm(x, w)
    torch.testing.assert_close(mt.rms_norm(x, w, backend="torch"), want, rtol=0, atol=0)
    torch.testing.assert_close(mt.rms_norm(x, w, backend="mojo"), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(mojo_jit.InvalidArgumentError, match="MOJO_JIT_BACKEND=fast"):
        mt.rms_norm(x, w, backend="fast")
    if _C.device_available():
        return
    # auto, no GPU and no MOJO_JIT_DEVICE: the golden function, with one warning per op and reason.
    monkeypatch.delenv("MOJO_JIT_DEVICE")
    mt._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(mt.rms_norm(x, w), want, rtol=0, atol=0)
        mt.rms_norm(x, w)
    assert len(caught) == 1 and "rms_norm runs its golden function (PyTorch): no GPU" in str(caught[0].message)


def _golden_grads(fn, tensors, grad_out, **scalars):
    """The gradients of sum(fn(tensors) * grad_out) by autograd through the golden function, in float64."""
    leaves = [t.detach().double().requires_grad_() if t.is_floating_point() else t for t in tensors]
    out = fn(*leaves, **scalars)
    out = out[0] if isinstance(out, tuple) else out
    (out * grad_out.double()).sum().backward()
    return [t.grad for t in leaves if t.is_floating_point()]


def _expect_grads(got, want, what, rel=1e-4):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g is not None, f"{what}: input {i} got no gradient"
        assert g.dtype != torch.float64 and g.shape == w.shape, f"{what}: input {i}: {g.dtype} {tuple(g.shape)}"
        scale = float(w.abs().max()) or 1.0
        err = float((g.double() - w).abs().max())
        assert err <= rel * scale, f"{what}: input {i}: max error {err} against a largest gradient of {scale}"


# (op, tensors' shapes, scalars): the float inputs require grad; x of the row ops and linear a strided view of rows.
DIFFERENTIABLE = [
    ("rms_norm", [(9, 96), (96,)], {"eps": 1e-5}),
    ("layer_norm", [(9, 96), (96,), (96,)], {"eps": 1e-5}),
    ("softmax", [(9, 96)], {}),
    ("log_softmax", [(9, 96)], {}),
    ("silu", [(9, 96)], {}),
    ("gelu", [(9, 96)], {"approximate": 1}),
    ("swiglu", [(2, 9, 96)], {}),
    ("gelu_and_mul", [(9, 96)], {}),
    ("linear", [(2, 9, 40), (24, 40), (24,)], {}),
    ("linear", [(9, 40), (24, 40), (24,)], {"activation": 1}),
    ("linear", [(9, 40), (24, 40)], {"activation": 2}),
    ("linear", [(9, 40), (24, 40), (24,), (9, 24)], {"activation": 3}),
    ("linear_cross_entropy", [(9, 40), (300, 40)], {}),
    ("linear_cross_entropy", [(9, 40), (300, 40)], {"reduction": 2, "label_smoothing": 0.1, "z_loss": 1e-3}),
    ("linear_cross_entropy", [(9, 40), (300, 40)], {"reduction": 0, "softcap": 5.0}),
]


@pytest.mark.parametrize("op,shapes,scalars", DIFFERENTIABLE, ids=[f"{c[0]}-{i}" for i, c in enumerate(DIFFERENTIABLE)])
def test_the_differentiable_ops_give_the_golden_gradients(op, shapes, scalars):
    """Autograd through the backward kernels (rms_norm_backward, ..., linear's through gemm; torch operations for
    log_softmax and the activations), in f32, against autograd through the golden functions in float64. A loss's
    ignored rows (label -100) give no gradient."""
    gen = torch.Generator().manual_seed(len(op) + len(scalars))
    tensors = [torch.randn(s, generator=gen) for s in shapes]
    if op in ("rms_norm", "layer_norm", "softmax", "log_softmax", "linear"):  # x with strided rows, as they take
        tensors[0] = torch.randn(*shapes[0][:-1], shapes[0][-1] + 8, generator=gen)[..., :shapes[0][-1]]
    leaves = [t.clone().requires_grad_() if t.is_contiguous() else t.requires_grad_() for t in tensors]
    if op == "linear_cross_entropy":
        labels = torch.randint(0, shapes[1][0], (shapes[0][0],), generator=gen)
        labels[3] = -100
        leaves.append(labels)
    out = getattr(mt, op)(*leaves, **scalars)
    out = out[0] if isinstance(out, tuple) else out
    assert out.requires_grad and out.grad_fn is not None
    grad_out = torch.randn(out.shape, generator=gen)
    (out * grad_out).sum().backward()
    want = _golden_grads(getattr(golden, op), leaves, grad_out, **scalars)
    _expect_grads([t.grad for t in leaves if t.is_floating_point()], want, op)
    if op == "linear_cross_entropy":
        assert float(leaves[0].grad[3].abs().max()) == 0.0, "an ignored row's hidden gets no gradient"


def test_a_training_step_of_an_mlp_block_through_the_kernels():
    """A pre-norm MLP block and the fused loss, as a training step runs them: every parameter's and the input's
    gradient through the kernels, in f32, against the same step through the golden functions in float64."""
    gen = torch.Generator().manual_seed(11)
    hidden, inter, vocab, tokens = 64, 96, 200, 12
    shapes = {"h": (tokens, hidden), "norm": (hidden,), "gate_up": (2 * inter, hidden), "down": (hidden, inter),
              "head": (vocab, hidden)}
    init = {n: torch.randn(s, generator=gen) * (0.1 if n in ("gate_up", "down", "head") else 1.0)
            for n, s in shapes.items()}
    labels = torch.randint(0, vocab, (tokens,), generator=gen)

    def step(ops, p):
        x = ops.rms_norm(p["h"], p["norm"], eps=1e-5)
        y = ops.linear(ops.swiglu(ops.linear(x, p["gate_up"])), p["down"], None, p["h"])  # residual: h
        return ops.linear_cross_entropy(y, p["head"], labels, z_loss=1e-4)[0]

    ours = {n: t.clone().requires_grad_() for n, t in init.items()}
    step(mt, ours).sum().backward()
    want = {n: t.double().requires_grad_() for n, t in init.items()}
    step(golden, want).sum().backward()
    _expect_grads([ours[n].grad for n in shapes], [want[n].grad for n in shapes], "the MLP block's step")


def test_add_rms_norm_differentiates_through_its_update():
    """residual += x in place, out = rms_norm(residual): both the output and the updated residual carry gradients (the
    backward kernel adds the residual's own), to x, the old residual and the weight alike."""
    gen = torch.Generator().manual_seed(3)
    x0, r0, w0 = torch.randn(7, 96, generator=gen), torch.randn(7, 96, generator=gen), torch.randn(96, generator=gen)
    g_out, g_res = torch.randn(7, 96, generator=gen), torch.randn(7, 96, generator=gen)
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    r_leaf = r0.clone().requires_grad_()
    residual = r_leaf * 1.0  # an activation (in place on a leaf is refused by torch)
    out = mt.add_rms_norm(residual, x, w, eps=1e-5)
    ((out * g_out).sum() + (residual * g_res).sum()).backward()

    xd, rd, wd = (t.double().requires_grad_() for t in (x0, r0, w0))
    summed = rd + xd
    ((golden.rms_norm(summed, wd, 1e-5) * g_out.double()).sum() + (summed * g_res.double()).sum()).backward()
    _expect_grads([x.grad, r_leaf.grad, w.grad], [xd.grad, rd.grad, wd.grad], "add_rms_norm")
    torch.testing.assert_close(residual.detach(), r0 + x0)


def test_layer_norm_differentiates_with_its_statistics_given_too():
    x, w, b = (torch.randn(6, 64, requires_grad=True), torch.randn(64, requires_grad=True),
               torch.randn(64, requires_grad=True))
    mean, rstd = torch.empty(6), torch.empty(6)
    out = mt.layer_norm(x, w, b, mean=mean, rstd=rstd, eps=1e-5)
    grad_out = torch.randn(6, 64)
    (out * grad_out).sum().backward()
    _expect_grads([x.grad, w.grad, b.grad], _golden_grads(golden.layer_norm, [x, w, b], grad_out, eps=1e-5),
                  "layer_norm with mean and rstd")
    torch.testing.assert_close(mean, x.detach().mean(-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd, torch.rsqrt(x.detach().var(-1, unbiased=False) + 1e-5), rtol=1e-4, atol=1e-4)


def test_autograd_records_only_where_a_gradient_is_wanted():
    """The fast path steps aside for autograd only where grad mode is on and an input requires grad."""
    eager = mt._registered["rms_norm"].eager
    x, w = torch.randn(4, 64), torch.randn(64, requires_grad=True)
    assert eager.fast(x, w) is NotImplemented
    with torch.no_grad():
        assert isinstance(eager.fast(x, w), torch.Tensor)
        assert not mt.rms_norm(x, w).requires_grad
    assert isinstance(eager.fast(x, w.detach()), torch.Tensor)
    y = mt.rms_norm(x, w)
    y.sum().backward()
    assert x.grad is None and w.grad is not None


SDPA_GRADS = [(1, None, {}), (1, [0, 9, 14], {"window": 3, "lse": True}),
              (0, [0, 3, 14], {"softcap": 4.0, "sinks": True, "lse": True}),
              (1, [0, 9, 14], {"sinks": True, "lse": True, "head_dim": 256})]


@pytest.mark.parametrize("causal,cu_k,extra", SDPA_GRADS)
def test_sdpa_differentiates_through_its_backward_kernel(causal, cu_k, extra):
    """sdpa through sdpa_backward: two packed sequences, GQA 4/2, causal masks aligned at the ends (more keys than
    queries: chunked prefill; more queries than keys, the first seeing none), a window, not causal with a soft-cap
    and sinks (their gradient too), a loss that uses the lse the caller asked for, head_dim 256 (grad_k and grad_v a
    kernel each), against autograd through the golden function in float64; and under torch.compile, the same
    gradients."""
    gen = torch.Generator().manual_seed(len(cu_k or []) + causal)
    dim = extra.get("head_dim", 64)
    q = torch.randn(10, 4, dim, generator=gen).half()
    k, v = (torch.randn(cu_k[-1] if cu_k else 10, 2, dim, generator=gen).half() for _ in range(2))
    sinks = torch.randn(4, generator=gen) if extra.get("sinks") else None
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32)
    scalars = {"causal": causal, "scale": 0.2,
               **{n: x for n, x in extra.items() if n not in ("sinks", "lse", "head_dim")}}
    if cu_k is not None:
        scalars["cu_seqlens_k"] = torch.tensor(cu_k, dtype=torch.int32)
    grad_out, grad_lse = torch.randn(10, 4, dim, generator=gen), torch.randn(4, 10, generator=gen)

    def grads(fn, dtype, compiled=False):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        if sinks is not None:
            leaves.append(sinks.detach().to(dtype if dtype == torch.float64 else torch.float32).requires_grad_())
        extra_args = {"sinks": leaves[3]} if sinks is not None else {}

        def loss(*tensors):
            lse = torch.empty(4, 10, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
            given = {"lse": lse} if "lse" in extra else {}
            out = fn(*tensors[:3], cu_seqlens_q=cu_q, **extra_args, **given, **scalars)
            return (out.double() * grad_out).sum() + ((lse.double() * grad_lse).sum() if "lse" in extra else 0)
        (torch.compile(loss, fullgraph=True, backend="aot_eager") if compiled else loss)(*leaves).backward()
        return [t.grad for t in leaves]

    mt._warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not through the golden function (which warns)
        got = grads(mt.sdpa, torch.float16)
        compiled = grads(mt.sdpa, torch.float16, compiled=True)
    _expect_grads(got, grads(golden.sdpa, torch.float64), f"sdpa causal={causal} cu_seqlens_k={cu_k} {extra}", rel=1e-2)
    for g, c in zip(got, compiled):
        torch.testing.assert_close(c, g, rtol=0, atol=0)


@pytest.mark.parametrize("op,ta,tb,beta", [("gemm", 0, 0, 0.0), ("gemm", 1, 0, 0.5), ("gemm", 0, 1, 0.0),
                                           ("gemm_batched", 1, 1, -2.0)])
def test_gemm_differentiates_through_itself(op, ta, tb, beta):
    """gemm and gemm_batched, updating c in place: each input's gradient through one more launch of the op, for every
    layout of a and b, and the old c's (beta times c's), in f32, against autograd of the same product in float64;
    eager and under torch.compile."""
    gen = torch.Generator().manual_seed(31 + ta + 2 * tb)
    m, k, n = 9, 40, 24
    lead = (3,) if op == "gemm_batched" else ()
    a = torch.randn(*lead, *((k, m) if ta else (m, k)), generator=gen)
    b = torch.randn(*lead, *((n, k) if tb else (k, n)), generator=gen)
    c0, grad_out = torch.randn(*lead, m, n, generator=gen), torch.randn(*lead, m, n, generator=gen)
    scalars = {"alpha": 1.5, "beta": beta, "trans_a": ta, "trans_b": tb}

    def grads(fn, dtype=torch.float32):
        leaves = [t.to(dtype).clone().requires_grad_() for t in (c0, a, b)]  # fresh leaves each call
        c = leaves[0].clone()  # not a leaf: updated in place
        fn(c, leaves[1], leaves[2])
        (c * grad_out.to(dtype)).sum().backward()
        return [t.grad for t in leaves]

    def reference(c, a, b):
        c.mul_(beta).add_(1.5 * (a.mT if ta else a) @ (b.mT if tb else b))

    want = grads(reference, torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not torch's fallback warning
        got = grads(lambda c, a, b: getattr(mt, op)(c, a, b, **scalars))
    got_compiled = grads(torch.compile(lambda c, a, b: getattr(mt, op)(c, a, b, **scalars), backend="aot_eager"))
    for g in (got, got_compiled):
        if beta == 0:
            assert g[0] is None or float(g[0].abs().max()) == 0.0, "c's old values are overwritten"
        _expect_grads(g[1:] if beta == 0 else g, want[1:] if beta == 0 else want, f"{op} {ta} {tb} {beta}")


@pytest.mark.parametrize("gated,kn", [(0, 0), (3, 0), (0, 1), (3, 1)])
def test_group_gemm_differentiates_through_the_kernels(gated, kn):
    """group_gemm's gradients through group_gemm and group_gemm_weight_grad launches (no golden function, no
    warning), in f32, against autograd through the golden function in float64: rows before the first group and after
    the last get none, an empty group's weight a zero gradient; gated (silu) through the pre-activation computed
    again; the weights stored [groups, K, N] (weight_kn). Under torch.compile (the offsets never read on the host),
    the same bits."""
    gen = torch.Generator().manual_seed(17 + gated + kn)
    rows, k, n, groups = 40, 48, 24, 4
    x, weight = torch.randn(rows, k, generator=gen), torch.randn(groups, 2 * n if gated else n, k, generator=gen)
    if kn:
        weight = weight.transpose(1, 2).contiguous()
    offsets = torch.tensor([3, 14, 14, 30, 37], dtype=torch.int32)  # rows 0-2 and 37-39 in no group; group 1 empty
    grad_out = torch.randn(rows, n, generator=gen)
    leaves = [t.clone().requires_grad_() for t in (x, weight)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not through the golden function (which warns)
        out = mt.group_gemm(leaves[0], leaves[1], offsets, gated_activation=gated, weight_kn=kn)
        (out[3:37] * grad_out[3:37]).sum().backward()  # the rows in no group hold what the kernel left there
    inside = torch.zeros(rows, 1)
    inside[3:37] = 1
    want = _golden_grads(golden.group_gemm, [x, weight, offsets], grad_out * inside, gated_activation=gated,
                         weight_kn=kn)
    _expect_grads([t.grad for t in leaves], want, f"group_gemm gated={gated} weight_kn={kn}")
    assert float(leaves[0].grad[:3].abs().max()) == 0.0 and float(leaves[0].grad[37:].abs().max()) == 0.0
    assert float(leaves[1].grad[1].abs().max()) == 0.0, "the empty group's weight"

    def loss(x, weight):
        return (mt.group_gemm(x, weight, offsets, gated_activation=gated, weight_kn=kn)[3:37] * grad_out[3:37]).sum()
    again = [t.clone().requires_grad_() for t in (x, weight)]
    torch.compile(loss, fullgraph=True, backend="aot_eager")(*again).backward()
    for got, eager in zip(again, leaves):
        torch.testing.assert_close(got.grad, eager.grad, rtol=0, atol=0)


def test_moe_dispatch_allocates_its_index_outputs_in_the_ids_dtype():
    """moe_dispatch's sorted_token_ids and positions take ids' dtype (i32 here): the kernel runs, eager, through the
    registered op and compiled, where an i64 allocation had made the call fall back to the golden function."""
    ids = torch.tensor([[2, 0], [1, 2], [-1, 0]], dtype=torch.int32)
    want = golden.moe_dispatch(ids, torch.empty(4, dtype=torch.int32))
    compiled = torch.compile(lambda i, o: mt.moe_dispatch(i, o), fullgraph=True, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        for fn in (mt.moe_dispatch, torch.ops.mojo_jit.moe_dispatch, compiled):
            offsets = torch.empty(4, dtype=torch.int32)
            got = fn(ids, offsets)
            for g, w in zip(got[:2], want[:2]):
                assert g.dtype == torch.int32
                torch.testing.assert_close(g, w, rtol=0, atol=0)
            assert offsets.tolist() == [0, 2, 3, 5]


def test_moe_dispatch_and_combine_differentiate_as_a_pipeline():
    """The routed MLP composed by hand, as a model may: moe_dispatch's gathered rows (x's gradient summed over its
    slots by moe_combine), a gated group_gemm and one more, moe_combine; every gradient against autograd through
    the golden functions in float64, the offsets written as the eager call writes them."""
    gen = torch.Generator().manual_seed(29)
    tokens, hidden, inter, experts = 8, 32, 16, 4
    x, weights = torch.randn(tokens, hidden, generator=gen), torch.rand(tokens, 2, generator=gen)
    ids = torch.randint(0, experts, (tokens, 2), generator=gen, dtype=torch.int32)
    ids[2, 0] = -1
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.2
    w2 = torch.randn(experts, hidden, inter, generator=gen) * 0.2
    grad_out = torch.randn(tokens, hidden, generator=gen)

    def grads(ops, dtype):
        leaves = [t.to(dtype).clone().requires_grad_() for t in (x, weights, w13, w2)]
        offsets = torch.empty(experts + 1, dtype=torch.int32)
        _, positions, sorted_x = ops.moe_dispatch(ids, offsets, leaves[0])
        h = ops.group_gemm(sorted_x, leaves[2], offsets, gated_activation=3)
        out = ops.moe_combine(ops.group_gemm(h, leaves[3], offsets), positions, leaves[1])
        (out * grad_out.to(dtype)).sum().backward()
        return offsets, [t.grad for t in leaves]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moe_combine's gradient through its golden function warns once
        offsets, got = grads(mt, torch.float32)
    want_offsets, want = grads(golden, torch.float64)
    assert offsets.tolist() == want_offsets.tolist()
    _expect_grads(got, want, "moe_dispatch, group_gemm and moe_combine")


def test_moe_mlp_differentiates_through_the_kernels():
    """moe_mlp's gradients (x, the routing weights, w13 and w2) through moe_dispatch, group_gemm,
    group_gemm_weight_grad and moe_combine launches, in f32, against autograd through the golden function in float64:
    a slot routed nowhere (id -1) and an expert no token chose included; the routing weights' alone, where nothing
    else requires grad, and all four under torch.compile, the same bits."""
    gen = torch.Generator().manual_seed(23)
    tokens, hidden, inter, experts = 10, 32, 24, 5
    x = torch.randn(tokens, hidden, generator=gen)
    ids = torch.randint(0, experts - 1, (tokens, 2), generator=gen, dtype=torch.int32)  # expert 4: no token
    ids[3, 1] = -1
    weights = torch.rand(tokens, 2, generator=gen)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.2
    w2 = torch.randn(experts, hidden, inter, generator=gen) * 0.2
    grad_out = torch.randn(tokens, hidden, generator=gen)
    leaves = [t.clone().requires_grad_() for t in (x, weights, w13, w2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not through the golden function (which warns)
        out = mt.moe_mlp(leaves[0], ids, leaves[1], leaves[2], leaves[3])
        (out * grad_out).sum().backward()
    want = _golden_grads(lambda x, w, a, b: golden.moe_mlp(x, ids, w, a, b), [x, weights, w13, w2], grad_out)
    _expect_grads([t.grad for t in leaves], want, "moe_mlp")
    assert float(leaves[1].grad[3, 1]) == 0.0, "a slot routed nowhere"
    assert float(leaves[2].grad[4].abs().max()) == 0.0 and float(leaves[3].grad[4].abs().max()) == 0.0
    only_weights = weights.clone().requires_grad_()  # the router alone trained: its gradient by itself
    (mt.moe_mlp(x, ids, only_weights, w13, w2) * grad_out).sum().backward()
    torch.testing.assert_close(only_weights.grad, leaves[1].grad, rtol=0, atol=0)
    again = [t.clone().requires_grad_() for t in (x, weights, w13, w2)]
    compiled = torch.compile(lambda x, w, a, b: (mt.moe_mlp(x, ids, w, a, b) * grad_out).sum(), fullgraph=True,
                             backend="aot_eager")
    compiled(*again).backward()
    for got, eager in zip(again, leaves):
        torch.testing.assert_close(got.grad, eager.grad, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:mojo_jit .* has no backward kernel")
def test_an_op_without_a_backward_kernel_differentiates_through_its_golden_function():
    """An op with no backward of its own (paged attention, embedding, a backward op differentiated again): the
    kernel forward, and autograd through its golden function for the gradient, with one warning an op that says so;
    torch's own fallback, the registered op's, only warns and gives the inputs none. Where the golden function's
    graph does not reach an input (it computes outside autograd), backward raises rather than give it none; so does
    torch.compile, which does not trace that gradient."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(10, 4, 64, generator=gen).half()
    k_cache, v_cache = (torch.randn(6, 8, 2, 64, generator=gen).half() for _ in range(2))  # 6 blocks of 8 tokens
    sinks, cu = torch.randn(4, generator=gen), torch.tensor([0, 4, 10], dtype=torch.int32)
    block_tables = torch.tensor([[4, 1, 0], [2, 5, 3]], dtype=torch.int32)
    context_lens = torch.tensor([9, 20], dtype=torch.int32)
    grad_out = torch.randn(10, 4, 64, generator=gen)

    def attention_grads(fn):
        leaves = [t.clone().requires_grad_() for t in (q, k_cache, v_cache, sinks)]
        out = fn(*leaves[:3], cu, block_tables, context_lens, sinks=leaves[3], softcap=5.0)
        (out.float() * grad_out).sum().backward()
        return [t.grad for t in leaves]

    mt._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = attention_grads(mt.paged_prefill_gqa)
        attention_grads(mt.paged_prefill_gqa)
    assert [str(w.message) for w in caught if "no backward kernel" in str(w.message)] == [
        "mojo_jit paged_prefill_gqa has no backward kernel: its gradient is autograd through its golden function "
        "(PyTorch), run again on the saved inputs: exact, and as slow as that function"]
    for g, want in zip(got, attention_grads(golden.paged_prefill_gqa)):
        torch.testing.assert_close(g, want)

    ids, table = torch.tensor([[3, 1], [3, 7]]), torch.randn(9, 16, requires_grad=True)
    (mt.embedding(ids, table) * torch.arange(16.0)).sum().backward()
    want = torch.zeros(9, 16).index_add_(0, ids.flatten(), torch.arange(16.0).expand(4, 16))
    torch.testing.assert_close(table.grad, want, rtol=0, atol=0)

    x, w, grad_out = torch.randn(5, 64, requires_grad=True), torch.randn(64), torch.randn(5, 64)
    (mt.rms_norm_backward(x, grad_out, w)[0] * grad_out).sum().backward()  # differentiated again
    _expect_grads([x.grad], _golden_grads(lambda *t: golden.rms_norm_backward(*t)[0], [x, grad_out, w], grad_out),
                  "rms_norm_backward through its golden function")

    h, weight, labels = torch.randn(6, 32, requires_grad=True), torch.randn(50, 32), torch.randint(0, 50, (6,))
    grads = mt.linear_cross_entropy_backward(torch.ones(1), h, weight, labels, torch.randn(6))
    with pytest.raises(NotImplementedError, match="its golden function gives hidden no gradient"):
        grads[0].sum().backward()
    with torch.no_grad():
        assert not mt.rms_norm_backward(x, grad_out, w)[0].requires_grad
    compiled = torch.compile(lambda q: mt.paged_prefill_gqa(q, k_cache, v_cache, cu, block_tables, context_lens)
                             .float().sum(), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="paged_prefill_gqa has no backward kernel, and its gradient .* not traced"):
        compiled(q.clone().requires_grad_()).backward()


@pytest.mark.parametrize("neox,rot", [(1, 64), (0, 48)])
def test_rotary_embedding_differentiates_in_place_on_views(neox, rot):
    """rotary_embedding on q and k, strided views of one qkv projection, as a model calls it: the gradients of the
    projection's input and weight through the inverse rotation (the dims past rot_dim and a position out of range
    pass theirs unchanged), against autograd through the golden function in float64."""
    gen = torch.Generator().manual_seed(rot)
    tokens, heads, kv_heads, dim = 7, 4, 2, 64
    x, w = torch.randn(tokens, 32, generator=gen), torch.randn((heads + 2 * kv_heads) * dim, 32, generator=gen) * 0.2
    positions = torch.tensor([0, 5, 3, 99, 1, 8, 2])  # 99: past the cache, left as it is
    angles = torch.rand(40, rot // 2, generator=gen) * 6
    cache = torch.cat([angles.cos(), angles.sin()], dim=1)
    grads = [torch.randn(tokens, n, dim, generator=gen) for n in (heads, kv_heads)]

    def step(ops, x, w, cache):
        qkv = ops.linear(x, w) if ops is mt else x @ w.T
        q = qkv[:, : heads * dim].view(tokens, heads, dim)
        k = qkv[:, heads * dim: (heads + kv_heads) * dim].view(tokens, kv_heads, dim)
        if ops is not mt:  # the golden function updates its arguments: give it copies autograd can follow
            q, k = q.clone(), k.clone()
        ops.rotary_embedding(q, k, positions, cache, neox=neox)
        return (q * grads[0].to(q.dtype)).sum() + (k * grads[1].to(k.dtype)).sum()

    ours = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    step(mt, *ours, cache).backward()
    want = [x.double().requires_grad_(), w.double().requires_grad_()]
    step(golden, *want, cache.double()).backward()
    _expect_grads([t.grad for t in ours], [t.grad for t in want], f"rotary_embedding neox={neox} rot={rot}")
    with pytest.raises(NotImplementedError, match="no gradient for cos_sin_cache"):
        step(mt, *ours, cache.clone().requires_grad_()).backward()


@pytest.mark.parametrize("reduction", [1, 0])
def test_a_loss_that_uses_the_lse_gets_its_share(reduction):
    """The fused loss's lse is differentiable, the ignored rows' too (d lse / d logits = softmax), alone or beside
    the loss: a weighted sum of both against autograd through the golden function in float64."""
    gen = torch.Generator().manual_seed(3)
    h, weight = torch.randn(9, 40, generator=gen), torch.randn(300, 40, generator=gen)
    labels = torch.randint(0, 300, (9,), generator=gen)
    labels[3] = -100
    g_loss, g_lse = torch.randn(9 if reduction == 0 else 1, generator=gen), torch.randn(9, generator=gen)
    scalars = {"reduction": reduction, "label_smoothing": 0.1, "softcap": 5.0}

    def weighted(fn, hidden, w, use_loss=True):
        loss, lse = fn(hidden, w, labels, **scalars)
        return (lse * g_lse).sum() + ((loss * g_loss).sum() if use_loss else 0)

    for use_loss in (True, False):
        leaves = [h.clone().requires_grad_(), weight.clone().requires_grad_()]
        weighted(mt.linear_cross_entropy, *leaves, use_loss).backward()
        want = [t.detach().double().requires_grad_() for t in (h, weight)]
        weighted(golden.linear_cross_entropy, *want, use_loss).backward()
        _expect_grads([t.grad for t in leaves], [t.grad for t in want], f"loss and lse (loss used: {use_loss})")
        assert float(leaves[0].grad[3].abs().max()) > 0, "an ignored row's lse has a gradient"


def test_compile_differentiates_through_the_backward_kernels():
    labels, positions = torch.randint(0, 100, (4,)), torch.tensor([3, 0, 7, 2])
    angles = torch.rand(8, 32)
    cache = torch.cat([angles.cos(), angles.sin()], dim=1)

    def step(x, w, b, up, head):
        y = mt.linear(mt.swiglu(mt.linear(mt.rms_norm(x, w) * mt.layer_norm(x, w, b), up)), up[:, :64])
        mt.rotary_embedding(y[:, :64].view(4, 1, 64), y[:, 64:].view(4, 1, 64), positions, cache)
        loss, lse = mt.linear_cross_entropy(y, head, labels)
        return loss.sum() + 1e-2 * lse.square().mean()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    leaves = (torch.randn(4, 128, requires_grad=True), torch.randn(128, requires_grad=True),
              torch.randn(128, requires_grad=True), (torch.randn(128, 128) * 0.1).requires_grad_(),
              (torch.randn(100, 128) * 0.1).requires_grad_())
    compiled(*leaves).backward()
    got = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    step(*leaves).backward()
    for g, t in zip(got, leaves):
        torch.testing.assert_close(g, t.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["add_rms_norm", "rotary_embedding"])
def test_compile_differentiates_an_update_of_a_tensor_from_outside(op):
    """An op that updates a tensor it is given, where that tensor comes into the compiled region from outside (a
    layer compiled alone, its residual stream or q given): the same gradients as eager. (Its Function had updated the
    tensor in place, marked dirty; compiled, the gradient then went past the op as if it were the identity.) gemm's
    test covers its c."""
    gen = torch.Generator().manual_seed(41)
    cache = torch.randn(16, 64, generator=gen)
    given, other = torch.randn(6, 2, 64, generator=gen), torch.randn(6, 2, 64, generator=gen)
    grad_out, grad_given = torch.randn(6, 2, 64, generator=gen), torch.randn(6, 2, 64, generator=gen)

    def fn(t, u):
        if op == "add_rms_norm":
            return mt.add_rms_norm(t, u, cache[0])
        mt.rotary_embedding(t, u[:, :1], torch.arange(6), cache)
        return u

    def grads(f):
        leaves = [given.clone().requires_grad_(), other.clone().requires_grad_()]
        t = leaves[0] * 1.0  # not leaves: updated in place
        out = f(t, leaves[1] * 1.0)
        ((out * grad_out).sum() + (t * grad_given).sum()).backward()
        return [x.grad for x in leaves]

    for g, want in zip(grads(torch.compile(fn, backend="aot_eager")), grads(fn)):
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU with torch's CUDA")
def test_on_the_gpu_in_a_cuda_graph(monkeypatch):
    """On a GPU: the kernel on torch's current stream, eager and captured in a CUDA graph (replayed on new data)."""
    monkeypatch.setenv("MOJO_JIT_DEVICE", "cuda")
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(mt.rms_norm(x, w, backend="mojo"), golden.rms_norm(x, w), rtol=2e-2, atol=2e-2)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.ops.mojo_jit.rms_norm(x, w)  # compile and load outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = torch.ops.mojo_jit.rms_norm(x, w)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, golden.rms_norm(x, w), rtol=2e-2, atol=2e-2)
