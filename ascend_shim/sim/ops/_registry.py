"""The emulated ``npu::`` ops, each declared once, where it is implemented.

A family module declares an op with :func:`npu_op` on its implementation: the Meta kernel, the derivative and grad
op, and whether torch_npu lists it. Everything else an op needs is read from here (the ``torch.ops.npu``
registrations of :mod:`.library`, the package's exports, the emulated ``torch_npu``'s), so an op cannot be
registered in one place and missing from another. Its schema is the one of that name in ``npu_schemas.json``.
"""
from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _derivatives
from ._common import record

#: the modules that declare ops, in the order their ops are listed
FAMILIES = ("fusion_attention", "infer_attention", "rotary", "norm_act")

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class OpSpec:
    """One emulated op."""

    name: str  #: torch_npu's name of the op, its schema's in npu_schemas.json
    family: str  #: the module that declares it
    impl: Callable  #: device checks, validation and math; records no call and no autograd
    kernel: Callable  #: the exported kernel and the NPU key's: counts the call, differentiable through `derivative`
    meta: Callable  #: output shapes and dtypes of the same arguments, reading no data
    derivative: type[_derivatives.OpFunction] | None  #: None: not differentiable
    grad_op: str | None  #: the op the derivative's backward calls
    public: bool  #: listed in torch_npu's ``__all__``
    internal: bool  #: a backward op torch_npu keeps for its own derivatives: not in this package's ``__all__``


_declared: dict[str, OpSpec] = {}


def npu_op(*, meta: Callable, derivative: type[_derivatives.OpFunction] | None = None, grad_op: str | None = None,
           public: bool = False, internal: bool = False) -> Callable[[_F], _F]:
    """Declare the decorated function (named as the op, taking the schema's arguments) as an op's implementation;
    returns the op's kernel."""
    if (derivative is None) != (grad_op is None):
        raise TypeError("a derivative and its grad op go together")

    def declare(impl: _F) -> _F:
        name, family = impl.__name__, impl.__module__.rsplit(".", 1)[-1]
        if family not in FAMILIES or name in _declared:
            raise RuntimeError(f"{name}: declared twice, or outside the modules listed in FAMILIES")
        kernel = _kernel(name, impl, derivative, grad_op)
        _declared[name] = OpSpec(name, family, impl, kernel, meta, derivative, grad_op, public, internal)
        return kernel

    return declare


def _kernel(name: str, impl: Callable, derivative: type[_derivatives.OpFunction] | None, grad_op: str | None):
    @functools.wraps(impl)
    def kernel(*args, **kwargs):
        record(name)
        if derivative is None or grad_op is None or not _derivatives.needs_grad(args, kwargs):
            return impl(*args, **kwargs)
        return _derivatives.apply(derivative, _derivatives.DirectCall(impl, args, kwargs, _declared[grad_op].impl))

    return kernel


def specs() -> list[OpSpec]:
    """Every declared op, family by family in :data:`FAMILIES` order, each family's in declaration order."""
    for family in FAMILIES:
        importlib.import_module(f"{__package__}.{family}")
    return sorted(_declared.values(), key=lambda spec: FAMILIES.index(spec.family))
