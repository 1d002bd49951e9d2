#!/usr/bin/env python3
"""PyTorch eager and torch.compile on the computations of mojo-bench's op table.

    build/tools/mojo-bench --only ops --json ops.json
    python3 tools/bench/torch_compare.py ops.json [FIRST:END] [--eager-only]

FIRST:END (a Python slice of the op table's rows, e.g. 0:40) splits the table
over several runs: torch.compile compiles each row anew, ~90 rows in all.
--eager-only skips torch.compile (seconds a row), for a short GPU lease where
the peer is a library call (cuBLAS for linear) or eager PyTorch.

Each op runs at the same shapes and dtype (gemm and linear: torch.matmul and
F.linear, i.e. cuBLAS, plus a separate activation kernel in eager mode),
timed the way mojo-bench times its
kernels: a CUDA graph of >= 20 calls cycling through enough input copies to
stream > 256 MiB per replay (more than the L2), CUDA events, median of 10
replays. Prints a markdown table with the ratios (> 1: mojo-jit is faster).
"""
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-6  # the ops' default eps in mojo-jit


def parse_shapes(text):
    """'x=32x4096 k=2x8' -> {'x': [32, 4096], 'k': [2, 8]}"""
    return {name: [int(d) for d in dims.split("x")] for name, dims in (item.split("=") for item in text.split())}


def rand(shape, dtype, gen):
    return (torch.randn(shape, generator=gen, device="cuda") * 0.5).to(dtype)


def perm(n, k, gen):
    return torch.randperm(n, generator=gen, device="cuda")[:k]


def rotate_neox(t, cos, sin):
    half = cos.shape[-1]
    t1, t2 = t[..., :half].float(), t[..., half : 2 * half].float()
    rotated = torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1).to(t.dtype)
    return torch.cat((rotated, t[..., 2 * half :]), dim=-1)


def case(op, s, dt, activation=0, trans_b=0, causal=1, gated=0):
    """(make_inputs(gen) -> tuple of tensors, fn(*inputs)) for one row of the table; `causal`: sdpa's; `gated`:
    group_gemm's gated_activation."""
    if op in ("rms_norm", "add_rms_norm", "rms_norm_backward", "layer_norm", "layer_norm_backward"):
        rows, h = math.prod(s["x"][:-1]), s["x"][-1]
        if op == "rms_norm":
            return (lambda g: (rand((rows, h), dt, g), rand((h,), dt, g)),
                    lambda x, w: F.rms_norm(x, (h,), w, EPS))
        if op == "add_rms_norm":
            def add_rms_norm(x, r, w):
                r.add_(x)
                return F.rms_norm(r, (h,), w, EPS)
            return (lambda g: (rand((rows, h), dt, g), rand((rows, h), dt, g), rand((h,), dt, g)), add_rms_norm)
        if op == "rms_norm_backward":
            residual = "grad_residual" in s

            def rms_norm_backward(go, x, w, *grad_residual):  # rms_norm's autograd formula, written out
                xf = x.float()
                rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
                xhat, g = xf * rstd, go.float() * w.float()
                gx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
                if grad_residual:
                    gx = gx + grad_residual[0].float()
                return gx.to(x.dtype), (go.float() * xhat).sum(0).to(x.dtype)
            return (lambda g: (rand((rows, h), dt, g), rand((rows, h), dt, g), rand((h,), dt, g))
                    + ((rand((rows, h), dt, g),) if residual else ()), rms_norm_backward)
        if op == "layer_norm":
            return (lambda g: (rand((rows, h), dt, g), rand((h,), dt, g), rand((h,), dt, g)),
                    lambda x, w, b: F.layer_norm(x, (h,), w, b, EPS))
        return (lambda g: (rand((rows, h), dt, g), rand((rows, h), dt, g), rand((h,), dt, g),
                           rand((rows, 1), torch.float32, g), rand((rows, 1), torch.float32, g).abs() + 1),
                lambda go, x, w, mean, rstd: torch.ops.aten.native_layer_norm_backward(
                    go, x, [h], mean, rstd, w, w, [True, True, True]))
    if op in ("softmax", "log_softmax", "softmax_backward"):
        shape = s["x"] if "x" in s else s["out"]
        if op == "softmax":
            return lambda g: (rand(shape, dt, g),), lambda x: torch.softmax(x, -1)
        if op == "log_softmax":
            return lambda g: (rand(shape, dt, g),), lambda x: torch.log_softmax(x, -1)
        return (lambda g: (rand(shape, dt, g), torch.softmax(rand(shape, dt, g), -1)),
                lambda go, out: torch.ops.aten._softmax_backward_data(go, out, -1, dt))
    if op in ("silu", "gelu"):
        fn = F.silu if op == "silu" else F.gelu
        return lambda g: (rand(s["x"], dt, g),), fn
    if op in ("swiglu", "gelu_and_mul"):
        act = F.silu if op == "swiglu" else F.gelu

        def gated(x):
            a, b = x.chunk(2, dim=-1)
            return act(a) * b
        return lambda g: (rand(s["x"], dt, g),), gated
    if op == "rotary_embedding":
        tokens, max_pos, rot = s["q"][0], s["cos_sin_cache"][0], s["cos_sin_cache"][1]

        def rotary(q, k, pos, cache):
            cs = cache[pos]
            cos, sin = cs[:, : rot // 2].unsqueeze(1), cs[:, rot // 2 :].unsqueeze(1)
            q.copy_(rotate_neox(q, cos, sin))
            k.copy_(rotate_neox(k, cos, sin))
        return (lambda g: (rand(s["q"], dt, g), rand(s["k"], dt, g), perm(max_pos, tokens, g),
                           torch.rand((max_pos, rot), generator=g, device="cuda")), rotary)
    if op == "embedding":
        vocab = s["weight"][0]
        return (lambda g: (perm(vocab, s["ids"][0], g), rand(s["weight"], dt, g)),
                lambda ids, w: F.embedding(ids, w))
    if op == "store_kv_cache":
        tokens, slots = s["k"][0], s["k_cache"][0] * s["k_cache"][1]
        row = s["k"][1] * s["k"][2]

        def store(k_cache, v_cache, k, v, slot):
            k_cache.view(-1, row)[slot] = k.view(tokens, row)
            v_cache.view(-1, row)[slot] = v.view(tokens, row)
        return (lambda g: (rand(s["k_cache"], dt, g), rand(s["k_cache"], dt, g), rand(s["k"], dt, g),
                           rand(s["k"], dt, g), perm(slots, tokens, g)), store)
    if op == "gemm":
        if trans_b:  # b is stored [N, K]
            return lambda g: (rand(s["a"], dt, g), rand(s["b"], dt, g)), lambda a, b: torch.matmul(a, b.t())
        return lambda g: (rand(s["a"], dt, g), rand(s["b"], dt, g)), torch.matmul
    if op == "linear":
        act = {0: lambda y: y, 1: F.gelu, 2: lambda y: F.gelu(y, approximate="tanh"), 3: F.silu}[int(activation)]
        n = s["weight"][0]
        if "bias" in s:
            return (lambda g: (rand(s["x"], dt, g), rand(s["weight"], dt, g), rand((n,), dt, g)),
                    lambda x, w, b: act(F.linear(x, w, b)))
        return lambda g: (rand(s["x"], dt, g), rand(s["weight"], dt, g)), lambda x, w: act(F.linear(x, w))
    if op in ("sdpa", "paged_prefill_gqa", "paged_decode_gqa"):
        # torch's SDPA (cuDNN / FlashAttention on an H100) with GQA, over contiguous K/V of the same lengths:
        # PyTorch has no paged attention, so the paged rows compare with the dense computation.
        tokens, heads, d = s["q"]
        kv_heads = s["k" if op == "sdpa" else "k_cache"][-2]
        if op == "paged_decode_gqa":
            batch, blocks = s["block_tables"]
            q_len, context = tokens // batch, blocks * s["k_cache"][1]
            shape_q, shape_kv, causal = (batch, heads, q_len, d), (batch, kv_heads, context, d), False
        else:  # sdpa's cu_seqlens: equal sequences, as mojo-bench fills them
            batch = s["cu_seqlens_q"][0] - 1 if "cu_seqlens_q" in s else 1
            length = tokens // batch
            shape_q, shape_kv, causal = (batch, heads, length, d), (batch, kv_heads, length, d), bool(causal)
        return (lambda g: (rand(shape_q, dt, g), rand(shape_kv, dt, g), rand(shape_kv, dt, g)),
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True))
    if op == "sdpa_backward":
        # torch's SDPA forward and backward together (autograd: FlashAttention-2's kernels on an H100) against
        # mojo-jit's sdpa row plus this one, over equal sequences as mojo-bench fills them.
        tokens, heads, d = s["q"]
        batch = s["cu_seqlens_q"][0] - 1 if "cu_seqlens_q" in s else 1
        shape_q, shape_kv = (batch, heads, tokens // batch, d), (batch, s["k"][-2], tokens // batch, d)

        def grads(q, k, v, grad_out):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), enable_gqa=True)
            return torch.autograd.grad(out, (q, k, v), grad_out)
        return (lambda g: (*(rand(x, dt, g).requires_grad_() for x in (shape_q, shape_kv, shape_kv)),
                           rand(shape_q, dt, g)), grads)
    if op == "apply_penalties_temperature":
        b, v = s["logits"]
        length = s["token_ids"][1]

        def penalties(logits, ids, counts, rep, pres, freq, temp):
            logits.div_(temp[:, None])
            seen = logits.gather(1, ids)
            seen = torch.where(seen > 0, seen / rep[:, None], seen * rep[:, None])
            seen -= (freq[:, None] * counts + pres[:, None] * (counts > 0)) / temp[:, None]
            return logits.scatter_(1, ids, seen)
        floats = lambda g: torch.rand((b,), generator=g, device="cuda") + 1  # noqa: E731
        return (lambda g: (rand((b, v), dt, g), torch.stack([perm(v, length, g) for _ in range(b)]),
                           torch.randint(0, 4, (b, length), generator=g, device="cuda").to(dt),
                           floats(g), floats(g) - 1, floats(g) - 1, floats(g)), penalties)
    if op == "sample":
        # The sort-based sampler (vLLM's PyTorch path): softmax, sort, top-k and top-p masks, multinomial.
        b, v = s["logits"]

        def sample(logits, k, p):
            probs, idx = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True)
            ranks = torch.arange(v, device="cuda")[None, :]
            cum = probs.cumsum(dim=-1)
            probs = probs.masked_fill((ranks >= k[:, None]) | (cum - probs > p[:, None]), 0)
            return idx.gather(1, torch.multinomial(probs, 1))
        return (lambda g: (rand((b, v), dt, g), torch.full((b,), 50, device="cuda"),
                           torch.full((b,), 0.9, device="cuda")), sample)
    if op == "moe_gate":
        tokens, experts = s["logits"]
        top_k = s["ids"][1]

        def gate(logits):
            w, ids = torch.softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
            return w / w.sum(dim=-1, keepdim=True), ids
        return (lambda g: (rand((tokens, experts), dt, g),), gate)
    if op == "moe_dispatch":
        tokens, top_k = s["ids"]
        experts = s["expert_offsets"][0] - 1

        def dispatch(ids, *x):
            order = ids.flatten().argsort(stable=True)
            offsets = torch.bincount(ids.flatten(), minlength=experts).cumsum(0)
            return (order, offsets, x[0][order // top_k]) if x else (order, offsets)
        ids = lambda g: torch.randint(0, experts, (tokens, top_k), generator=g, device="cuda")  # noqa: E731
        if "x" in s:
            return lambda g: (ids(g), rand(s["x"], dt, g)), dispatch
        return lambda g: (ids(g),), dispatch
    if op == "moe_combine":
        tokens, top_k = s["positions"]
        rows = s["expert_out"][0]
        return (lambda g: (rand(s["expert_out"], dt, g), perm(rows, tokens * top_k, g).view(tokens, top_k),
                           torch.rand((tokens, top_k), generator=g, device="cuda")),
                lambda out, pos, w: (out[pos].float() * w[..., None]).sum(1).to(dt))
    if op == "group_gemm" and "offsets" in s and hasattr(torch, "_grouped_mm"):
        # torch's grouped GEMM (PyTorch 2.8 and later: CUTLASS's on Hopper) over groups of random sizes, as mojo-bench
        # makes them (sorted random cuts of the rows); gated, then act(gate) * up on the interleaved columns.
        rows, k = s["x"]
        groups, n = s["weight"][0], s["weight"][1]
        act = {0: None, 1: F.gelu, 2: lambda y: F.gelu(y, approximate="tanh"), 3: F.silu}[int(gated)]

        def ends(g):  # offsets[1:], as torch takes them: each group's end
            cuts = torch.randint(0, rows + 1, (groups - 1,), generator=g, device="cuda").sort().values
            return torch.cat((cuts, torch.tensor([rows], device="cuda"))).to(torch.int32)

        def grouped(x, w, offs):
            y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
            return y if act is None else act(y[:, 0::2]) * y[:, 1::2]
        return lambda g: (rand((rows, k), dt, g), rand((groups, n, k), dt, g), ends(g)), grouped
    if op in ("linear_cross_entropy", "linear_cross_entropy_backward"):
        # The unfused computation: the [N, V] logits, then cross-entropy in f32; the backward row: forward and
        # backward together (autograd), against mojo-jit's forward row plus its backward row.
        n, h = s["hidden"]
        v = s["weight"][0]

        def loss(hidden, weight, labels):
            return F.cross_entropy(F.linear(hidden, weight).float(), labels)

        def loss_and_grads(hidden, weight, labels):
            return torch.autograd.grad(loss(hidden, weight, labels), (hidden, weight))
        make = lambda g: (rand((n, h), dt, g).requires_grad_(), rand((v, h), dt, g).requires_grad_(),  # noqa: E731
                          torch.randint(0, v, (n,), generator=g, device="cuda"))
        return make, (loss if op == "linear_cross_entropy" else loss_and_grads)
    return None


def time_us(fn, input_sets, reps=10):
    """Median µs per call over CUDA-graph replays cycling through input_sets."""
    per_graph = max(len(input_sets), 20)
    for inputs in input_sets:  # warm-up (and torch.compile's compile)
        fn(*inputs)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            fn(*input_sets[i % len(input_sets)])
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per_graph)
    return statistics.median(times)


def input_sets(make, bytes_moved):
    """Copies of the inputs to stream > 256 MiB per replay; tensors > 16 MiB are shared (as in mojo-bench)."""
    copies = int(min(64, max(1, math.ceil(256 * 2**20 / bytes_moved))))
    gen = torch.Generator(device="cuda").manual_seed(0)
    first = make(gen)
    sets = [first]
    for _ in range(copies - 1):
        fresh = make(gen)
        sets.append(tuple(a if a.numel() * a.element_size() > 16 * 2**20 else b for a, b in zip(first, fresh)))
    return sets


def main():
    args = [a for a in sys.argv[1:] if a != "--eager-only"]
    eager_only = len(args) < len(sys.argv) - 1
    if len(args) not in (1, 2):
        sys.exit(__doc__)
    with open(args[0]) as f:
        bench = json.load(f)
    first, _, end = (args[1] if len(args) == 2 else ":").partition(":")
    rows = bench["ops"][int(first) if first else None : int(end) if end else None]
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"\n## mojo-jit vs PyTorch {torch.__version__} on {torch.cuda.get_device_name()} "
          f"(ratio > 1: mojo-jit is faster; launch floor {bench['launch_floor_us']:.2f} µs)\n")
    print("| op | dtype | shapes | mojo µs | eager µs | torch.compile µs | eager / mojo | compile / mojo |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    peaks = []  # (op, torch's peak MB, mojo-jit's workspace MB) of the loss rows
    for row in rows:
        op, dt, mojo_us = row["op"], DTYPES[row["dtype"]], row["us"]
        try:  # a counterpart that fails to build costs its row, not the table
            params = row.get("params", {})
            made = case(op, parse_shapes(row["shapes"]), dt, row.get("activation", 0), row.get("trans_b", 0),
                        params.get("causal", 1), params.get("gated_activation", 0))
            if made is None:  # no PyTorch counterpart written (reject_sample)
                print(f"| {op} | {row['dtype']} | {row['shapes']} | {mojo_us:.2f} | - | - | - | - |", flush=True)
                continue
            make, fn = made
            sets = input_sets(make, row["bytes"])
        except Exception as e:
            print(f"| {op} | {row['dtype']} | {row['shapes']} | {mojo_us:.2f} | inputs failed: {type(e).__name__}: "
                  f"{e} | - | - | - |".replace("\n", " "), flush=True)
            continue
        cells = []
        for f in (fn, None if eager_only else torch.compile(fn, dynamic=False)):
            if f is None:
                cells.append(float("nan"))
                continue
            try:
                cells.append(time_us(f, sets))
            except Exception as e:  # a computation torch cannot capture: say so, keep going
                print(f"<!-- {op} {row['shapes']}: {type(e).__name__}: {e} -->", file=sys.stderr)
                cells.append(float("nan"))
        eager, compiled = cells
        # Every param the case pinned (path=80, splits=4, causal=0, ...) and the compiler when not NVRTC: rows of
        # one shape stay apart.
        shapes = " ".join([row["shapes"]] + [f"{k}={v:g}" for k, v in row.get("params", {}).items()] +
                          [f"compiler={row['compiler']}"] * (row.get("compiler", "nvrtc") != "nvrtc"))
        print(f"| {op} | {row['dtype']} | {shapes} | {mojo_us:.2f} | {eager:.2f} | {compiled:.2f} | "
              f"{eager / mojo_us:.2f} | {compiled / mojo_us:.2f} |", flush=True)
        if op.startswith("linear_cross_entropy"):
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fn(*sets[0])
            torch.cuda.synchronize()
            peaks.append((op, (torch.cuda.max_memory_allocated() - base) / 1e6, row.get("workspace", 0) / 1e6))
        del sets
        torch.cuda.empty_cache()
    if peaks:
        print("\n| loss op | PyTorch eager peak MB above its inputs | mojo-jit workspace MB |\n|---|---:|---:|")
        for op, torch_mb, mojo_mb in peaks:
            print(f"| {op} | {torch_mb:.0f} | {mojo_mb:.0f} |")


if __name__ == "__main__":
    main()
