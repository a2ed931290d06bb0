"""The autograd kernels of the ``npu::`` ops (torch_npu's derivatives, at AutogradPrivateUse1).

As torch_npu's C++ autograd does, a differentiable op runs *below* autograd (its PrivateUse1 kernel, or its Meta
kernel under FakeTensor) and its backward calls the op's backward op through the dispatcher:
``npu_rms_norm -> npu_rms_norm_backward``, ``npu_swiglu -> npu_swiglu_backward``, ``npu_geglu -> npu_geglu_grad``
(its ``gelu`` output not differentiable, as op-plugin's derivatives.yaml declares), ``npu_rotary_mul ->
npu_rotary_mul_backward``, ``npu_fusion_attention -> npu_fusion_attention_grad``. Traced (torch.compile,
AOTAutograd) the forward and backward are then one node each, as on hardware. The other ops (inference attention,
the backward ops themselves) are not differentiable: they run below autograd and their outputs need no grad.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from .rotary import NO_BACKWARD_WITH_ROTATE


@dataclass
class _Call:
    """One call of an op as the dispatcher handed it to the autograd kernel."""

    op: Any  # the OpOverload
    keyset: Any
    args: tuple
    kwargs: dict

    def below_autograd(self):
        with torch._C._AutoDispatchBelowAutograd():
            return self.op.redispatch(self.keyset & torch._C._after_autograd_keyset, *self.args, **self.kwargs)

    def sibling(self, name: str):
        """The OpOverload ``name`` of this op's namespace (its backward op)."""
        return getattr(getattr(torch.ops, self.op.namespace), name).default

    @functools.cached_property
    def bound(self) -> dict:
        """Every schema argument by name, defaults filled in (the dispatcher omits trailing defaults)."""
        values = {}
        for index, arg in enumerate(self.op._schema.arguments):
            if not arg.kwarg_only and index < len(self.args):
                values[arg.name] = self.args[index]
            elif arg.name in self.kwargs:
                values[arg.name] = self.kwargs[arg.name]
            else:
                values[arg.name] = arg.default_value if arg.has_default_value() else None
        return values


class _OpFunction(torch.autograd.Function):
    """The autograd.Function of an npu op: ``forward(ctx, call, *INPUTS)``, INPUTS named as in the op's schema."""

    INPUTS: tuple[str, ...] = ()


class _RmsNorm(_OpFunction):
    INPUTS = ("self", "gamma")

    @staticmethod
    def forward(ctx, call, x, gamma):
        y, rstd = call.below_autograd()
        ctx.backward_op = call.sibling("npu_rms_norm_backward")
        ctx.save_for_backward(x, gamma, rstd)
        ctx.mark_non_differentiable(rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, gamma, rstd = ctx.saved_tensors
        dx, dgamma = ctx.backward_op(dy, x, gamma, rstd)
        return None, dx, dgamma


class _SwiGlu(_OpFunction):
    INPUTS = ("self",)

    @staticmethod
    def forward(ctx, call, x):
        out = call.below_autograd()
        ctx.save_for_backward(x)
        ctx.backward_op, ctx.dim = call.sibling("npu_swiglu_backward"), call.bound["dim"]
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return None, ctx.backward_op(grad, x, ctx.dim)


class _GeGlu(_OpFunction):
    INPUTS = ("self",)

    @staticmethod
    def forward(ctx, call, x):
        y, gelu = call.below_autograd()
        bound = call.bound
        ctx.backward_op = call.sibling("npu_geglu_grad")
        ctx.options = (bound["dim"], bound["approximate"], bound["activate_left"])
        ctx.save_for_backward(x, gelu)
        ctx.mark_non_differentiable(gelu)
        return y, gelu

    @staticmethod
    def backward(ctx, grad, _dgelu):
        x, gelu = ctx.saved_tensors
        return None, ctx.backward_op(grad, x, gelu, *ctx.options)


class _RotaryMul(_OpFunction):
    INPUTS = ("self", "r1", "r2", "rotate")

    @staticmethod
    def forward(ctx, call, x, r1, r2, rotate):
        out = call.below_autograd()
        ctx.save_for_backward(x, r1, r2)
        ctx.backward_op = call.sibling("npu_rotary_mul_backward")
        ctx.mode, ctx.has_rotate = call.bound["rotary_mode"], rotate is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.has_rotate:
            raise RuntimeError(NO_BACKWARD_WITH_ROTATE)
        x, r1, r2 = ctx.saved_tensors
        dx, dr1, dr2 = ctx.backward_op(grad, x, r1, r2, ctx.mode)
        return None, dx, dr1, dr2, None


# the forward's arguments the grad op takes again (under its own name where it differs)
_FA_GRAD_ARGUMENTS = {"pse": "pse", "padding_mask": "padding_mask", "atten_mask": "atten_mask", "scale": "scale_value",
                      "keep_prob": "keep_prob", "pre_tockens": "pre_tockens", "next_tockens": "next_tockens",
                      "inner_precise": "inner_precise", "prefix": "prefix", "actual_seq_qlen": "actual_seq_qlen",
                      "actual_seq_kvlen": "actual_seq_kvlen", "sparse_mode": "sparse_mode",
                      "gen_mask_parallel": "gen_mask_parallel", "sync": "sync", "softmax_layout": "softmax_layout",
                      "sink": "sink"}


class _FusionAttention(_OpFunction):
    INPUTS = ("query", "key", "value", "pse")

    @staticmethod
    def forward(ctx, call, query, key, value, pse):
        out = call.below_autograd()
        attention, softmax_max, softmax_sum, softmax_out = out[:4]
        bound = call.bound
        ctx.backward_op = call.sibling("npu_fusion_attention_grad")
        ctx.head_num, ctx.layout = bound["head_num"], bound["input_layout"]
        ctx.seed, ctx.offset, ctx.numels = out[4:7]
        ctx.options = {name: bound[name] for name in _FA_GRAD_ARGUMENTS
                       if name in bound and not isinstance(bound[name], torch.Tensor)}
        ctx.save_for_backward(query, key, value, pse, bound["padding_mask"], bound["atten_mask"], bound.get("sink"),
                              attention, softmax_max, softmax_sum, softmax_out)
        ctx.mark_non_differentiable(softmax_max, softmax_sum, softmax_out)
        return out

    @staticmethod
    def backward(ctx, grad, *_non_differentiable):
        query, key, value, pse, padding_mask, atten_mask, sink, attention, softmax_max, softmax_sum, softmax_out = \
            ctx.saved_tensors
        grad_op = ctx.backward_op
        accepted = {arg.name for arg in grad_op._schema.arguments}
        options = {_FA_GRAD_ARGUMENTS[name]: value for name, value in ctx.options.items()}
        options.update(pse=pse, padding_mask=padding_mask, atten_mask=atten_mask, sink=sink, softmax_max=softmax_max,
                       softmax_sum=softmax_sum, softmax_in=softmax_out, attention_in=attention, seed=ctx.seed,
                       offset=ctx.offset, numels=ctx.numels)
        grads = grad_op(query, key, value, grad.contiguous(), ctx.head_num, ctx.layout,
                        **{name: value for name, value in options.items() if name in accepted})
        dq, dk, dv, dpse = grads[:4]
        return None, dq, dk, dv, dpse


#: the differentiable ops and their autograd.Function (forward below autograd, backward through the backward op)
FUNCTIONS: dict[str, type[_OpFunction]] = {"npu_rms_norm": _RmsNorm, "npu_swiglu": _SwiGlu, "npu_geglu": _GeGlu,
                                           "npu_rotary_mul": _RotaryMul, "npu_fusion_attention": _FusionAttention}


def _requires_grad(args, kwargs) -> bool:
    for value in (*args, *kwargs.values()):
        tensors = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            return True
    return False


def autograd_kernel(op):
    """The AutogradPrivateUse1 kernel of OpOverload ``op`` (registered ``with_keyset=True``)."""
    function = FUNCTIONS.get(op._schema.name.split("::", 1)[-1])

    def kernel(keyset, *args, **kwargs):
        call = _Call(op, keyset, args, kwargs)
        if function is None or not (torch.is_grad_enabled() and _requires_grad(args, kwargs)):
            return call.below_autograd()
        bound = call.bound
        return function.apply(call, *(bound.get(name) for name in function.INPUTS))

    kernel.__name__ = kernel.__qualname__ = f"{op._schema.name.split('::', 1)[-1]}_autograd"
    return kernel
