"""What a Python call costs above the C++ launch: per call, the median of 7 rounds.

  python tools/bench/python_overhead.py            # on a GPU: real launches of rms_norm bf16 [16, 4096], with torch
  python tools/bench/python_overhead.py --stub     # anywhere: the launch replaced by a no-op, so only the Python
                                                   # layers (binding, output allocation, conversions) are timed

Rows: `_C.Runtime.launch` (the binding: arrays to tensors, then Runtime::launch by name), `mojo_jit.ops.rms_norm`
(out= given, and allocated), and with torch `mojo_jit.torch.rms_norm` (the eager fast path) and
`torch.ops.mojo_jit.rms_norm` (through the dispatcher). Compare with mojo-bench's host table (the C++ by-name launch)
measured on the same machine.
"""
import argparse
import statistics
import sys
import time

import numpy as np

import mojo_jit
from mojo_jit import _runtime


def per_call_us(fn, calls):
    rounds = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(rounds)


class NoLaunch:
    def launch(self, *args, **kwargs):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stub", action="store_true", help="replace the launch with a no-op (no GPU needed)")
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
        device = "stub"
        _runtime._runtimes[device] = NoLaunch()
    if gpu:
        launch = mojo_jit.runtime(device).launch
        rows.append(("_C.Runtime.launch (by name)", lambda: launch("rms_norm", [out, x, w], {"eps": 1e-6}, 0)))
    rows.append(("mojo_jit.ops.rms_norm, out= given",
                 lambda: mojo_jit.ops.rms_norm(x, w, out=out, eps=1e-6, device=device)))
    rows.append(("mojo_jit.ops.rms_norm, out allocated", lambda: mojo_jit.ops.rms_norm(x, w, eps=1e-6, device=device)))
    if torch is not None:
        import mojo_jit.torch as mt

        xt = x if gpu else torch.from_numpy(x)
        wt = w if gpu else torch.from_numpy(w)
        if not gpu:
            _runtime._runtimes[mojo_jit.default_device()] = NoLaunch()
        rows.append(("mojo_jit.torch.rms_norm (eager fast path)", lambda: mt.rms_norm(xt, wt, eps=1e-6, backend="mojo")))
        rows.append(("torch.ops.mojo_jit.rms_norm (dispatcher)", lambda: torch.ops.mojo_jit.rms_norm(xt, wt, eps=1e-6)))
    for _, fn in rows:
        fn()  # compile or load first
    if gpu:
        torch.cuda.synchronize()
    print(f"per call, median of 7 rounds of {args.calls} ({'GPU launches' if gpu else 'launch stubbed out'})")
    for name, fn in rows:
        us = per_call_us(fn, args.calls)
        if gpu:
            torch.cuda.synchronize()
        print(f"  {name:<45} {us:8.2f} us")


if __name__ == "__main__":
    main()
