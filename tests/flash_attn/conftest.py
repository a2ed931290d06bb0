"""The shim active with the sim backend for the flash_attn tests, plus an independent reference attention.

The reference is plain fp32 matmul + softmax with explicit boolean masks built element by element from
flash-attn's documented rule (key j visible to query i iff ``i + Sk - Sq - left <= j <= i + Sk - Sq + right``,
causal: right = 0); it shares no code with the provider.
"""
import math

import pytest
import torch

import ascend_shim
from ascend_shim.report import REPORT


@pytest.fixture(scope="module")
def fa():
    ascend_shim.activate(backend="sim", inherit=False)
    import flash_attn
    yield flash_attn
    ascend_shim.deactivate()


def visible_mask(sq, sk, causal=False, window=(-1, -1)):
    left, right = window
    if causal:
        right = 0
    m = torch.zeros(sq, sk, dtype=torch.bool)
    for i in range(sq):
        for j in range(sk):
            lo_ok = left < 0 or j >= i + sk - sq - left
            hi_ok = right < 0 or j <= i + sk - sq + right
            m[i, j] = lo_ok and hi_ok
    return m


def ref_attention(q, k, v, causal=False, window=(-1, -1), scale=None, softcap=0.0, alibi=None, upcast=True):
    """q (B, Sq, H, D), k/v (B, Sk, Hk, D) on any device -> (out (B, Sq, H, D) fp32 or q dtype, lse (B, H, Sq))."""
    dt = torch.float32 if upcast else q.dtype
    q, k, v = q.cpu().to(dt), k.cpu().to(dt), v.cpu().to(dt)
    B, Sq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(D) if scale is None else scale
    k = k.repeat_interleave(H // Hk, dim=2)
    v = v.repeat_interleave(H // Hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k).float() * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi is not None:
        i = torch.arange(Sq).view(-1, 1)
        j = torch.arange(Sk).view(1, -1)
        s = s - alibi.cpu().float().view(-1, H, 1, 1) * (i + Sk - Sq - j).abs()
    vis = visible_mask(Sq, Sk, causal, window)
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    out = torch.einsum("bhqk,bkhd->bqhd", p.to(dt), v)
    return out, lse


def assert_close_fa(out, ref32, ref_lp, name="", atol=1e-3):
    """flash-attn's test rule: error vs the fp32 reference at most 2x that of a same-dtype torch reference."""
    err = (out.detach().float().cpu() - ref32.float()).abs().max().item()
    err_pt = (ref_lp.float() - ref32.float()).abs().max().item()
    atol += torch.finfo(out.dtype).eps * ref32.float().abs().max().item()  # one rounding of the result
    assert err <= 2 * err_pt + atol, f"{name}: max err {err:.3g} > 2 * {err_pt:.3g} + {atol}"


def fallbacks(api_prefix=""):
    return [e for e in REPORT.events() if e.get("category") == "fallback" and e.get("api", "").startswith(api_prefix)]


def rope_ref(x, cos, sin, pos, interleaved):
    """x (..., S, H, D) rotated at integer positions pos (..., S), in fp32: written from the formula (rotary
    on the first 2 * cos.shape[-1] features, the rest passed through)."""
    rd = cos.shape[-1] * 2
    c, s = cos[pos].unsqueeze(-2).float(), sin[pos].unsqueeze(-2).float()
    xr = x[..., :rd].float()
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    else:
        x1, x2 = xr.chunk(2, dim=-1)
        out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    return torch.cat((out, x[..., rd:].float()), dim=-1)
