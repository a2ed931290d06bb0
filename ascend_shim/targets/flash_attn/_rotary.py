"""Rotary embedding with flash-attn's conventions, on ``torch_npu.npu_rotary_mul`` where it fits.

flash-attn gives half-width ``cos``/``sin`` of shape (seqlen_ro, rotary_dim / 2) and rotates the first
``rotary_dim`` features: non-interleaved (GPT-NeoX, ``x1*cos - x2*sin | x2*cos + x1*sin`` over the two halves)
or interleaved (GPT-J, pairs (2i, 2i+1)). ``npu_rotary_mul(x, r1, r2, mode)`` computes ``x*r1 + rotate(x)*r2``
with full-width r1/r2, so ``r1 = cat(cos, cos)`` / ``repeat_interleave(cos, 2)`` and likewise ``r2`` from sin.
The op takes 4-D input and r1/r2 of the documented broadcast shapes (half: 1S1D or BS1D for BSND; interleave:
1S1D only); per-batch positions in interleaved mode, a dtype mismatch between x and cos, or tensors off the NPU
use the same formula in plain torch (fp32 math, exact), recorded as a fallback. Autograd comes from the op / torch.
"""
from __future__ import annotations

import torch

from ascend_shim.report import REPORT


def positions(x, seqlen_offsets=0, cu_seqlens=None):
    """Token positions: (S,) when shared by the batch, (B, S) per batch, or (1, T) for varlen (T, H, D) input."""
    dev = x.device
    if cu_seqlens is not None:
        tok = torch.arange(x.shape[0], device=dev)
        cu = cu_seqlens.to(device=dev, dtype=torch.long)
        seq = torch.searchsorted(cu[1:], tok, right=True).clamp_(max=cu.numel() - 2)
        pos = tok - cu[seq]
        if isinstance(seqlen_offsets, torch.Tensor):
            pos = pos + seqlen_offsets.to(device=dev, dtype=torch.long)[seq]
        else:
            pos = pos + int(seqlen_offsets)
        return pos.unsqueeze(0)
    S = x.shape[1]
    if isinstance(seqlen_offsets, torch.Tensor):
        return seqlen_offsets.to(device=dev, dtype=torch.long).view(-1, 1) + torch.arange(S, device=dev)
    return torch.arange(int(seqlen_offsets), int(seqlen_offsets) + S, device=dev)


def _full_width(c, interleaved):
    return c.repeat_interleave(2, dim=-1) if interleaved else torch.cat((c, c), dim=-1)


def _rotate(x, interleaved):
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rotate_at(x, cos, sin, pos, interleaved=False, api="apply_rotary_emb"):
    """Rotate x (B, S, H, D) or varlen (T, H, D) at positions ``pos`` ((S,), (B, S) or (1, T)); new tensor."""
    varlen = x.dim() == 3
    x4 = x.unsqueeze(0) if varlen else x
    rd = cos.shape[-1] * 2
    if rd > x4.shape[-1]:
        raise ValueError(f"rotary_dim ({rd}) must be <= headdim ({x4.shape[-1]})")
    per_batch = pos.dim() == 2 and pos.shape[0] > 1
    p = pos if pos.dim() == 2 else pos.unsqueeze(0)
    c = cos[p].unsqueeze(2)  # (B|1, S, 1, rd/2)
    s = sin[p].unsqueeze(2)
    r1, r2 = _full_width(c, interleaved), _full_width(s, interleaved)
    xr = x4[..., :rd]
    fits = (x.device.type == "npu" and cos.dtype == x.dtype and sin.dtype == x.dtype
            and not (interleaved and per_batch))
    if fits:
        import torch_npu

        out = torch_npu.npu_rotary_mul(xr, r1, r2, rotary_mode="interleave" if interleaved else "half")
    else:
        REPORT.fallback(api, "rotary in plain torch (npu_rotary_mul does not take this shape/dtype/device)")
        out = (xr.float() * r1.float() + _rotate(xr.float(), interleaved) * r2.float()).to(x.dtype)
    if rd < x4.shape[-1]:
        out = torch.cat((out, x4[..., rd:]), dim=-1)
    return out[0] if varlen else out


def apply(x, cos, sin, interleaved=False, seqlen_offsets=0, cu_seqlens=None, api="apply_rotary_emb"):
    """flash-attn's ``apply_rotary`` (out of place)."""
    return rotate_at(x, cos, sin, positions(x, seqlen_offsets, cu_seqlens), interleaved, api)
