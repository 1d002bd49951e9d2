"""Golden functions: each op written in PyTorch from its definition (`mojo-jit list`), in float64 and rounded once to
the output's dtype, the way the C++ references compute (tests/test_torch.py checks them against those).

They take the arguments of `torch.ops.mojo_jit.<op>` (mojo_jit.torch.schema(op)): the tensors the op reads, then the
optional and caller-given ones, then the scalars; they return what that op returns and update in place what it
declares mutated. mojo_jit.torch falls back to them (MOJO_JIT_BACKEND=auto|torch). The sampling ops draw with
the kernels' own random numbers (Philox 4x32-10 on each request's seed and offset), so their tokens are the kernels'
tokens, not only the same distribution.
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


# The scalars that only choose how a kernel runs (cooperative, path, splits, key_tile, query_tile, persistent) are
# taken and ignored: the result is the same whatever they choose, and a call the kernel takes must not fail on its fallback.
def softmax(x, cooperative=-1):
    return torch.softmax(x.to(_F64), -1).to(x.dtype)


def log_softmax(x, cooperative=-1):
    return torch.log_softmax(x.to(_F64), -1).to(x.dtype)


def softmax_backward(grad_out, out, cooperative=-1):
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
def gemm(c, a, b, alpha=1.0, beta=0.0, trans_a=0, trans_b=0, tf32=0, path=0, splits=0):
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


def linear(x, weight, bias=None, residual=None, activation=0, tf32=0, path=0, splits=0):
    y = x.to(_F64) @ weight.to(_F64).T
    if bias is not None:
        y = y + bias.to(_F64)
    y = _act(y, activation)
    if residual is not None:
        y = y + residual.to(_F64)
    return y.to(x.dtype)


def group_gemm(x, weight, offsets, tf32=0, path=0, gated_activation=0, weight_kn=0):
    """out[r] = x[r] weight[g]^T for the rows of group g, [offsets[g], offsets[g + 1]) (weight_kn: x[r] weight[g],
    the weights [groups, K, N]); gated: the weights' N are (gate, up) pairs and out[r] = act(gate) * up. Rows in no
    group are zeros here (the kernel leaves them alone)."""
    n = weight.shape[2 if weight_kn else 1] // (2 if gated_activation else 1)
    out = torch.zeros(x.shape[0], n, dtype=_F64, device=x.device)
    for g in range(weight.shape[0]):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        if hi <= lo:
            continue
        y = x[lo:hi].to(_F64) @ (weight[g].to(_F64) if weight_kn else weight[g].to(_F64).T)
        if gated_activation:
            y = _act(y[:, 0::2], gated_activation) * y[:, 1::2]
        out[lo:hi] = y
    return out.to(x.dtype)


def group_gemm_weight_grad(grad_out, x, offsets, tf32=0, path=0):
    """grad_weight[g] = grad_out[rows of g]^T x[rows of g]: group_gemm's weights' gradient; zeros for a group of no
    rows."""
    out = torch.zeros(offsets.shape[0] - 1, grad_out.shape[1], x.shape[1], dtype=_F64, device=x.device)
    for g in range(out.shape[0]):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        if hi > lo:
            out[g] = grad_out[lo:hi].to(_F64).T @ x[lo:hi].to(_F64)
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
         causal=1, key_tile=0, query_tile=0, persistent=0, path=0):
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


def sdpa_backward(grad_out, q, k, v, out, lse, cu_seqlens_q=None, cu_seqlens_k=None, sinks=None, grad_sinks=None,
                  grad_lse=None, scale=0.0, window=-1, softcap=0.0, causal=1):
    """The gradients of sdpa for q, k, v (and the sinks, into grad_sinks) of grad_out (and of lse's own, grad_lse) by
    autograd through sdpa above; its out and lse (the forward's, which the kernel reads) are not needed here."""
    leaves = [t.detach().to(_F64).requires_grad_() for t in (q, k, v)]
    s = None if sinks is None else sinks.detach().to(_F64).requires_grad_()
    row_lse = torch.empty(lse.shape, dtype=_F64, device=lse.device)
    o = sdpa(*leaves, cu_seqlens_q, cu_seqlens_k, s, row_lse, scale, window, softcap, causal)
    total = (o.to(_F64) * grad_out.to(_F64)).sum()
    if grad_lse is not None:
        total = total + (row_lse * grad_lse.to(_F64)).sum()
    wanted = leaves + ([s] if s is not None and grad_sinks is not None else [])
    grads = torch.autograd.grad(total, wanted, allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, wanted)]
    if len(grads) == 4:
        grad_sinks.copy_(grads[3].to(grad_sinks.dtype))
    return tuple(g.to(t.dtype) for g, t in zip(grads[:3], (q, k, v)))


def _paged_rows(cache, block_table, length):
    """A sequence's `length` keys from the paged cache [blocks, block_size, kv_heads, d] through its block table."""
    block_size = cache.shape[1]
    j = torch.arange(length, device=cache.device)
    return cache[block_table[j // block_size].long(), j % block_size]


def paged_prefill_gqa(q, k_cache, v_cache, cu_seqlens_q, block_tables, context_lens, sinks=None, lse=None, scale=0.0,
                      window=-1, softcap=0.0, query_tile=0, persistent=0, path=0):
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


# ---- sampling ----------------------------------------------------------------------------------------------------
def _philox_random24(seed: int, offset: int, stream: int) -> int:
    """The 24 random bits of a request's draw `stream` (kernel_templates/mojo_random.cuh): Philox 4x32-10 on counter
    (offset, stream) and key seed, first word's top 24 bits."""
    mask = 0xFFFFFFFF
    seed, offset = seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF
    c = [offset & mask, offset >> 32, stream & mask, 0]
    k0, k1 = seed & mask, seed >> 32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & mask, (p0 >> 32) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + 0x9E3779B9) & mask, (k1 + 0xBB67AE85) & mask
    return c[0] >> 8


def _sampling_weights(row, top_k: int, top_p: float, min_p: float):
    """exp(l - max) of the tokens top_k keeps (0: all; ties with the k-th kept), then top_p (the fewest highest
    holding that fraction of the top-k mass, ties kept), then min_p (exp(l - max) >= min_p); 0 for the others."""
    finite = torch.isfinite(row)
    if not bool(finite.any()):
        return torch.zeros_like(row)
    w = torch.where(finite, torch.exp(row - row[finite].max()), torch.zeros_like(row))
    key = torch.where(w > 0, row, torch.full_like(row, -math.inf))
    order = torch.sort(key, descending=True, stable=True).indices  # ties: the lower index first
    floor = -math.inf
    if 0 < top_k < row.shape[0]:
        floor = float(row[order[top_k - 1]])
    if top_p < 1.0:
        total = float(torch.cumsum(torch.where(row >= floor, w, torch.zeros_like(w)), 0)[-1])
        ranked = row[order] >= floor
        cum = torch.cumsum(w[order], 0)
        reach = (cum >= top_p * total) & ranked
        stop = int((~ranked).nonzero()[0]) if bool((~ranked).any()) else row.shape[0]
        hits = reach[:stop].nonzero()
        if hits.numel():
            floor = float(row[order[int(hits[0])]])
    return torch.where((row >= floor) & (w >= min_p), w, torch.zeros_like(w))


def _inverse_cdf(w, r24: int, greedy: bool) -> int:
    """The index where r24 / 2^24 of the total weight falls, in index order; greedy: the first nonzero one."""
    cum = torch.cumsum(w, 0)
    if not float(cum[-1]) > 0:
        return -1
    point = 0.0 if greedy else float(cum[-1]) * r24 * 2.0 ** -24
    nonzero = w > 0
    hit = (nonzero & (cum > point)).nonzero()
    return int(hit[0]) if hit.numel() else int(nonzero.nonzero()[-1])


def sample(logits, top_k, top_p, min_p, seed, offset, cooperative=-1):
    """Each row's token (top_k 1: greedy) and its log-probability under the unfiltered softmax; offset += 1."""
    tokens = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    logprobs = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
    for r in range(logits.shape[0]):
        row = logits[r].float().to(_F64)
        k = int(top_k[r])
        w = _sampling_weights(row, k, float(top_p[r]), float(min_p[r]))
        token = _inverse_cdf(w, _philox_random24(int(seed[r]), int(offset[r]), 0), k == 1)
        tokens[r] = token
        finite = row[torch.isfinite(row)]
        logprobs[r] = math.nan if token < 0 else float(row[token] - torch.logsumexp(finite, 0))
    offset += 1
    return tokens, logprobs


def reject_sample(draft_tokens, draft_probs, target_probs, seed, offset):
    """Speculative decoding's chain check: each draft token accepted while u * p_draft < p_target (u from the
    request's Philox draw j); then one token from the residual max(0, target - draft) (all of target after the last
    draft), -1 after it; offset += 1. Returns (out [batch, spec + 1], accepted [batch])."""
    batch, spec = draft_tokens.shape
    vocab = target_probs.shape[-1]
    out = torch.full((batch, spec + 1), -1, dtype=torch.int64, device=draft_tokens.device)
    accepted = torch.zeros(batch, dtype=torch.int64, device=draft_tokens.device)
    for r in range(batch):
        s, o = int(seed[r]), int(offset[r])
        j = 0
        while j < spec:
            d = int(draft_tokens[r, j])
            if d < 0 or d >= vocab:
                break
            u = torch.tensor(_philox_random24(s, o, j), dtype=torch.float32) * 2.0 ** -24
            if not bool(u * draft_probs[r, j, d].float() < target_probs[r, j, d].float()):
                break
            j += 1
        target = target_probs[r, j].to(_F64).clamp(min=0)
        residual = (target - draft_probs[r, j].to(_F64)).clamp(min=0) if j < spec else target
        r24 = _philox_random24(s, o, spec)
        token = _inverse_cdf(residual, r24, False)
        if token < 0:
            token = _inverse_cdf(target, r24, False)
        out[r, :j] = draft_tokens[r, :j]
        out[r, j] = token
        accepted[r] = j
    offset += 1
    return out, accepted


def apply_penalties_temperature(logits, token_ids, token_counts, repetition_penalty, presence_penalty,
                                frequency_penalty, temperature):
    """In place: logits / temperature (none where it is 0), then for each (id, count) of a request's list (id < 0
    pads): l / repetition if l > 0 else l * repetition, minus (frequency * count + presence if count > 0) /
    temperature."""
    batch, vocab = logits.shape
    temp = temperature.to(_F64)
    scale = torch.where(temp > 0, 1.0 / temp, torch.ones_like(temp)).reshape(-1, 1)
    out = logits.to(_F64) * scale
    rows = torch.arange(batch, device=logits.device)
    rep, pres, freq = (t.to(_F64) for t in (repetition_penalty, presence_penalty, frequency_penalty))
    for j in range(token_ids.shape[1]):  # in list order, as a repeated id would be penalised twice
        ids, counts = token_ids[:, j].long(), token_counts[:, j].to(_F64)
        valid = (ids >= 0) & (ids < vocab)
        at = ids.clamp(0, vocab - 1)
        l = out[rows, at]
        l = torch.where(l > 0, l / rep, l * rep)
        l = l - (freq * counts + torch.where(counts > 0, pres, torch.zeros_like(pres))) * scale.reshape(-1)
        out[rows[valid], at[valid]] = l[valid]
    logits.copy_(out.to(logits.dtype))


# ---- MoE routing -------------------------------------------------------------------------------------------------
def moe_gate(logits, ids, bias=None, sigmoid=0, groups=1, top_groups=0, renormalize=1, routed_scaling=1.0):
    """Each token's top_k experts (k: ids' second dim) by score (softmax or sigmoid of the logits; with bias, chosen
    by score + bias, DeepSeek-V3's correction), within the top_groups groups ranked by their two best (groups > 1);
    ties go to the lower expert or group. Writes ids; returns the weights: the chosen scores, renormalised to sum to
    1 if asked, times routed_scaling."""
    l = logits.to(_F64)
    tokens, experts = l.shape
    k = ids.shape[1]
    score = torch.sigmoid(l) if sigmoid else torch.softmax(l, -1)
    choice = l if bias is None else score + bias.to(_F64)
    groups = int(groups)
    top = int(top_groups) or groups
    allowed = torch.ones_like(choice, dtype=torch.bool)
    if groups > 1:
        members = choice.reshape(tokens, groups, experts // groups).sort(-1, descending=True).values
        group_score = members[..., 0] + (members[..., 1] if members.shape[-1] > 1 else 0)
        kept = torch.sort(group_score, dim=-1, descending=True, stable=True).indices[:, :top]
        allowed = torch.zeros(tokens, groups, dtype=torch.bool, device=l.device).scatter_(1, kept, True)
        allowed = allowed.repeat_interleave(experts // groups, dim=1)
    masked = torch.where(allowed, choice, torch.full_like(choice, -math.inf))
    order = torch.sort(masked, dim=-1, descending=True, stable=True).indices[:, :k]
    valid = torch.arange(k, device=l.device).reshape(1, -1) < allowed.sum(-1, keepdim=True)
    chosen = torch.where(valid, score.gather(1, order), torch.zeros((), dtype=_F64))
    total = chosen.sum(-1, keepdim=True)
    norm = routed_scaling / total if renormalize else torch.full_like(total, float(routed_scaling))
    norm = torch.where(total > 0, norm, torch.full_like(total, float(routed_scaling)))
    ids.copy_(torch.where(valid, order, torch.full_like(order, -1)).to(ids.dtype))
    return (chosen * norm).to(torch.float32)


def moe_mlp(x, ids, weights, w13, w2, activation=3, path=0):
    """out[t] = sum over k of weights[t, k] * expert e's MLP of x[t], e = ids[t, k] (negative: none): w2[e] (act(gate)
    * up), with w13[e]'s rows (gate_j, up_j) interleaved."""
    xd = x.to(_F64)
    out = torch.zeros_like(xd)
    for e in range(w13.shape[0]):
        token, slot = (ids == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        h = xd[token] @ w13[e].to(_F64).T
        h = _act(h[:, 0::2], activation) * h[:, 1::2]
        y = h @ w2[e].to(_F64).T
        out.index_add_(0, token, y * weights[token, slot].to(_F64).unsqueeze(1))
    return out.to(x.dtype)


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


def linear_cross_entropy_backward(grad_loss, hidden, weight, labels, lse, grad_lse=None, reduction=1,
                                  ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=0.0, vocab_chunk=0,
                                  path=0):
    """The gradients of linear_cross_entropy's loss (and of its lse, by grad_lse) by autograd through the forward
    above."""
    h = hidden.detach().to(_F64).requires_grad_()
    w = weight.detach().to(_F64).requires_grad_()
    per_row, row_lse, counted = _cross_entropy_rows(h, w, labels, ignore_index, label_smoothing, z_loss, softcap)
    loss = _reduce(per_row, counted, reduction)
    total = (loss * grad_loss.to(_F64).reshape(loss.shape)).sum()
    if grad_lse is not None:
        total = total + (row_lse * grad_lse.to(_F64)).sum()
    total.backward()
    return h.grad.to(hidden.dtype), w.grad.to(weight.dtype)
