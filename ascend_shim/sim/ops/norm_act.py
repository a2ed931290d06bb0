"""Emulated ``torch_npu.npu_rms_norm`` and ``torch_npu.npu_swiglu`` (with autograd, fp32 math).

* ``npu_rms_norm(input, gamma, epsilon=1e-06) -> (y, rstd)``: ``rstd = 1/sqrt(mean(x^2) + eps)`` over the trailing
  ``gamma.dim()`` dims, ``y = x * rstd * gamma``; ``rstd`` is fp32 shaped like ``input`` with the normalised dims
  set to 1 and is not differentiable. ``input`` has 2-8 dims, ``gamma.shape == input.shape[-gamma.dim():]`` and
  gamma's dtype must equal the input dtype (torch_npu's documented constraints).
* ``npu_swiglu(input, dim=-1) = silu(A) * B`` where ``A, B = input.chunk(2, dim)`` (A first); 1-8 dims, the split
  dim even.
* their backward ops, which the ops' autograd calls as on the NPU: ``npu_rms_norm_backward(dy, input, gamma, rstd)
  -> (dx, dgamma)`` (dgamma in float32, as the NPU kernel returns it) and ``npu_swiglu_backward(grad_output, input,
  dim=-1) -> dx``.
"""
from __future__ import annotations

import torch

from ._common import check, check_float_dtypes, check_npu, dtype_name, record

OP_RMS = "npu_rms_norm"
OP_RMS_BACKWARD = "npu_rms_norm_backward"
OP_SWIGLU = "npu_swiglu"
OP_SWIGLU_BACKWARD = "npu_swiglu_backward"
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, eps):
        dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + eps)
        y = (xf * rstd * gamma.float()).to(x.dtype)
        ctx.save_for_backward(x, gamma, rstd)
        ctx.mark_non_differentiable(rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, gamma, rstd = ctx.saved_tensors
        dx, dgamma = _rms_norm_grads(dy, x, gamma, rstd, need_dgamma=ctx.needs_input_grad[1])
        return dx, None if dgamma is None else dgamma.to(gamma.dtype), None


def _rms_norm_grads(dy, x, gamma, rstd, need_dgamma=True):
    """(dx in x's dtype, dgamma in float32 or None)."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf, dyf, gf = x.float(), dy.float(), gamma.float()
    xhat = xf * rstd
    g = dyf * gf
    dx = rstd * (g - xhat * (g * xhat).mean(dim=dims, keepdim=True))
    dgamma = None
    if need_dgamma:
        lead = tuple(range(x.dim() - gamma.dim()))
        dgamma = (dyf * xhat).sum(dim=lead) if lead else dyf * xhat
    return dx.to(x.dtype), dgamma


def npu_rms_norm(input, gamma, epsilon=1e-06):  # noqa: A002 - torch_npu's name
    record(OP_RMS)
    check_npu(OP_RMS, input=input, gamma=gamma)
    return _npu_rms_norm(input, gamma, epsilon)


def _npu_rms_norm(input, gamma, epsilon=1e-06):  # noqa: A002
    check_float_dtypes(OP_RMS, _FLOATS, input=input)
    check(gamma.dtype == input.dtype, OP_RMS, f"gamma dtype must equal the input dtype, but got input="
                                              f"{dtype_name(input.dtype)}, gamma={dtype_name(gamma.dtype)}")
    check(2 <= input.dim() <= 8, OP_RMS, f"input must have 2-8 dims, but got {input.dim()}")
    check(input.dim() >= gamma.dim() >= 1, OP_RMS, "The gamma shape should not be bigger than self shape.")
    check(tuple(gamma.shape) == tuple(input.shape[input.dim() - gamma.dim():]), OP_RMS,
          f"gamma shape {list(gamma.shape)} must equal the trailing dims of input {list(input.shape)}")
    return _RmsNorm.apply(input, gamma, float(epsilon))


def npu_rms_norm_backward(dy, input, gamma, rstd):  # noqa: A002 - torch_npu's name
    """``(dx, dgamma)`` of ``npu_rms_norm`` from its saved ``rstd``; dgamma in float32."""
    record(OP_RMS_BACKWARD)
    check_npu(OP_RMS_BACKWARD, dy=dy, input=input, gamma=gamma, rstd=rstd)
    check(tuple(dy.shape) == tuple(input.shape), OP_RMS_BACKWARD,
          f"dy shape {list(dy.shape)} must equal the input shape {list(input.shape)}")
    check(input.dim() >= gamma.dim() >= 1 and
          tuple(gamma.shape) == tuple(input.shape[input.dim() - gamma.dim():]), OP_RMS_BACKWARD,
          f"gamma shape {list(gamma.shape)} must equal the trailing dims of input {list(input.shape)}")
    check(rstd.dtype == torch.float32, OP_RMS_BACKWARD, f"rstd must be float32, but got {dtype_name(rstd.dtype)}")
    return _rms_norm_grads(dy, input, gamma, rstd)


class _SwiGlu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        a, b = x.float().chunk(2, dim=dim)
        ctx.dim = dim
        ctx.save_for_backward(x)
        return (torch.nn.functional.silu(a) * b).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _swiglu_grad(g, x, ctx.dim), None


def _swiglu_grad(g, x, dim):
    a, b = x.float().chunk(2, dim=dim)
    gf = g.float()
    sig = torch.sigmoid(a)
    silu = a * sig
    da = gf * b * sig * (1 + a * (1 - sig))
    db = gf * silu
    return torch.cat((da, db), dim=dim).to(x.dtype)


def npu_swiglu(input, dim=-1):  # noqa: A002 - torch_npu's name
    record(OP_SWIGLU)
    check_npu(OP_SWIGLU, input=input)
    return _npu_swiglu(input, dim)


def _npu_swiglu(input, dim=-1):  # noqa: A002
    check_float_dtypes(OP_SWIGLU, _FLOATS, input=input)
    nd = input.dim()
    check(1 <= nd <= 8, OP_SWIGLU, f"input must have 1-8 dims, but got {nd}")
    check(-nd <= dim <= nd - 1, OP_SWIGLU, f"dim must be in range [{-nd}, {nd - 1}], but got {dim}")
    d = dim % nd
    check(input.shape[d] % 2 == 0, OP_SWIGLU, f"input.shape[{dim}] = {input.shape[d]} must be divisible by 2")
    check(input.numel() > 0, OP_SWIGLU, "empty tensors are not supported")
    return _SwiGlu.apply(input, d)


def npu_swiglu_backward(grad_output, input, dim=-1):  # noqa: A002 - torch_npu's name
    """The input gradient of ``npu_swiglu``."""
    record(OP_SWIGLU_BACKWARD)
    check_npu(OP_SWIGLU_BACKWARD, grad_output=grad_output, input=input)
    nd = input.dim()
    check(1 <= nd <= 8 and -nd <= dim <= nd - 1, OP_SWIGLU_BACKWARD,
          f"dim must be in range [{-nd}, {nd - 1}], but got {dim}")
    d = dim % nd
    expected = [*input.shape[:d], input.shape[d] // 2, *input.shape[d + 1:]]
    check(input.shape[d] % 2 == 0 and list(grad_output.shape) == expected, OP_SWIGLU_BACKWARD,
          f"grad_output shape {list(grad_output.shape)} must be the output shape {expected}")
    return _swiglu_grad(grad_output, input, d)
