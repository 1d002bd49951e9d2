"""The module's plumbing on the CPU device: arrays in (buffer protocol, DLPack, __array_interface__, strided rows),
results out, typed errors with mojo-jit's one-line messages, and what works without a GPU (emit, describe, prewarm,
the cache)."""
import threading

import numpy as np
import pytest

import mojo_jit
from mojo_jit import ops


def skip_if_another_nvrtc(message):
    """torch's pip wheels bring an NVRTC of their own CUDA release; imported first (test_torch.py does), theirs is the
    one the process has, and mojo-jit refuses to key its cache with a compiler it was not built for."""
    if "the nvrtc compiler loaded is" in message:
        pytest.skip("another NVRTC (torch's) is loaded in this process: " + message.split(": ", 1)[-1][:120])


def rms_norm_ref(x, w, eps=1e-6):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps) * w).astype(x.dtype)


@pytest.fixture
def rows():
    rng = np.random.default_rng(1)
    return rng.standard_normal((5, 640)).astype(np.float32), rng.standard_normal(640).astype(np.float32)


def test_numpy_in_numpy_out(rows):
    x, w = rows
    y = ops.rms_norm(x, w, eps=1e-5)
    assert isinstance(y, np.ndarray) and y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, rms_norm_ref(x, w, 1e-5), rtol=1e-5, atol=1e-5)


def test_out_given_is_written_and_returned(rows):
    x, w = rows
    out = np.full_like(x, np.nan)
    assert ops.rms_norm(x, w, out=out) is out
    np.testing.assert_allclose(out, rms_norm_ref(x, w), rtol=1e-5, atol=1e-5)


def test_strided_rows_and_array_interface(rows):
    x, w = rows
    wide = np.zeros((5, 1024), np.float32)
    wide[:, :640] = x

    class OnlyArrayInterface:  # no buffer protocol, no DLPack
        def __init__(self, a):
            self.a = a
            self.__array_interface__ = a.__array_interface__

    out = np.empty_like(x)
    ops.rms_norm(OnlyArrayInterface(wide[:, :640]), w, out=OnlyArrayInterface(out))
    np.testing.assert_allclose(out, rms_norm_ref(x, w), rtol=1e-5, atol=1e-5)


def test_in_place_tensor_is_written_back(rows):
    x, w = rows
    residual = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)
    updated = residual + x
    out = ops.add_rms_norm(residual, x, w)
    np.testing.assert_allclose(residual, updated, rtol=1e-6)
    np.testing.assert_allclose(out, rms_norm_ref(updated, w), rtol=1e-5, atol=1e-5)


def test_launches_from_threads(rows):
    x, w = rows
    results = [None] * 4

    def run(i):
        results[i] = ops.rms_norm(x * (i + 1), w)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, y in enumerate(results):
        np.testing.assert_allclose(y, rms_norm_ref(x * (i + 1), w), rtol=1e-5, atol=1e-5)


def test_errors_are_typed_with_the_librarys_messages(rows):
    x, w = rows
    with pytest.raises(mojo_jit.UnknownOpError, match="unknown op 'rms_nrom'"):
        mojo_jit.runtime().launch("rms_nrom", [x, x, w])
    with pytest.raises(KeyError):  # UnknownOpError is a KeyError too
        ops.get("rms_nrom")
    with pytest.raises(mojo_jit.ShapeError, match="weight"):
        ops.rms_norm(x, w[:100])
    with pytest.raises(ValueError):  # every InvalidArgumentError is a ValueError
        ops.rms_norm(x, w[:100])
    with pytest.raises(mojo_jit.DTypeError, match="float64"):
        ops.rms_norm(x.astype(np.float64), w)
    with pytest.raises(mojo_jit.InvalidArgumentError, match="no array"):
        ops.rms_norm(x, "weights")
    readonly = np.empty_like(x)
    readonly.flags.writeable = False
    with pytest.raises(mojo_jit.InvalidArgumentError, match="out is read-only"):
        ops.rms_norm(x, w, out=readonly)
    with pytest.raises(mojo_jit.InvalidArgumentError, match="eps"):
        ops.rms_norm(x, w, eps="small")
    with pytest.raises(TypeError):  # Python's own check of the signature
        ops.rms_norm(x, w, epsilon=1e-5)
    assert issubclass(mojo_jit.Error, RuntimeError)
    assert issubclass(mojo_jit.InternalError, mojo_jit.Error)  # a bug in mojo-jit itself


def test_programmatic_dependent_launch_is_an_option(rows):
    """RuntimeOptions::programmatic_dependent_launch from Python; the CPU device runs launches in order either way."""
    x, w = rows
    rt = mojo_jit.Runtime(device="cpu:sm_90a", disk_cache=False, programmatic_dependent_launch=True)
    out = np.empty_like(x)
    rt.launch("rms_norm", [out, x, w], {"eps": 1e-6})
    np.testing.assert_allclose(out, rms_norm_ref(x, w), rtol=1e-5, atol=1e-5)


def test_compile_error_carries_the_log(tmp_path):
    (tmp_path / "rms_norm.cu").write_text("this is not CUDA\n")
    rt = mojo_jit.Runtime(device="cpu", disk_cache=False, template_paths=[str(tmp_path)])
    with pytest.raises(mojo_jit.CompileError) as e:
        rt.emit("rms_norm", {"x": (4, 64)}, "f32", {}, "sm_90", "ptx")
    skip_if_another_nvrtc(str(e.value))
    assert "rms_norm" in str(e.value) and "\n" not in str(e.value)
    assert "this is not CUDA" in e.value.log


def test_emit_and_describe_need_no_gpu():
    try:
        mojo_jit.emit("silu", {"x": (4, 64)})
    except mojo_jit.CompileError as e:
        skip_if_another_nvrtc(str(e))
        raise
    ptx = mojo_jit.emit("rms_norm", {"x": (32, 4096)}, dtype="bf16", arch="sm_90a")
    assert ".entry rms_norm_bf16_hidden_4096" in ptx and ".target sm_90a" in ptx
    cubin = mojo_jit.emit("rms_norm", {"x": (32, 4096)}, dtype="bf16", arch="sm_90a", emit="cubin")
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    d = mojo_jit.describe("rms_norm", {"x": (32, 4096)}, dtype="bf16", arch="sm_90a")
    assert d["op"] == "rms_norm" and d["tensors"]["x"] == "bf16[32, 4096]"
    k = d["kernels"][0]
    assert k["name"].startswith("rms_norm_bf16_hidden_4096") and k["registers"] > 0 and k["waves"] > 0
    assert d["ideal"]["bytes"] == 2 * 32 * 4096 * 2 + 4096 * 2


def test_prewarm_then_the_cache_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("MOJO_JIT_CACHE_DIR", str(tmp_path))
    rt = mojo_jit.Runtime(device="cpu")
    first = rt.prewarm("", ["silu"], ["sm_90"], "ptx", 1)
    skip_if_another_nvrtc(" ".join(first["failures"]))
    assert (first["items"], first["compiled"], first["cached"], first["failed"]) == (3, 3, 0, 0)
    again = rt.prewarm("", ["silu"], ["sm_90"], "ptx", 1)
    assert (again["compiled"], again["cached"]) == (0, 3)
    stats = mojo_jit.cache("stats", tmp_path)
    assert stats["entries"] == 3 and stats["by_kind"] == {"ptx": 3}
    listed = mojo_jit.cache("ls", tmp_path)["list"]
    assert all("op=silu" in e["meta"] for e in listed)
    assert mojo_jit.cache("clear", tmp_path)["removed_files"] >= 3
    assert mojo_jit.cache("stats", tmp_path)["entries"] == 0
    with pytest.raises(mojo_jit.InvalidArgumentError, match="unknown action 'flush'"):
        mojo_jit.cache("flush", tmp_path)


def test_functions_follow_mojo_jit_list():
    assert mojo_jit.op_names()[:3] == ["rms_norm", "add_rms_norm", "rms_norm_backward"]
    f = ops.get("linear")
    assert f.inputs == ["x", "weight"] and {"bias", "residual"} <= f.optional
    assert str(f.__signature__).startswith("(x, weight, *, out=None, bias=None, residual=None, activation=0")
    assert ops.get("moe_gate").shape_needed == {"ids"}
    assert "dtypes: f32, f16, bf16" in ops.rms_norm.__doc__
