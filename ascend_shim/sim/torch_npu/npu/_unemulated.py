"""Placeholders for the names of the real ``torch_npu.npu`` that the emulator does not compute.

Every name of the real module's ``__all__`` exists on the emulated module (whose ``__all__`` is the real one): what
the host can compute is implemented, the rest is a *placeholder* -- a function, or a class, that raises
:class:`NotEmulatedError` when called or instantiated, never when looked up, so ``hasattr()`` and
``torch.cuda.X = torch.npu.X`` style assignments work as on hardware. :func:`unemulated_names` lists them.
A placeholder has the real function's parameters (``params``, the release's parameter list): ``inspect.signature``
shows them and a call the real function would refuse raises its TypeError.
"""
from __future__ import annotations

import inspect

from ascend_shim.sim.errors import NotEmulatedError

__all__ = ["REAL_EXTRA", "NotEmulatedError", "not_emulated", "placeholder_function",
           "placeholder_class", "is_placeholder", "unemulated_names", "module_getattr"]

# Reachable on the real module although not in its __all__ (submodules and helpers), and not emulated.
REAL_EXTRA = ("profiler", "npugraph_ex", "datadump", "_npu_setOption")

_MARK = "_ascend_shim_not_emulated"


def not_emulated(qualname: str, reason: str = "") -> NotEmulatedError:
    message = f"{qualname} is not emulated by ascend_shim's sim backend"
    return NotEmulatedError(message + (f": {reason}" if reason else " (it exists in the real torch_npu)"))


def _signature(params: str | None, first: str = "") -> inspect.Signature | None:
    """The signature of ``def f(<first>, <params>)``; ``params`` is Python parameter-list source (literal
    defaults only)."""
    if params is None:
        return None
    namespace: dict = {}
    exec(f"def f({', '.join(p for p in (first, params) if p)}): pass", {}, namespace)  # noqa: S102 - our literal
    return inspect.signature(namespace["f"])


def placeholder_function(qualname: str, reason: str = "", params: str | None = None):
    """A function named like the real one (with its parameters ``params``) that raises NotEmulatedError when
    called."""
    name = qualname.rsplit(".", 1)[-1]
    signature = _signature(params)

    def placeholder(*args, **kwargs):
        if signature is not None:
            signature.bind(*args, **kwargs)  # the real function's TypeError for a call it refuses
        raise not_emulated(qualname, reason)

    placeholder.__name__ = placeholder.__qualname__ = name
    placeholder.__doc__ = f"Not emulated: calling {qualname} raises NotEmulatedError. {reason}".strip()
    if signature is not None:
        placeholder.__signature__ = signature  # type: ignore[attr-defined]  # what inspect.signature reads
    setattr(placeholder, _MARK, qualname)
    return placeholder


def placeholder_class(qualname: str, reason: str = "", bases: tuple = (), module: str = "torch.npu",
                      params: str | None = None):
    """A class named like the real one (subclassable, usable in isinstance, constructed with the real
    ``params``) whose instantiation raises."""
    name = qualname.rsplit(".", 1)[-1]
    signature = _signature(params, first="cls")

    def __new__(cls, *args, **kwargs):
        if signature is not None:
            signature.bind(cls, *args, **kwargs)
        raise not_emulated(qualname, reason)

    if signature is not None:
        __new__.__signature__ = signature  # type: ignore[attr-defined]  # what inspect.signature reads
    namespace = {"__new__": __new__, "__module__": module, _MARK: qualname,
                 "__doc__": f"Not emulated: instantiating {qualname} raises NotEmulatedError. {reason}".strip()}
    return type(name, bases, namespace)


def is_placeholder(obj) -> bool:
    """True for a placeholder made here (or a subclass of a placeholder class: it cannot be built either)."""
    return isinstance(getattr(obj, _MARK, None), str)


def unemulated_names(module=None) -> list[str]:
    """The names of ``module.__all__`` that are placeholders (default module: the emulated ``torch.npu``)."""
    if module is None:
        from ascend_shim.sim.torch_npu import npu as module
    return sorted(name for name in module.__all__ if is_placeholder(getattr(module, name)))


def module_getattr(qualname: str, unemulated=()):
    """A module ``__getattr__`` for names the module does not have: AttributeError, as Python's default.

    ``unemulated`` names (real names without even a placeholder here: on the emulated ``torch.npu``, the
    submodules and helpers of :data:`REAL_EXTRA`) raise NotEmulatedError.
    """
    known = frozenset(unemulated)

    def __getattr__(name: str):
        if name in known:
            raise not_emulated(f"{qualname}.{name}")
        raise AttributeError(f"module '{qualname}' has no attribute '{name}'")

    return __getattr__
