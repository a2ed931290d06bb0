"""Shared helpers of tests/sim/test_ops_*.py: device selection and INDEPENDENT reference implementations.

Loaded by path (``load()`` in each test file) so it works whether or not tests/sim is a package.

Device: the tests run the *public* ops on npu tensors of the emulated NPU (``ascend_shim.sim.install()``); a device
that cannot install fails the tests instead of silently testing something else.

The references below never import ascend_shim: layouts, GQA head mapping, masks and the sparse-mode rules are
re-derived here from the documentation (torch_npu.md section 3, CANN sparse_mode docs) with plain loops,
matmul and softmax, so that a bug in the package cannot be mirrored by the reference.
"""
from __future__ import annotations

import functools
import math

import torch

NEG_BIG = -1e30  # the reference masks with a large finite negative and zeroes empty rows explicitly
FLT_MAX = 3.4028234663852886e38


@functools.cache
def _install() -> None:
    import ascend_shim.sim as sim

    sim.install()  # raises (and fails the test) if the emulated device cannot be built or installed
    torch.randn(2, device="npu")


# Install at import (test collection): torch's autograd engine sizes its per-device queues on the FIRST backward()
# of the process, so the npu device must exist before any backward runs (a cpu reference backward included).
_install()


def npu_ready() -> bool:
    _install()
    return True


def device() -> str:
    _install()
    return "npu"


def op(name: str, module: str):
    """The public op (npu tensors only)."""
    import importlib

    _install()
    return getattr(importlib.import_module(f"ascend_shim.sim.ops.{module}"), name)


def to_dev(*ts):
    d = device()
    out = tuple(t.detach().to(d, copy=True) if isinstance(t, torch.Tensor) else t for t in ts)
    return out if len(out) > 1 else out[0]


def tol(dtype):
    return {torch.float32: dict(atol=2e-5, rtol=2e-5),
            torch.float16: dict(atol=4e-3, rtol=4e-3),
            torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}[dtype]


def close(actual, expected, dtype, scale=1.0):
    t = tol(dtype)
    torch.testing.assert_close(actual.detach().float().cpu(), expected.detach().float().cpu(),
                               atol=t["atol"] * scale, rtol=t["rtol"] * scale)


# ------------------------------------------------------------------------------------------ layouts (independent)

def split_heads(t, layout, n):
    """Layout tensor -> (B, N, S, D) by explicit per-layout index semantics."""
    if layout == "BSH":
        b, s, h = t.shape
        return t.reshape(b, s, n, h // n).transpose(1, 2)
    if layout == "SBH":
        s, b, h = t.shape
        return t.reshape(s, b, n, h // n).permute(1, 2, 0, 3)
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BNSD":
        return t
    raise ValueError(layout)


def merge_heads(t, layout):
    b, n, s, d = t.shape
    if layout == "BSH":
        return t.transpose(1, 2).reshape(b, s, n * d)
    if layout == "SBH":
        return t.permute(2, 0, 1, 3).reshape(s, b, n * d)
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BNSD":
        return t
    raise ValueError(layout)


def make_layout(bnsd, layout):
    return merge_heads(bnsd, layout).contiguous()


# -------------------------------------------------------------------------------------------- masks (independent)

def allowed_matrix(mode, sq, skv, pre=2147483647, nxt=2147483647):
    """bool (sq, skv): True where query i may attend key j, from the documented sparse_mode definitions."""
    a = torch.zeros(sq, skv, dtype=torch.bool)
    for i in range(sq):
        for j in range(skv):
            if mode == "full" or mode == 1:
                ok = True
            elif mode == 0:  # band, anchored top-left: i - pre <= j <= i + next
                ok = i - pre <= j <= i + nxt
            elif mode == 2:  # leftUpCausal
                ok = j <= i
            elif mode == 3:  # rightDownCausal
                ok = j <= i + (skv - sq)
            elif mode == 4:  # band anchored bottom-right
                ok = i + (skv - sq) - pre <= j <= i + (skv - sq) + nxt
            else:
                raise ValueError(mode)
            a[i, j] = ok
    return a


def compressed_mask():
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


# ------------------------------------------------------------------------------------------ reference attention

def ref_attention_bnsd(q, k, v, allowed, scale, pse=None, pse_first=True, keep=None, keep_prob=1.0,
                       empty_rows_zero=True):
    """q (B,Nq,Sq,D), k/v (B,Nkv,Skv,*), allowed broadcastable to (B,Nq,Sq,Skv). fp32 math, autograd-friendly.

    Returns (out fp32, row max fp32, row sum fp32) -- max/sum of the masked scaled scores.
    """
    nq, nkv = q.shape[1], k.shape[1]
    g = nq // nkv
    kf = k.float().repeat_interleave(g, dim=1)  # query head h uses kv head h // g
    vf = v.float().repeat_interleave(g, dim=1)
    s = q.float() @ kf.transpose(-1, -2)
    if pse is None:
        s = s * scale
    elif pse_first:
        s = (s + pse.float()) * scale
    else:
        s = s * scale + pse.float()
    allowed = allowed.expand(s.shape)
    s = s.masked_fill(~allowed, NEG_BIG)
    m = s.max(dim=-1, keepdim=True).values
    e = torch.exp(s - m) * allowed
    row_sum = e.sum(dim=-1, keepdim=True)
    has = allowed.any(dim=-1, keepdim=True)
    if empty_rows_zero:
        p = torch.where(has, e / torch.where(has, row_sum, torch.ones_like(row_sum)), torch.zeros_like(e))
    else:
        p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = p * keep / keep_prob
    out = p @ vf
    # rows with nothing to attend: the kernel's invalid-row correction writes max=-FLT_MAX, sum=FLT_MAX
    m = torch.where(has, m, torch.full_like(m, -FLT_MAX))
    row_sum = torch.where(has, row_sum, torch.full_like(row_sum, FLT_MAX))
    return out, m.squeeze(-1), row_sum.squeeze(-1)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleave(x):
    out = torch.empty_like(x)
    out[..., 0::2] = -x[..., 1::2]
    out[..., 1::2] = x[..., 0::2]
    return out


def default_scale(d):
    return 1.0 / math.sqrt(d)
