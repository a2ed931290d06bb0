"""Device-agnostic attention math shared by the emulated FA / PFA / IFA / FIA ops.

Canonical tensors are 5-D so that GQA never materialises repeated K/V:

* ``q``: ``(B, Nkv, G, Sq, D)`` (query head ``h = kv_head * G + g``, the ``repeat_kv`` / ``repeat_interleave``
  convention the NPU kernels use: ``Nq / Nkv = G`` query heads share one KV head);
* ``k``: ``(B, Nkv, 1, Skv, D)``, ``v``: ``(B, Nkv, 1, Skv, Dv)``;
* masks, pse and dropout-keep masks: anything broadcastable to ``(B, Nkv, G, Sq, Skv)``; ``masked`` is True where
  the score is removed (the NPU convention: 1/True = masked).

Numerics follow the kernels: scores, softmax statistics and accumulation in fp32; masked scores are *selected*
to ``-FLT_MAX`` (not -inf), so a row whose every score is masked gives ``max = -FLT_MAX``; with invalid-row
correction such rows output 0 and report ``sum = FLT_MAX`` (what the hardware writes), without it they are the
uniform average that the select-then-softmax formula produces. The probabilities are rounded to the input dtype
before the P.V product, as the cube unit consumes fp16/bf16.
"""
from __future__ import annotations

import torch

from ._common import FLT_MAX

NEG = -FLT_MAX


def band_masked(sq: int, skv: int, pre: int, nxt: int, device, offset: int = 0) -> torch.Tensor:
    """``(sq, skv)`` bool, True outside ``i + offset - pre <= j <= i + offset + nxt``."""
    i = torch.arange(sq, device=device).unsqueeze(1)
    j = torch.arange(skv, device=device).unsqueeze(0)
    d = j - i - offset
    return (d < -pre) | (d > nxt)


def causal_masked(sq: int, skv: int, device, offset: int = 0) -> torch.Tensor:
    """``(sq, skv)`` bool, True where ``j > i + offset`` (offset 0: top-left, ``skv - sq``: bottom-right)."""
    i = torch.arange(sq, device=device).unsqueeze(1)
    j = torch.arange(skv, device=device).unsqueeze(0)
    return j > i + offset


def combine(*masks):
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else (out | m)
    return out


def scores(q, k, scale: float, pse=None, pse_first: bool = True, masked=None, qk_dtype=None):
    """fp32 ``Mask(scale * (QK^T + pse))`` (training FA, ``pse_first``) or ``Mask(scale * QK^T + pse)`` (inference).
    ``qk_dtype``: QK^T is rounded to it first (a kernel that keeps the product in fp16).

    Returns a fresh tensor (callers may modify it in place).
    """
    s = torch.matmul(q.float(), k.float().transpose(-1, -2))
    if qk_dtype is not None:
        s = _round(s, qk_dtype)
    if pse is not None:
        if pse_first:
            s.add_(pse.float()).mul_(scale)
        else:
            s.mul_(scale).add_(pse.float())
    else:
        s.mul_(scale)
    if masked is not None:
        s.masked_fill_(masked, NEG)
    return s


def _round(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return p if dtype == torch.float32 else p.to(dtype).float()


def forward(q, k, v, *, scale: float, pse=None, pse_first: bool = True, masked=None, keep=None,
            keep_prob: float = 1.0, correct_invalid: bool = False, qk_dtype=None):
    """Returns ``(out fp32 (B,Nkv,G,Sq,Dv), max fp32 (B,Nkv,G,Sq), sum fp32 (B,Nkv,G,Sq))``. Not differentiable."""
    dtype = q.dtype
    p = scores(q, k, scale, pse, pse_first, masked, qk_dtype)
    m = p.amax(dim=-1, keepdim=True)
    p.sub_(m).exp_()
    row_sum = p.sum(dim=-1, keepdim=True)
    p.div_(row_sum)
    if correct_invalid and masked is not None:
        invalid = m == NEG
        p.masked_fill_(invalid, 0.0)
        row_sum = row_sum.masked_fill(invalid, FLT_MAX)
    if keep is not None:
        p.mul_(keep).div_(keep_prob)
    out = torch.matmul(_round(p, dtype), v.float())
    return out, m.squeeze(-1), row_sum.squeeze(-1)


def backward(q, k, v, dy, attention_in, smax, ssum, *, scale: float, pse=None, masked=None, keep=None,
             keep_prob: float = 1.0, need_dpse: bool = False):
    """Gradients of the training FA from the forward statistics, as the grad kernel computes them.

    ``P = exp(S - softmax_max) / softmax_sum`` is recomputed from the *given* statistics and
    ``D = rowsum(dy * attention_in)``; ``dS = P * (dP - D)`` with ``dP = dy V^T`` (dropout-masked), zero at masked
    positions (the select has no gradient there). Returns fp32 ``dq (B,Nkv,G,Sq,D)``, ``dk``/``dv`` summed over
    G ``(B,Nkv,1,Skv,*)`` and the score gradient ``dscore = scale * dS`` for dpse (or None).
    """
    dtype = q.dtype
    p = scores(q, k, scale, pse, True, masked)
    p.sub_(smax.unsqueeze(-1)).exp_().div_(ssum.unsqueeze(-1))
    dyf = dy.float()
    dp = torch.matmul(dyf, v.float().transpose(-1, -2))
    if keep is not None:
        pd = p * keep / keep_prob
        dp.mul_(keep).div_(keep_prob)
    else:
        pd = p
    dv = torch.matmul(_round(pd, dtype).transpose(-1, -2), dyf).sum(dim=2, keepdim=True)
    del pd
    dterm = (dyf * attention_in.float()).sum(dim=-1, keepdim=True)
    ds = dp.sub_(dterm).mul_(p)
    del p
    if masked is not None:
        ds.masked_fill_(masked, 0.0)
    ds.mul_(scale)
    dq = torch.matmul(ds, k.float())
    dk = torch.matmul(ds.transpose(-1, -2), q.float()).sum(dim=2, keepdim=True)
    return dq, dk, dv, (ds if need_dpse else None)


def reduce_to(grad: torch.Tensor, shape) -> torch.Tensor:
    """Sum a broadcast gradient back to ``shape`` (same rank)."""
    dims = [i for i, (g, s) in enumerate(zip(grad.shape, shape, strict=True)) if s == 1 and g != 1]
    return grad.sum(dim=dims, keepdim=True) if dims else grad
