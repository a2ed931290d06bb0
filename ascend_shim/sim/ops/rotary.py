"""Emulated ``torch_npu.npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None)``.

``out = input * r1 + rotate(input) * r2`` with ``rotate(x) = cat(-x2, x1)`` for ``'half'`` (HF/NeoX rotate_half,
full-width cos/sin) and ``rotate(x)[2i] = -x[2i+1], rotate(x)[2i+1] = x[2i]`` for ``'interleave'``; an explicit 2-D
``rotate`` matrix gives ``rotate(x) = x @ rotate`` (no backward: documented as unsupported, so the emulator raises
instead of silently returning the rotary_mode gradient the hardware's derivative formula would produce).
``input`` is 4-D, D even and < 896; ``r1``/``r2`` broadcast over the documented shapes (BNSD: 11SD/B1SD/BNSD,
BSND: 1S1D/BS1D/BSND, SBND: S11D/SB1D/SBND; interleave only 11SD/1S1D/S11D). Math in fp32, output in the input
dtype; autograd gives input, r1 and r2 gradients (``npu_rotary_mul_backward(grad, input, r1, r2, rotary_mode)
-> (dx, dr1, dr2)``, the backward op the autograd calls on the NPU).
"""
from __future__ import annotations

import torch

from . import _release
from ._attention_core import reduce_to
from ._common import check, check_float_dtypes, check_npu
from ._derivatives import OpFunction
from ._registry import npu_op

OP = "npu_rotary_mul"
OP_BACKWARD = "npu_rotary_mul_backward"
NO_BACKWARD_WITH_ROTATE = (f"{OP}: backward is not supported when 'rotate' is given (documented: 输入rotate参数时"
                           f"不支持反向传播)")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _rot(x, mode):
    if mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def _rot_t(g, mode):
    """Adjoint of _rot."""
    if mode == "half":
        g1, g2 = g.chunk(2, dim=-1)
        return torch.cat((g2, -g1), dim=-1)
    g1, g2 = g[..., 0::2], g[..., 1::2]
    return torch.stack((g2, -g1), dim=-1).flatten(-2)


def _allowed_r_shapes(shape, mode):
    a, b, c, d = shape
    if mode == "interleave":
        return {(1, 1, c, d), (1, b, 1, d), (a, 1, 1, d)}
    return {(a, b, c, d), (1, 1, c, d), (a, 1, c, d), (1, b, 1, d), (a, b, 1, d), (a, 1, 1, d)}


def _validate(x, r1, r2, rotary_mode, rotate):
    check(rotary_mode in ("half", "interleave"), OP, f"rotary_mode must be 'half' or 'interleave', but got "
                                                     f"{rotary_mode!r}")
    check_float_dtypes(OP, _FLOATS, input=x, r1=r1, r2=r2, rotate=rotate)
    check(x.dim() == 4, OP, f"input must be 4-dimensional (BNSD, BSND or SBND), but got {x.dim()}-dimensional")
    D = x.shape[-1]
    check(D % 2 == 0 and 0 < D < 896, OP, f"the last dim D of input must be even and < 896, but got {D}")
    check(tuple(r1.shape) == tuple(r2.shape), OP, f"r1 and r2 must have the same shape, got {list(r1.shape)} and "
                                                  f"{list(r2.shape)}")
    ok = _allowed_r_shapes(tuple(x.shape), rotary_mode)
    supported = ("11SD, 1S1D or S11D" if rotary_mode == "interleave"
                 else "BNSD: 11SD/B1SD/BNSD, BSND: 1S1D/BS1D/BSND, SBND: S11D/SB1D/SBND")
    check(r1.dim() == 4 and tuple(r1.shape) in ok, OP,
          f"r1/r2 shape {list(r1.shape)} does not broadcast to input {list(x.shape)} in a supported way ({supported})")
    if rotate is not None:
        check(rotate.dim() == 2 and tuple(rotate.shape) == (D, D), OP,
              f"rotate must be a 2-D (D, D) = ({D}, {D}) matrix, but got {list(rotate.shape)}")


class _RotaryMul(OpFunction):
    INPUTS = ("self", "r1", "r2", "rotate")

    @staticmethod
    def forward(ctx, call, x, r1, r2, rotate):
        out = call.below_autograd()
        ctx.save_for_backward(x, r1, r2)
        ctx.grad_op = call.grad_op
        ctx.mode, ctx.has_rotate = call.bound["rotary_mode"], rotate is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.has_rotate:
            raise RuntimeError(NO_BACKWARD_WITH_ROTATE)
        x, r1, r2 = ctx.saved_tensors
        dx, dr1, dr2 = ctx.grad_op(grad, x, r1, r2, ctx.mode)
        return None, dx, dr1, dr2, None


def _rotary_mul_meta(input, r1, r2, rotary_mode="half", rotate=None):  # noqa: A002 - the op's argument name
    return torch.empty_like(input)


@npu_op(meta=_rotary_mul_meta, derivative=_RotaryMul, grad_op=OP_BACKWARD, public=True)
def npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None):  # noqa: A002 - torch_npu's name
    _release.check_arguments(OP, rotate=rotate)
    check_npu(OP, input=input, r1=r1, r2=r2, rotate=rotate)
    _validate(input, r1, r2, rotary_mode, rotate)
    xf = input.float()
    rx = xf @ rotate.float() if rotate is not None else _rot(xf, rotary_mode)
    return (xf * r1.float() + rx * r2.float()).to(input.dtype)


def _rotary_mul_backward_meta(grad, input, r1, r2, rotary_mode="half"):  # noqa: A002
    return torch.empty_like(input), torch.empty_like(r1), torch.empty_like(r2)


@npu_op(meta=_rotary_mul_backward_meta, internal=True)
def npu_rotary_mul_backward(grad, input, r1, r2, rotary_mode='half'):  # noqa: A002 - torch_npu's name
    """``(dx, dr1, dr2)`` of ``npu_rotary_mul`` (without a ``rotate`` matrix)."""
    check_npu(OP_BACKWARD, grad=grad, input=input, r1=r1, r2=r2)
    _validate(input, r1, r2, rotary_mode, None)
    check(tuple(grad.shape) == tuple(input.shape) and grad.dtype == input.dtype, OP_BACKWARD,
          f"grad must have the input's shape {list(input.shape)} and dtype, but got {list(grad.shape)}")
    gf, xf = grad.float(), input.float()
    dx = gf * r1.float() + _rot_t(gf * r2.float(), rotary_mode)
    dr1 = reduce_to(gf * xf, r1.shape).to(r1.dtype)
    dr2 = reduce_to(gf * _rot(xf, rotary_mode), r2.shape).to(r2.dtype)
    return dx.to(input.dtype), dr1, dr2
