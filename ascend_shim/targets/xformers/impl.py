"""xFormers' memory-efficient attention on NPU tensors: torch's scaled_dot_product_attention, same semantics.

xFormers picks an operator by the tensors' device; none of its operators (CUTLASS, FlashAttention, CK, Triton) runs
on an NPU, so its dispatcher raises a page-long "No operator found". For the arguments most callers pass
(3-D/4-D/5-D inputs, ``attn_bias`` None, a ``LowerTriangularMask`` (top-left causal), a
``LowerTriangularFromBottomRightMask`` or an additive tensor, dropout, ``scale``, ``output_dtype``) the call becomes
``torch.nn.functional.scaled_dot_product_attention``, which torch_npu runs with its fused attention; autograd
flows through it. Other biases (block-diagonal / varlen, paged, local windows) raise one line saying what to use.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


def _mask(attn_bias, q, mq: int, mk: int):
    """(attn_mask, is_causal) for SDPA, or None where the bias is not one this path computes exactly."""
    import torch
    from xformers.ops.fmha import attn_bias as ab

    if attn_bias is None:
        return None, False
    if isinstance(attn_bias, torch.Tensor):
        return attn_bias, False
    if type(attn_bias) is ab.LowerTriangularMask:
        return None, True
    if type(attn_bias) is ab.LowerTriangularFromBottomRightMask:
        keep = torch.ones(mq, mk, dtype=torch.bool, device=q.device).tril(diagonal=mk - mq)
        return keep, False
    if type(attn_bias) is ab.LowerTriangularMaskWithTensorBias:
        causal = torch.ones(mq, mk, dtype=torch.bool, device=q.device).tril()
        bias = attn_bias._bias
        return bias.masked_fill(~causal, float("-inf")), False
    raise LookupError(type(attn_bias).__name__)


def sdpa(query, key, value, attn_bias=None, p: float = 0.0, scale: float | None = None, output_dtype=None):
    """memory_efficient_attention's result for the inputs this path covers (LookupError names a bias it does not)."""
    import torch

    if query.dim() not in (3, 4, 5):
        raise LookupError(f"{query.dim()}-D inputs")
    shape = query.shape
    if query.dim() == 3:  # (B, M, K): one head
        q, k, v = (t.unsqueeze(2) for t in (query, key, value))
    elif query.dim() == 5:  # (B, M, G, H, K): groups of heads
        q, k, v = (t.flatten(2, 3) for t in (query, key, value))
    else:
        q, k, v = query, key, value
    if isinstance(attn_bias, torch.Tensor) and query.dim() == 3 and attn_bias.dim() == 3:
        attn_bias = attn_bias.unsqueeze(1)  # (B, Mq, Mk) -> (B, 1, Mq, Mk)
    mask, causal = _mask(attn_bias, q, q.shape[1], k.shape[1])
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal,
                                                           scale=scale)
    out = out.transpose(1, 2).reshape(*shape[:-1], value.shape[-1])
    return out if output_dtype is None else out.to(output_dtype)


def _api(ctx: PatchContext, name: str) -> Callable:
    import inspect

    orig, report, pid = ctx.original, ctx.report, ctx.patch.id
    signature = inspect.signature(orig)  # where each argument sits, read from the original (its p, scale, op ...)

    @functools.wraps(orig)
    def attention(query, key, value, attn_bias=None, *args, **kwargs):
        if getattr(query, "device", None) is None or query.device.type != "npu":
            return orig(query, key, value, attn_bias, *args, **kwargs)
        from ascend_shim.targets._shared.npu_checks import unsupported

        bound = signature.bind(query, key, value, attn_bias, *args, **kwargs).arguments
        for given in ("query", "key", "value", "attn_bias"):
            bound.pop(given)
        op = bound.pop("op", None)
        p = bound.pop("p", 0.0)
        unknown = set(bound) - {"scale", "output_dtype"}
        try:
            if unknown:
                raise LookupError(", ".join(sorted(unknown)))
            out = sdpa(query, key, value, attn_bias, p, bound.get("scale"), bound.get("output_dtype"))
        except LookupError as exc:
            raise unsupported(report, pid, f"xformers.ops.{name}({exc.args[0]})",
                              "xFormers has no NPU operator and this argument is not translated; use "
                              "torch.nn.functional.scaled_dot_product_attention, or flash_attn.flash_attn_varlen_func "
                              "for block-diagonal (varlen) batches.") from None
        detail = "torch scaled_dot_product_attention (NPU fused attention)"
        if op is not None:
            detail += f"; op={getattr(op, 'NAME', op)} ignored"
        report.translated(f"xformers.ops.{name}", detail)
        return out

    return attention


def memory_efficient_attention(ctx: PatchContext) -> Callable:
    return _api(ctx, "memory_efficient_attention")


def memory_efficient_attention_forward(ctx: PatchContext) -> Callable:
    return _api(ctx, "memory_efficient_attention_forward")
