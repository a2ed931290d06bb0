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
from ._common import check, check_float_dtypes, check_npu, record

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


class _RotaryMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, r1, r2, mode, rotate):
        xf = x.float()
        rx = xf @ rotate.float() if rotate is not None else _rot(xf, mode)
        out = xf * r1.float() + rx * r2.float()
        ctx.mode, ctx.has_rotate = mode, rotate is not None
        ctx.save_for_backward(x, r1, r2)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        if ctx.has_rotate:
            raise RuntimeError(NO_BACKWARD_WITH_ROTATE)
        x, r1, r2 = ctx.saved_tensors
        return (*_grads(g, x, r1, r2, ctx.mode, ctx.needs_input_grad[1], ctx.needs_input_grad[2]), None, None)


def _grads(g, x, r1, r2, mode, need_dr1=True, need_dr2=True):
    gf, xf = g.float(), x.float()
    dx = gf * r1.float() + _rot_t(gf * r2.float(), mode)
    dr1 = reduce_to(gf * xf, r1.shape).to(r1.dtype) if need_dr1 else None
    dr2 = reduce_to(gf * _rot(xf, mode), r2.shape).to(r2.dtype) if need_dr2 else None
    return dx.to(x.dtype), dr1, dr2


def npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None):  # noqa: A002 - torch_npu's name
    record(OP)
    _release.check_arguments(OP, rotate=rotate)
    check_npu(OP, input=input, r1=r1, r2=r2, rotate=rotate)
    return _npu_rotary_mul(input, r1, r2, rotary_mode, rotate)


def _npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None):  # noqa: A002
    _validate(input, r1, r2, rotary_mode, rotate)
    return _RotaryMul.apply(input, r1, r2, rotary_mode, rotate)


def npu_rotary_mul_backward(grad, input, r1, r2, rotary_mode='half'):  # noqa: A002 - torch_npu's name
    """``(dx, dr1, dr2)`` of ``npu_rotary_mul`` (without a ``rotate`` matrix)."""
    record(OP_BACKWARD)
    check_npu(OP_BACKWARD, grad=grad, input=input, r1=r1, r2=r2)
    _validate(input, r1, r2, rotary_mode, None)
    check(tuple(grad.shape) == tuple(input.shape) and grad.dtype == input.dtype, OP_BACKWARD,
          f"grad must have the input's shape {list(input.shape)} and dtype, but got {list(grad.shape)}")
    return _grads(grad, input, r1, r2, rotary_mode)
