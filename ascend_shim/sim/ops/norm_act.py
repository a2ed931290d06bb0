"""Emulated ``torch_npu.npu_rms_norm``, ``torch_npu.npu_swiglu`` and ``torch_npu.npu_geglu`` (with autograd, fp32
math).

* ``npu_rms_norm(input, gamma, epsilon=1e-06) -> (y, rstd)``: ``rstd = 1/sqrt(mean(x^2) + eps)`` over the trailing
  ``gamma.dim()`` dims, ``y = x * rstd * gamma``; ``rstd`` is fp32 shaped like ``input`` with the normalised dims
  set to 1 and is not differentiable. ``input`` has 2-8 dims, ``gamma.shape == input.shape[-gamma.dim():]`` and
  gamma's dtype must equal the input dtype (torch_npu's documented constraints).
* ``npu_swiglu(input, dim=-1) = silu(A) * B`` where ``A, B = input.chunk(2, dim)`` (A first); 1-8 dims, the split
  dim even.
* ``npu_geglu(input, dim=-1, approximate=1, activate_left=False) -> (y, gelu)``: ``A, B = input.chunk(2, dim)``;
  the activation takes the right half B (``activate_left=True``: the left half A) and ``y`` is the other half times
  it: ``gelu = GELU(B)``, ``y = A * gelu``; ``approximate`` 0 is the erf GELU, 1 (the default) its tanh form. Both
  outputs have the input's dtype, half its size along ``dim``; ``gelu`` is not differentiable. float16, bfloat16
  and float32, 1-8 dims, the split dim even (aclnnGeGluV3's and torch_npu's Meta kernel's checks).
* their backward ops, which the ops' autograd calls as on the NPU: ``npu_rms_norm_backward(dy, input, gamma, rstd)
  -> (dx, dgamma)`` (dgamma in float32, as the NPU kernel returns it), ``npu_swiglu_backward(grad_output, input,
  dim=-1) -> dx`` and ``npu_geglu_grad(grad_output, input, gelu, dim=-1, approximate=1, activate_left=False) -> dx``
  (the other half's gradient is ``grad_output * gelu``, from the ``gelu`` it is given, as aclnnGeGluV3Backward's).
"""
from __future__ import annotations

import math

import torch

from ._common import check, check_float_dtypes, check_npu, dtype_name
from ._derivatives import OpFunction
from ._registry import npu_op

OP_RMS = "npu_rms_norm"
OP_RMS_BACKWARD = "npu_rms_norm_backward"
OP_SWIGLU = "npu_swiglu"
OP_SWIGLU_BACKWARD = "npu_swiglu_backward"
OP_GEGLU = "npu_geglu"
OP_GEGLU_GRAD = "npu_geglu_grad"
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _half_shape(x, dim):
    """The shape of one half of ``x`` split along ``dim``."""
    shape = list(x.shape)
    shape[dim] = shape[dim] // 2
    return shape


# ---------------------------------------------------------------------------------------------------- rms_norm

class _RmsNorm(OpFunction):
    INPUTS = ("self", "gamma")

    @staticmethod
    def forward(ctx, call, x, gamma):
        y, rstd = call.below_autograd()
        ctx.grad_op = call.grad_op
        ctx.save_for_backward(x, gamma, rstd)
        ctx.mark_non_differentiable(rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, gamma, rstd = ctx.saved_tensors
        dx, dgamma = ctx.grad_op(dy, x, gamma, rstd)
        return None, dx, dgamma


def _rms_norm_meta(input, gamma, epsilon=1e-06):  # noqa: A002 - the op's argument name
    kept = input.dim() - gamma.dim()
    return torch.empty_like(input), input.new_empty([*input.shape[:kept], *([1] * gamma.dim())], dtype=torch.float32)


@npu_op(meta=_rms_norm_meta, derivative=_RmsNorm, grad_op=OP_RMS_BACKWARD, public=True)
def npu_rms_norm(input, gamma, epsilon=1e-06):  # noqa: A002 - torch_npu's name
    check_npu(OP_RMS, input=input, gamma=gamma)
    check_float_dtypes(OP_RMS, _FLOATS, input=input)
    check(gamma.dtype == input.dtype, OP_RMS, f"gamma dtype must equal the input dtype, but got input="
                                              f"{dtype_name(input.dtype)}, gamma={dtype_name(gamma.dtype)}")
    check(2 <= input.dim() <= 8, OP_RMS, f"input must have 2-8 dims, but got {input.dim()}")
    check(input.dim() >= gamma.dim() >= 1, OP_RMS, "The gamma shape should not be bigger than self shape.")
    check(tuple(gamma.shape) == tuple(input.shape[input.dim() - gamma.dim():]), OP_RMS,
          f"gamma shape {list(gamma.shape)} must equal the trailing dims of input {list(input.shape)}")
    dims = tuple(range(input.dim() - gamma.dim(), input.dim()))
    xf = input.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + float(epsilon))
    return (xf * rstd * gamma.float()).to(input.dtype), rstd


def _rms_norm_backward_meta(dy, input, gamma, rstd):  # noqa: A002
    return torch.empty_like(input), gamma.new_empty(gamma.shape, dtype=torch.float32)


@npu_op(meta=_rms_norm_backward_meta, internal=True)
def npu_rms_norm_backward(dy, input, gamma, rstd):  # noqa: A002 - torch_npu's name
    """``(dx, dgamma)`` of ``npu_rms_norm`` from its saved ``rstd``; dgamma in float32."""
    check_npu(OP_RMS_BACKWARD, dy=dy, input=input, gamma=gamma, rstd=rstd)
    check(tuple(dy.shape) == tuple(input.shape), OP_RMS_BACKWARD,
          f"dy shape {list(dy.shape)} must equal the input shape {list(input.shape)}")
    check(input.dim() >= gamma.dim() >= 1 and
          tuple(gamma.shape) == tuple(input.shape[input.dim() - gamma.dim():]), OP_RMS_BACKWARD,
          f"gamma shape {list(gamma.shape)} must equal the trailing dims of input {list(input.shape)}")
    check(rstd.dtype == torch.float32, OP_RMS_BACKWARD, f"rstd must be float32, but got {dtype_name(rstd.dtype)}")
    dims = tuple(range(input.dim() - gamma.dim(), input.dim()))
    xf, dyf, gf = input.float(), dy.float(), gamma.float()
    xhat = xf * rstd
    g = dyf * gf
    dx = rstd * (g - xhat * (g * xhat).mean(dim=dims, keepdim=True))
    lead = tuple(range(input.dim() - gamma.dim()))
    dgamma = (dyf * xhat).sum(dim=lead) if lead else dyf * xhat
    return dx.to(input.dtype), dgamma


# ------------------------------------------------------------------------------------------------------ swiglu

class _SwiGlu(OpFunction):
    INPUTS = ("self",)

    @staticmethod
    def forward(ctx, call, x):
        out = call.below_autograd()
        ctx.save_for_backward(x)
        ctx.grad_op, ctx.dim = call.grad_op, call.bound["dim"]
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return None, ctx.grad_op(grad, x, ctx.dim)


def _swiglu_meta(input, dim=-1):  # noqa: A002
    return input.new_empty(_half_shape(input, dim))


@npu_op(meta=_swiglu_meta, derivative=_SwiGlu, grad_op=OP_SWIGLU_BACKWARD, public=True)
def npu_swiglu(input, dim=-1):  # noqa: A002 - torch_npu's name
    check_npu(OP_SWIGLU, input=input)
    check_float_dtypes(OP_SWIGLU, _FLOATS, input=input)
    nd = input.dim()
    check(1 <= nd <= 8, OP_SWIGLU, f"input must have 1-8 dims, but got {nd}")
    check(-nd <= dim <= nd - 1, OP_SWIGLU, f"dim must be in range [{-nd}, {nd - 1}], but got {dim}")
    d = dim % nd
    check(input.shape[d] % 2 == 0, OP_SWIGLU, f"input.shape[{dim}] = {input.shape[d]} must be divisible by 2")
    check(input.numel() > 0, OP_SWIGLU, "empty tensors are not supported")
    a, b = input.float().chunk(2, dim=d)
    return (torch.nn.functional.silu(a) * b).to(input.dtype)


def _swiglu_backward_meta(grad_output, input, dim=-1):  # noqa: A002
    return torch.empty_like(input)


@npu_op(meta=_swiglu_backward_meta, internal=True)
def npu_swiglu_backward(grad_output, input, dim=-1):  # noqa: A002 - torch_npu's name
    """The input gradient of ``npu_swiglu``."""
    check_npu(OP_SWIGLU_BACKWARD, grad_output=grad_output, input=input)
    nd = input.dim()
    check(1 <= nd <= 8 and -nd <= dim <= nd - 1, OP_SWIGLU_BACKWARD,
          f"dim must be in range [{-nd}, {nd - 1}], but got {dim}")
    d = dim % nd
    expected = _half_shape(input, d)
    check(input.shape[d] % 2 == 0 and list(grad_output.shape) == expected, OP_SWIGLU_BACKWARD,
          f"grad_output shape {list(grad_output.shape)} must be the output shape {expected}")
    a, b = input.float().chunk(2, dim=d)
    gf = grad_output.float()
    sig = torch.sigmoid(a)
    silu = a * sig
    da = gf * b * sig * (1 + a * (1 - sig))
    db = gf * silu
    return torch.cat((da, db), dim=d).to(input.dtype)


# ------------------------------------------------------------------------------------------------------- geglu

#: ``approximate`` of npu_geglu -> the GELU it names (0: erf, 1: tanh)
_GELU_MODES = {0: "none", 1: "tanh"}
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_KAPPA = 0.044715


def _geglu_halves(x, dim, activate_left):
    """(the multiplied half, the activated half) of ``x`` along ``dim``, in float32."""
    a, b = x.float().chunk(2, dim=dim)
    return (b, a) if activate_left else (a, b)


def _gelu_derivative(z, mode):
    if mode == "tanh":
        inner = _SQRT_2_OVER_PI * (z + _KAPPA * z * z * z)
        t = torch.tanh(inner)
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * _KAPPA * z * z)
    return 0.5 * (1 + torch.erf(z * (1 / math.sqrt(2.0)))) + z * _INV_SQRT_2PI * torch.exp(-0.5 * z * z)


def _check_geglu_arguments(op, input, dim, approximate):  # noqa: A002 - torch_npu's name
    nd = input.dim()
    check(1 <= nd <= 8, op, f"dim num out of range [1, 8]: input has {nd} dims")
    check(-nd <= dim <= nd - 1, op, f"attribute [dim] out of range [{-nd}, {nd - 1}], but got {dim}")
    check(approximate in _GELU_MODES, op, f"approximate must be 0 (none) or 1 (tanh), but got {approximate}")
    d = dim % nd
    check(input.shape[d] % 2 == 0, op, f"input.shape[{dim}] = {input.shape[d]} must be divisible by 2")
    return d


class _GeGlu(OpFunction):
    INPUTS = ("self",)

    @staticmethod
    def forward(ctx, call, x):
        y, gelu = call.below_autograd()
        bound = call.bound
        ctx.grad_op = call.grad_op
        ctx.options = (bound["dim"], bound["approximate"], bound["activate_left"])
        ctx.save_for_backward(x, gelu)
        ctx.mark_non_differentiable(gelu)  # as op-plugin's derivatives.yaml declares
        return y, gelu

    @staticmethod
    def backward(ctx, grad, _dgelu):
        x, gelu = ctx.saved_tensors
        return None, ctx.grad_op(grad, x, gelu, *ctx.options)


def _geglu_meta(input, dim=-1, approximate=1, activate_left=False):  # noqa: A002
    shape = _half_shape(input, dim)
    return input.new_empty(shape), input.new_empty(shape)


@npu_op(meta=_geglu_meta, derivative=_GeGlu, grad_op=OP_GEGLU_GRAD)
def npu_geglu(input, dim=-1, approximate=1, activate_left=False):  # noqa: A002 - torch_npu's name
    check_npu(OP_GEGLU, input=input)
    check_float_dtypes(OP_GEGLU, _FLOATS, input=input)
    d = _check_geglu_arguments(OP_GEGLU, input, dim, approximate)
    value, gate = _geglu_halves(input, d, bool(activate_left))
    gelu = torch.nn.functional.gelu(gate, approximate=_GELU_MODES[int(approximate)])
    return (value * gelu).to(input.dtype), gelu.to(input.dtype)


def _geglu_grad_meta(grad_output, input, gelu, dim=-1, approximate=1, activate_left=False):  # noqa: A002
    return torch.empty_like(input)


@npu_op(meta=_geglu_grad_meta, internal=True)
def npu_geglu_grad(grad_output, input, gelu, dim=-1, approximate=1, activate_left=False):  # noqa: A002
    """The input gradient of ``npu_geglu`` from its ``gelu`` output."""
    check_npu(OP_GEGLU_GRAD, grad_output=grad_output, input=input, gelu=gelu)
    check_float_dtypes(OP_GEGLU_GRAD, _FLOATS, grad_output=grad_output, input=input, gelu=gelu)
    d = _check_geglu_arguments(OP_GEGLU_GRAD, input, dim, approximate)
    expected = _half_shape(input, d)
    check(list(grad_output.shape) == expected, OP_GEGLU_GRAD,
          f"grad_output shape {list(grad_output.shape)} must be the output shape {expected}")
    check(list(gelu.shape) == expected, OP_GEGLU_GRAD,
          f"gelu shape {list(gelu.shape)} must be the output shape {expected}")
    activate_left = bool(activate_left)
    value, gate = _geglu_halves(input, d, activate_left)
    gf = grad_output.float()
    d_value = gf * gelu.float()
    d_gate = gf * value * _gelu_derivative(gate, _GELU_MODES[int(approximate)])
    halves = (d_gate, d_value) if activate_left else (d_value, d_gate)
    return torch.cat(halves, dim=d).to(input.dtype)
