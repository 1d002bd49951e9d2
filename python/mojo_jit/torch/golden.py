"""Golden functions: each op written in PyTorch from its definition (`mojo-jit list`), in float64 and rounded once to
the output's dtype, the way the C++ references compute (tests/test_torch.py checks them against those).

They take the arguments of `torch.ops.mojo_jit.<op>` (mojo_jit.torch.schema(op)): the tensors the op reads, then the
optional and caller-given ones, then the scalars; they return what that op returns and update in place what it
declares mutated. mojo_jit.torch falls back to them (MOJO_JIT_BACKEND=auto|torch). Ops not here yet: sample,
reject_sample, apply_penalties_temperature, moe_gate, moe_mlp (their kernels draw with Philox or route with tie
rules this file does not restate yet).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_F64 = torch.float64


def _act(x: torch.Tensor, code: int) -> torch.Tensor:
    """mojo_activation.h's codes: 0 none, 1 gelu (erf), 2 gelu (tanh), 3 silu."""
    code = int(code)
    if code == 0:
        return x
    if code == 1:
        return F.gelu(x)
    if code == 2:
        return F.gelu(x, approximate="tanh")
    if code == 3:
        return F.silu(x)
    raise ValueError(f"activation code {code}: expected 0 (none), 1 (gelu), 2 (gelu tanh) or 3 (silu)")


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


# ---- norms and softmax -------------------------------------------------------------------------------------------
def rms_norm(x, weight, eps=1e-6):
    xd = x.to(_F64)
    return (xd * _rms(xd, eps) * weight.to(_F64)).to(x.dtype)


def add_rms_norm(residual, x, weight, eps=1e-6):
    residual.copy_((residual.to(_F64) + x.to(_F64)).to(residual.dtype))
    return rms_norm(residual, weight, eps)


def rms_norm_backward(grad_out, x, weight, grad_residual=None, eps=1e-6):
    g, xd = grad_out.to(_F64), x.to(_F64)
    rstd = _rms(xd, eps)
    xhat = xd * rstd
    gw = g * weight.to(_F64)
    grad_x = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    if grad_residual is not None:
        grad_x = grad_x + grad_residual.to(_F64)
    grad_weight = (g * xhat).reshape(-1, x.shape[-1]).sum(0)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype)


def layer_norm(x, weight, bias, mean=None, rstd=None, eps=1e-6):
    xd = x.to(_F64)
    mu = xd.mean(-1, keepdim=True)
    r = torch.rsqrt((xd - mu).pow(2).mean(-1, keepdim=True) + eps)
    if mean is not None:
        mean.copy_(mu.reshape(mean.shape))
    if rstd is not None:
        rstd.copy_(r.reshape(rstd.shape))
    return ((xd - mu) * r * weight.to(_F64) + bias.to(_F64)).to(x.dtype)


def layer_norm_backward(grad_out, x, weight, mean, rstd):
    hidden = x.shape[-1]
    g, xd = grad_out.to(_F64).reshape(-1, hidden), x.to(_F64).reshape(-1, hidden)
    mu, r = mean.to(_F64).reshape(-1, 1), rstd.to(_F64).reshape(-1, 1)
    xhat = (xd - mu) * r
    gw = g * weight.to(_F64)
    grad_x = r * (gw - gw.mean(-1, keepdim=True) - xhat * (gw * xhat).mean(-1, keepdim=True))
    return (grad_x.reshape(x.shape).to(x.dtype), (g * xhat).sum(0).to(weight.dtype), g.sum(0).to(weight.dtype))


def softmax(x):
    return torch.softmax(x.to(_F64), -1).to(x.dtype)


def log_softmax(x):
    return torch.log_softmax(x.to(_F64), -1).to(x.dtype)


def softmax_backward(grad_out, out):
    g, o = grad_out.to(_F64), out.to(_F64)
    return (o * (g - (g * o).sum(-1, keepdim=True))).to(out.dtype)


# ---- activations -------------------------------------------------------------------------------------------------
def silu(x):
    return F.silu(x.to(_F64)).to(x.dtype)


def gelu(x, approximate=0):
    return _act(x.to(_F64), 2 if approximate else 1).to(x.dtype)


def _gated(x, code):
    gate, up = x.to(_F64).chunk(2, dim=-1)
    return (_act(gate, code) * up).to(x.dtype)


def swiglu(x):
    return _gated(x, 3)


def gelu_and_mul(x, approximate=0):
    return _gated(x, 2 if approximate else 1)


# ---- attention plumbing ------------------------------------------------------------------------------------------
def rotary_embedding(q, k, positions, cos_sin_cache, neox=1):
    """In place on q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim]; cos_sin_cache [max_pos, rot_dim]
    holds cos then sin of each position's rot_dim / 2 angles; positions out of range are skipped."""
    max_pos, rot = cos_sin_cache.shape
    valid = (positions >= 0) & (positions < max_pos)
    cs = cos_sin_cache.to(_F64)[positions.clamp(0, max_pos - 1)]
    cos, sin = cs[:, : rot // 2].unsqueeze(1), cs[:, rot // 2:].unsqueeze(1)
    for t in (q, k):
        x = t.to(_F64)
        if neox:
            x1, x2 = x[..., : rot // 2], x[..., rot // 2: rot]
            rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
        else:
            x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
            rotated = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
        new = torch.where(valid.reshape(-1, 1, 1), rotated, x[..., :rot])
        t[..., :rot] = new.to(t.dtype)


def embedding(ids, weight):
    vocab = weight.shape[0]
    valid = (ids >= 0) & (ids < vocab)
    rows = weight[ids.clamp(0, vocab - 1)]
    return torch.where(valid.unsqueeze(-1), rows, torch.zeros_like(rows))


def store_kv_cache(k_cache, v_cache, k, v, slot_mapping):
    """cache[slot] = k[t] (the cache flattened to [blocks * block_size, kv_heads, head_dim]); slots out of range
    skipped."""
    for cache, new in ((k_cache, k), (v_cache, v)):
        flat = cache.view(-1, *new.shape[1:])
        keep = (slot_mapping >= 0) & (slot_mapping < flat.shape[0])
        flat[slot_mapping[keep]] = new[keep].to(cache.dtype)


# ---- matrix products ---------------------------------------------------------------------------------------------
def gemm(c, a, b, alpha=1.0, beta=0.0, trans_a=0, trans_b=0, tf32=0, path=0):
    """c = alpha op(a) op(b) + beta c, in place (batched over leading dims); beta 0 ignores c's old values."""
    ad, bd = a.to(_F64), b.to(_F64)
    if trans_a:
        ad = ad.transpose(-1, -2)
    if trans_b:
        bd = bd.transpose(-1, -2)
    result = alpha * (ad @ bd)
    if beta != 0:
        result = result + beta * c.to(_F64)
    c.copy_(result.to(c.dtype))


gemm_batched = gemm


def linear(x, weight, bias=None, residual=None, activation=0, tf32=0, path=0):
    y = x.to(_F64) @ weight.to(_F64).T
    if bias is not None:
        y = y + bias.to(_F64)
    y = _act(y, activation)
    if residual is not None:
        y = y + residual.to(_F64)
    return y.to(x.dtype)


def group_gemm(x, weight, offsets, max_rows=0, tf32=0, path=0, gated_activation=0):
    """out[r] = x[r] weight[g]^T for the rows of group g, [offsets[g], offsets[g + 1]); gated: weight's rows are
    (gate, up) pairs and out[r] = act(gate) * up. Rows in no group are zeros here (the kernel leaves them alone)."""
    n = weight.shape[1] // (2 if gated_activation else 1)
    out = torch.zeros(x.shape[0], n, dtype=_F64, device=x.device)
    for g in range(weight.shape[0]):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        if hi <= lo:
            continue
        y = x[lo:hi].to(_F64) @ weight[g].to(_F64).T
        if gated_activation:
            y = _act(y[:, 0::2], gated_activation) * y[:, 1::2]
        out[lo:hi] = y
    return out.to(x.dtype)


# ---- attention ---------------------------------------------------------------------------------------------------
def _attend(q, keys, values, scale, window, softcap, causal, sinks):
    """One sequence: q [q_len, heads, d], keys/values [kv_len, kv_heads, d]; float64 out [q_len, heads, d] and lse
    [heads, q_len]. Query t sits at position kv_len - q_len + t (aligned at the ends)."""
    q_len, heads, d = q.shape
    kv_len, kv_heads = keys.shape[0], keys.shape[1]
    group = heads // kv_heads
    kd = keys.to(_F64).repeat_interleave(group, dim=1)
    vd = values.to(_F64).repeat_interleave(group, dim=1)
    logits = torch.einsum("thd,jhd->htj", q.to(_F64), kd) * (scale or 1 / math.sqrt(d))
    if softcap > 0:
        logits = softcap * torch.tanh(logits / softcap)
    pos = torch.arange(q_len, device=q.device).reshape(-1, 1) + (kv_len - q_len)
    j = torch.arange(kv_len, device=q.device).reshape(1, -1)
    visible = torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device)
    if causal:
        visible &= j <= pos
    if window >= 0:
        visible &= j >= pos - window
    logits = logits.masked_fill(~visible, -math.inf)
    if sinks is not None:
        sink = sinks.to(_F64).reshape(heads, 1, 1).expand(heads, q_len, 1)
        lse = torch.logsumexp(torch.cat([logits, sink], -1), -1)
    else:
        lse = torch.logsumexp(logits, -1)
    p = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)
    return torch.einsum("htj,jhd->thd", p, vd), lse


def _write_lse(lse, parts):
    if lse is not None:
        lse.copy_(torch.cat(parts, -1).to(lse.dtype))


def sdpa(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, sinks=None, lse=None, scale=0.0, window=-1, softcap=0.0,
         causal=1):
    cq = [0, q.shape[0]] if cu_seqlens_q is None else [int(s) for s in cu_seqlens_q]
    ck = cq if cu_seqlens_k is None else [int(s) for s in cu_seqlens_k]
    out, lses = [], []
    for s in range(len(cq) - 1):
        o, l = _attend(q[cq[s]:cq[s + 1]], k[ck[s]:ck[s + 1]], v[ck[s]:ck[s + 1]], scale, window, softcap, causal,
                       sinks)
        out.append(o)
        lses.append(l)
    _write_lse(lse, lses)
    return torch.cat(out).to(q.dtype)


def _paged_rows(cache, block_table, length):
    """A sequence's `length` keys from the paged cache [blocks, block_size, kv_heads, d] through its block table."""
    block_size = cache.shape[1]
    j = torch.arange(length, device=cache.device)
    return cache[block_table[j // block_size].long(), j % block_size]


def paged_prefill_gqa(q, k_cache, v_cache, cu_seqlens_q, block_tables, context_lens, sinks=None, lse=None, scale=0.0,
                      window=-1, softcap=0.0):
    cq = [int(s) for s in cu_seqlens_q]
    out, lses = [], []
    for s in range(len(cq) - 1):
        n = int(context_lens[s])
        o, l = _attend(q[cq[s]:cq[s + 1]], _paged_rows(k_cache, block_tables[s], n),
                       _paged_rows(v_cache, block_tables[s], n), scale, window, softcap, True, sinks)
        out.append(o)
        lses.append(l)
    _write_lse(lse, lses)
    return torch.cat(out).to(q.dtype)


def paged_decode_gqa(q, k_cache, v_cache, block_tables, context_lens, sinks=None, lse=None, scale=0.0, window=-1,
                     softcap=0.0):
    batch = block_tables.shape[0]
    q_len = q.shape[0] // batch
    out, lses = [], []
    for s in range(batch):
        n = int(context_lens[s])
        o, l = _attend(q[s * q_len:(s + 1) * q_len], _paged_rows(k_cache, block_tables[s], n),
                       _paged_rows(v_cache, block_tables[s], n), scale, window, softcap, True, sinks)
        out.append(o)
        lses.append(l)
    _write_lse(lse, lses)
    return torch.cat(out).to(q.dtype)


# ---- MoE routing -------------------------------------------------------------------------------------------------
def moe_dispatch(ids, expert_offsets, x=None):
    """The stable sort of the (token, slot) pairs by expert: writes expert_offsets [experts + 1]; returns
    sorted_token_ids [pairs] (-1 past the routed ones), positions [tokens, top_k] (each pair's row in the sorted
    order, -1 for an id outside [0, experts)) and sorted_x [pairs, hidden] (x of each sorted pair's token; zeros past
    the routed ones; empty without x)."""
    experts = expert_offsets.shape[0] - 1
    flat = ids.reshape(-1).long()
    valid = (flat >= 0) & (flat < experts)
    key = torch.where(valid, flat, torch.full_like(flat, experts))
    order = torch.sort(key, stable=True).indices
    routed = int(valid.sum())
    counts = torch.bincount(flat[valid], minlength=experts)
    expert_offsets.copy_(torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(expert_offsets.dtype))
    tokens = torch.full_like(flat, -1)
    tokens[:routed] = order[:routed] // ids.shape[-1]
    positions = torch.full_like(flat, -1)
    positions[order[:routed]] = torch.arange(routed, device=ids.device)
    sorted_x = torch.empty(0)
    if x is not None:
        sorted_x = torch.zeros(flat.shape[0], x.shape[-1], dtype=x.dtype, device=x.device)
        sorted_x[:routed] = x[tokens[:routed]]
    return tokens.to(ids.dtype), positions.reshape(ids.shape).to(ids.dtype), sorted_x


def moe_combine(expert_out, positions, weights):
    """out[t] = sum over k of weights[t, k] * expert_out[positions[t, k]] (negative positions skipped)."""
    p = positions.long()
    rows = expert_out.to(_F64)[p.clamp(min=0)]
    w = torch.where(p >= 0, weights.to(_F64), torch.zeros((), dtype=_F64, device=p.device))
    return (rows * w.unsqueeze(-1)).sum(1).to(expert_out.dtype)


# ---- the fused linear cross-entropy ------------------------------------------------------------------------------
def _cross_entropy_rows(hidden, weight, labels, ignore_index, label_smoothing, z_loss, softcap):
    logits = hidden.to(_F64) @ weight.to(_F64).T
    if softcap > 0:
        logits = softcap * torch.tanh(logits / softcap)
    lse = torch.logsumexp(logits, -1)
    counted = labels != ignore_index
    label_logit = logits.gather(1, labels.clamp(0, logits.shape[1] - 1).long().unsqueeze(1)).squeeze(1)
    per_row = lse - (1 - label_smoothing) * label_logit - label_smoothing * logits.mean(-1) + z_loss * lse * lse
    return torch.where(counted, per_row, torch.zeros_like(per_row)), lse, counted


def _reduce(per_row, counted, reduction):
    if int(reduction) == 0:
        return per_row
    total = per_row.sum()
    return (total / counted.sum() if int(reduction) == 1 else total).reshape(1)


def linear_cross_entropy(hidden, weight, labels, reduction=1, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                         softcap=0.0, vocab_chunk=0, path=0):
    per_row, lse, counted = _cross_entropy_rows(hidden, weight, labels, ignore_index, label_smoothing, z_loss,
                                                softcap)
    return _reduce(per_row, counted, reduction).to(torch.float32), lse.to(torch.float32)


def linear_cross_entropy_backward(grad_loss, hidden, weight, labels, lse, reduction=1, ignore_index=-100,
                                  label_smoothing=0.0, z_loss=0.0, softcap=0.0, vocab_chunk=0, path=0):
    """The gradients of linear_cross_entropy's loss by autograd through the forward above."""
    h = hidden.detach().to(_F64).requires_grad_()
    w = weight.detach().to(_F64).requires_grad_()
    per_row, _, counted = _cross_entropy_rows(h, w, labels, ignore_index, label_smoothing, z_loss, softcap)
    loss = _reduce(per_row, counted, reduction)
    loss.backward(grad_loss.to(_F64).reshape(loss.shape))
    return h.grad.to(hidden.dtype), w.grad.to(weight.dtype)
