"""How a differentiable emulated op runs under autograd, whichever way it is called.

As torch_npu's C++ autograd does, the op runs *below* autograd (its kernel, or its Meta kernel under FakeTensor) and
its backward calls the op's grad op, so torch.compile and AOTAutograd see one node each way, as on hardware. A
family module writes an op's derivative once, as an :class:`OpFunction`; it serves the operator's
AutogradPrivateUse1 key (:func:`autograd_kernel`, the grad op through the dispatcher) and a direct call of the
kernel (:func:`apply`, given a :class:`DirectCall`: the grad op's implementation, not counted as a call).
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch


class Call:
    """One call of an op as its derivative sees it: arguments by schema name, the op below autograd, its grad op."""

    def below_autograd(self) -> Any:
        raise NotImplementedError

    @property
    def grad_op(self) -> Callable:
        """What the derivative's backward calls."""
        raise NotImplementedError

    @functools.cached_property
    def bound(self) -> dict[str, Any]:
        """Every argument by its schema name, defaults filled in."""
        raise NotImplementedError


class DispatchedCall(Call):
    """A call of the ``torch.ops`` operator, as the dispatcher hands it to the AutogradPrivateUse1 kernel."""

    def __init__(self, op, keyset, args: tuple, kwargs: dict, grad_op: str | None):
        self.op, self.keyset, self.args, self.kwargs, self._grad_op = op, keyset, args, kwargs, grad_op

    def below_autograd(self):
        with torch._C._AutoDispatchBelowAutograd():
            return self.op.redispatch(self.keyset & torch._C._after_autograd_keyset, *self.args, **self.kwargs)

    @property
    def grad_op(self):  # the OpOverload of this op's namespace
        if self._grad_op is None:
            raise RuntimeError(f"{self.op} has no grad op")
        return getattr(getattr(torch.ops, self.op.namespace), self._grad_op).default

    @functools.cached_property
    def bound(self) -> dict[str, Any]:
        values = {}
        for index, arg in enumerate(self.op._schema.arguments):  # the dispatcher omits trailing defaults
            if not arg.kwarg_only and index < len(self.args):
                values[arg.name] = self.args[index]
            elif arg.name in self.kwargs:
                values[arg.name] = self.kwargs[arg.name]
            else:
                values[arg.name] = arg.default_value if arg.has_default_value() else None
        return values


class DirectCall(Call):
    """A call of the kernel itself (``ascend_shim.sim.ops.<op>``): ``impl`` computes, ``grad_op`` differentiates."""

    def __init__(self, impl: Callable, args: tuple, kwargs: dict, grad_op: Callable):
        self.impl, self.args, self.kwargs, self._grad_op = impl, args, kwargs, grad_op

    def below_autograd(self):
        with torch.no_grad():
            return self.impl(*self.args, **self.kwargs)

    @property
    def grad_op(self):
        return self._grad_op

    @functools.cached_property
    def bound(self) -> dict[str, Any]:
        bound = inspect.signature(self.impl).bind(*self.args, **self.kwargs)
        bound.apply_defaults()
        # torch's bindings name a schema's `self` `input`, and so do the kernels
        return {"self" if name == "input" else name: value for name, value in bound.arguments.items()}


class OpFunction(torch.autograd.Function):
    """An op's derivative: ``forward(ctx, call, *INPUTS)`` runs ``call.below_autograd()`` and keeps what
    ``backward`` needs to call ``call.grad_op``; INPUTS are the differentiable arguments, by schema name."""

    INPUTS: tuple[str, ...] = ()


def argument_names(fn) -> set[str]:
    """The argument names ``fn`` (an OpOverload or a kernel) takes, by schema name."""
    schema = getattr(fn, "_schema", None)
    if schema is not None:
        return {arg.name for arg in schema.arguments}
    return {"self" if name == "input" else name for name in inspect.signature(fn).parameters}


def needs_grad(args, kwargs) -> bool:
    """Whether a call records autograd: grad mode on and some tensor argument requires grad."""
    if not torch.is_grad_enabled():
        return False
    for value in (*args, *kwargs.values()):
        tensors = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            return True
    return False


def apply(function: type[OpFunction], call: Call):
    """``call`` through its derivative."""
    bound = call.bound
    return function.apply(call, *(bound.get(name) for name in function.INPUTS))


def autograd_kernel(op, function: type[OpFunction] | None, grad_op: str | None):
    """The AutogradPrivateUse1 kernel of OpOverload ``op`` (registered ``with_keyset=True``); an op without a
    derivative runs below autograd and its outputs need no grad."""
    def kernel(keyset, *args, **kwargs):
        call = DispatchedCall(op, keyset, args, kwargs, grad_op)
        if function is None or not needs_grad(args, kwargs):
            return call.below_autograd()
        return apply(function, call)

    kernel.__name__ = kernel.__qualname__ = f"{op._schema.name.split('::', 1)[-1]}_autograd"
    return kernel
