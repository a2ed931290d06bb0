"""Exact plain-torch attention with flash-attn's semantics: the fallback for what the NPU ops cannot express.

Used for ``softcap`` (a tanh before the softmax: no fused-op argument), ALiBi where a ``pse`` would lose precision
or has no varlen form, band shapes the fused op rejects (no valid block), and varlen layouts it cannot take.
Every use is recorded by the caller (``REPORT.fallback``). Scores, softmax and accumulation in fp32, the
probabilities rounded to the input dtype before ``P @ V`` (as the kernels do); autograd comes from torch.

Semantics (flash-attn 2.8 ``attention_ref``): ``s = scale * q k^T``; ``softcap > 0``: ``s = softcap *
tanh(s / softcap)``; ALiBi adds ``-slope * |i + Sk - Sq - j|``; key j is visible to query i iff
``i + Sk - Sq - left <= j <= i + Sk - Sq + right`` (``causal``: right = 0; -1 = unbounded); a row with nothing
visible outputs 0 and has ``lse = +inf``; dropout scales kept probabilities by ``1 / (1 - p)``.
"""
from __future__ import annotations

import math

import torch


def visible(sq: int, sk: int, left: int, right: int, device) -> torch.Tensor | None:
    """(sq, sk) bool, True where query i may attend key j (bottom-right anchored band); None = everything."""
    if left < 0 and right < 0:
        return None
    i = torch.arange(sq, device=device).unsqueeze(1)
    j = torch.arange(sk, device=device).unsqueeze(0)
    d = j - i - (sk - sq)
    ok = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= d >= -left
    if right >= 0:
        ok &= d <= right
    return ok


def alibi_bias(slopes: torch.Tensor, batch: int, sq: int, sk: int, device) -> torch.Tensor:
    """fp32 (B|1, H, sq, sk) bias ``-slope * |i + sk - sq - j|`` for slopes (H,) or (B, H)."""
    i = torch.arange(sq, device=device).view(sq, 1)
    j = torch.arange(sk, device=device).view(1, sk)
    dist = (i + sk - sq - j).abs().float()
    s = slopes.float().to(device)
    s = s.view(1, -1, 1, 1) if s.dim() == 1 else s.view(s.shape[0], s.shape[1], 1, 1)
    return -s * dist


def attention(q, k, v, *, scale: float, left: int = -1, right: int = -1, softcap: float = 0.0, alibi=None,
              dropout_p: float = 0.0):
    """q (B, Sq, H, D), k/v (B, Sk, Hk, D) -> (out (B, Sq, H, Dv) in q's dtype, lse fp32 (B, H, Sq))."""
    B, Sq, H, _ = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    g = H // Hk
    qf = q.transpose(1, 2).float()
    kf = k.transpose(1, 2).float().repeat_interleave(g, dim=1)
    vf = v.transpose(1, 2).float().repeat_interleave(g, dim=1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    if alibi is not None:
        s = s + alibi_bias(alibi, B, Sq, Sk, q.device)
    ok = visible(Sq, Sk, left, right, q.device)
    if ok is not None:
        s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isneginf(lse)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(lse), lse).unsqueeze(-1))
    if dropout_p > 0:
        p = torch.nn.functional.dropout(p, dropout_p)
    if q.dtype != torch.float32:
        p = p.to(q.dtype).float()
    out = torch.matmul(p, vf)
    lse = torch.where(empty, torch.full_like(lse, math.inf), lse)
    return out.transpose(1, 2).to(q.dtype), lse


def varlen_attention(q, k, v, q_ends: list[int], k_ends: list[int], **kw):
    """TND q (Tq, H, D), k/v (Tk, Hk, D); cumulative end lists WITHOUT the leading 0 -> (out, lse (H, Tq))."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((q.shape[1], q.shape[0]), math.inf, dtype=torch.float32, device=q.device)
    outs, lses, spans = [], [], []
    pq = pk = 0
    for a, b in zip(q_ends, k_ends, strict=True):
        if a > pq:
            o, seq_lse = attention(q[pq:a].unsqueeze(0), k[pk:b].unsqueeze(0), v[pk:b].unsqueeze(0), **kw)
            outs.append(o[0])
            lses.append(seq_lse[0])
            spans.append((pq, a))
        pq, pk = a, b
    if outs:  # out-of-place assembly keeps autograd simple
        idx = torch.cat([torch.arange(a, b, device=q.device) for a, b in spans])
        out = out.index_put((idx,), torch.cat(outs))
        lse = lse.t().index_put((idx,), torch.cat(lses, dim=1).t()).t().contiguous()
    return out, lse
