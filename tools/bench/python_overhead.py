"""What a Python call costs above the C++ launch: per call, the median of 7 rounds.

  python tools/bench/python_overhead.py            # on a GPU: real launches of rms_norm bf16 [16, 4096], with torch
  python tools/bench/python_overhead.py --stub     # anywhere: rms_norm f32 [16, 4096] on the CPU device, each
                                                   # launch stopped where the device would run it (the launch sink
                                                   # of mojo-bench's host table; host arrays unstaged), so the
                                                   # Python layers and Runtime::launch by name are timed, no kernel

Rows: `_C.Runtime.launch` (the binding: arrays to tensors, then Runtime::launch by name), `mojo_jit.ops.rms_norm`
(out= given, and allocated), and with torch `mojo_jit.torch.rms_norm` (the eager fast path, MOJO_JIT_BACKEND unset),
`torch.ops.mojo_jit.rms_norm` (through the dispatcher), the same launch wrapped as a `torch.library.custom_op` (the
way torch documents for one's own kernel), and, for scale, torch's own `torch.empty_like` and
`torch.nn.functional.rms_norm`. Compare with mojo-bench's host table (the C++ by-name launch, 0.05-0.1 us) measured on
the same machine.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import mojo_jit
from mojo_jit import _C


def per_call_us(fn, calls):
    rounds = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(rounds)


def _custom_op_rms_norm(torch, runtime):
    """rms_norm wrapped the way torch documents for a kernel of one's own (torch.library.custom_op, a fake kernel),
    calling _C.Runtime.launch: what a user of the binding alone would get, for comparison with mojo_jit.torch."""

    @torch.library.custom_op("mojo_jit_bench::rms_norm", mutates_args=())
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        out = torch.empty_like(x)
        stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0
        runtime.launch("rms_norm", [out, x, weight], {"eps": eps}, stream)
        return out

    @rms_norm.register_fake
    def _(x, weight, eps):
        return torch.empty_like(x)

    return rms_norm


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stub", action="store_true", help="stop each launch at the sink (no GPU needed)")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    gpu = not args.stub and torch is not None and torch.cuda.is_available()
    if not args.stub and not gpu:
        sys.exit("no GPU with torch here: give --stub to time the Python layers alone")
    rows = []
    if gpu:
        x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(x)
        device = "cuda:0"
    else:
        x = np.random.randn(16, 4096).astype(np.float32)
        w = np.random.randn(4096).astype(np.float32)
        out = np.empty_like(x)
        device = "cpu"
        os.environ["MOJO_JIT_DEVICE"] = "cpu"  # the fast path's default device where there is no GPU
    launch = mojo_jit.runtime(device).launch
    rows.append(("_C.Runtime.launch (by name), out= given",
                 lambda: launch("rms_norm", [out, x, w], {"eps": 1e-6}, 0)))
    rows.append(("mojo_jit.ops.rms_norm, out= given",
                 lambda: mojo_jit.ops.rms_norm(x, w, out=out, eps=1e-6, device=device)))
    rows.append(("mojo_jit.ops.rms_norm, out allocated", lambda: mojo_jit.ops.rms_norm(x, w, eps=1e-6, device=device)))
    if torch is not None:
        import mojo_jit.torch as mt

        xt = x if gpu else torch.from_numpy(x)
        wt = w if gpu else torch.from_numpy(w)
        rows.append(("mojo_jit.torch.rms_norm (eager fast path)", lambda: mt.rms_norm(xt, wt, eps=1e-6)))
        rows.append(("torch.ops.mojo_jit.rms_norm (dispatcher)", lambda: torch.ops.mojo_jit.rms_norm(xt, wt, eps=1e-6)))
        wrapped = _custom_op_rms_norm(torch, mojo_jit.runtime(device))
        rows.append(("the same launch as a torch.library.custom_op", lambda: wrapped(xt, wt, 1e-6)))
        rows.append(("torch.empty_like (for scale)", lambda: torch.empty_like(xt)))
        rows.append(("torch.nn.functional.rms_norm (for scale)",
                     lambda: torch.nn.functional.rms_norm(xt, (4096,), wt, eps=1e-6)))
    for _, fn in rows:
        fn()  # compile or load first
    if not gpu:
        _C._stop_launches_at_sink(True)
    if gpu:
        torch.cuda.synchronize()
    print(f"per call, median of 7 rounds of {args.calls} ({'GPU launches' if gpu else 'launches stopped at the sink'})")
    for name, fn in rows:
        us = per_call_us(fn, args.calls)
        if gpu:
            torch.cuda.synchronize()
        print(f"  {name:<45} {us:8.2f} us")


if __name__ == "__main__":
    main()
