"""xFormers (real package) on the NPU: it imports (with the provided flash_attn), and memory_efficient_attention on
NPU tensors computes what torch's attention computes on the CPU for the same inputs, or refuses in one line."""
import math

import pytest
import torch

from ascend_shim.errors import UnsupportedOnNPUError

pytest.importorskip("xformers")


def _reference(q, k, v, bias=None, causal_from=None):
    """Attention in float64 on the CPU: q/k/v (B, M, H, K), additive bias (B, H, Mq, Mk), causal top-left (0) or
    bottom-right (Mk - Mq)."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    if causal_from is not None:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril(diagonal=causal_from)
        scores = scores.masked_fill(~keep, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


def test_import_under_the_shim_and_attention_matches_the_cpu(clean_shim):
    clean_shim.activate("sim")
    import xformers.ops as xops
    from xformers.ops.fmha import attn_bias

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, 8) for _ in range(3))
    k7, v7 = torch.randn(2, 7, 3, 8), torch.randn(2, 7, 3, 8)
    bias = torch.randn(2, 3, 5, 5)
    npu = lambda *ts: [t.to("npu") for t in ts]  # noqa: E731
    cases = [
        (xops.memory_efficient_attention(*npu(q, k, v)), _reference(q, k, v)),
        (xops.memory_efficient_attention(*npu(q, k, v), attn_bias=xops.LowerTriangularMask()),
         _reference(q, k, v, causal_from=0)),
        (xops.memory_efficient_attention(*npu(q, k7, v7), attn_bias=attn_bias.LowerTriangularFromBottomRightMask()),
         _reference(q, k7, v7, causal_from=2)),
        (xops.memory_efficient_attention(*npu(q, k, v), attn_bias=bias.to("npu")), _reference(q, k, v, bias)),
    ]
    for i, (got, want) in enumerate(cases):
        assert got.device.type == "npu" and got.shape == want.shape, i
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5, msg=str(i))


def test_gradients_flow_and_3d_inputs(clean_shim):
    clean_shim.activate("sim")
    import xformers.ops as xops

    torch.manual_seed(1)
    q, k, v = (torch.randn(4, 6, 8) for _ in range(3))  # (B*H, M, K), as diffusers calls it
    leaves = [t.to("npu").requires_grad_() for t in (q, k, v)]
    out = xops.memory_efficient_attention(*leaves, scale=0.5)
    out.sum().backward()
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*ref_leaves, scale=0.5)
    ref.sum().backward()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(leaves, ref_leaves, strict=True):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-5, atol=1e-5)


def test_an_untranslated_bias_is_one_line(clean_shim):
    clean_shim.activate("sim")
    import xformers.ops as xops
    from xformers.ops.fmha.attn_bias import BlockDiagonalMask

    q = torch.randn(1, 5, 2, 8, device="npu")
    with pytest.raises(UnsupportedOnNPUError, match="BlockDiagonalMask") as info:
        xops.memory_efficient_attention(q, q, q, attn_bias=BlockDiagonalMask.from_seqlens([2, 3]))
    assert "\n" not in str(info.value)


def test_provided_flash_attn_has_what_libraries_import_from_2_6(clean_shim):
    """xFormers reads flash_attn_interface.flash_attn_gpu; diffusers imports the _wrapped_* functions."""
    clean_shim.activate("sim")
    from flash_attn import flash_attn_func
    from flash_attn.flash_attn_interface import (  # noqa: F401
        _wrapped_flash_attn_backward,
        _wrapped_flash_attn_forward,
        flash_attn_gpu,
    )

    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 4, 2, 16, dtype=torch.float16, device="npu") for _ in range(3))
    out, lse, _, rng = flash_attn_gpu.fwd(q, k, v, None, None, 0.0, 0.25, True, -1, -1, 0.0, False, None)
    torch.testing.assert_close(out, flash_attn_func(q, k, v, softmax_scale=0.25, causal=True))
    wrapped = _wrapped_flash_attn_forward(q, k, v, 0.0, 0.25, True, -1, -1, 0.0, None, False)
    torch.testing.assert_close(wrapped[0], out)
    dout = torch.ones_like(out)
    dq, dk, dv, _ = flash_attn_gpu.bwd(dout, q, k, v, out, lse, None, None, None, None, 0.0, 0.25, True, -1, -1,
                                       0.0, False, None, rng)
    assert dq.shape == q.shape and torch.isfinite(dq.float()).all()
