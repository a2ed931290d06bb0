"""Wrapper builders shared by the patch sets: translate a device-valued argument, record each translation.

Wrappers are plain ``functools.wraps`` closures (cheap, understood by dynamo). Where the argument sits is
bound by name from the original once, at patch time (:mod:`ascend_shim.binding`), and the wrapper is
specialised to it: a keyword-only argument costs a call without keywords nothing but the ``if kwargs`` test.
The hottest ones (torch factories, ``Tensor.to``) go behind a compiled gate (:func:`gated`) that does their
common cases in C and calls them for the rest. Recording a translation is a dictionary hit after the first
call at a site.
"""
from __future__ import annotations

import functools
import sys
import types

from ascend_shim.binding import KEYWORD_ONLY, bind
from ascend_shim import devices, speedups
from ascend_shim.devices import describe, translate
from ascend_shim.report import REPORT

#: every compiled gate made, by what it gates: kept for the life of the process (dynamo knows them by id, which
#: must never be reused) and made again by no later activation (a gate holds nothing of one activation)
GATES: dict = {}
#: called with each new gate (dynamo's registration, once torch._dynamo is imported)
GATE_LISTENERS: list = []

_per_thread = REPORT.per_thread
_getframe = sys._getframe


def note(api: str, name: str, old, new) -> None:
    """Record one translation at the user's call site (the search starts at the wrapper's caller)."""
    frame = _getframe(2)
    key = (id(frame.f_code), frame.f_lasti, api, old)
    try:
        _per_thread.seen[key][0] += 1  # REPORT.seen(key), inlined: every translated call after the first
        return
    except (KeyError, AttributeError):  # a new site, or this thread's first
        pass
    except TypeError:  # an unhashable value (a list of devices, a map_location dict)
        key = None
    REPORT.event("translated", api, f"{name}={describe(old)} -> {describe(new)}", frame=frame, seen_as=key,
                 code=frame.f_code)


def translate_device(orig, api: str, name: str = "device", *, ints: bool = True, compiled: bool = False):
    """Wrap ``orig`` so that its argument ``name``, given by position or keyword, is translated.

    ``ints``: a bare int is a CUDA index there (``x.to(0)``). An omitted argument whose default is a CUDA
    device (``GradScaler(device="cuda")``) is translated too. ``compiled``: a module-level builtin whose
    argument is keyword-only goes behind a compiled gate when the speedups are built (see ``gated``).
    """
    binding = bind(orig, name, api)
    default = binding.default
    omitted = translate(default, ints=ints) if default is not None else None
    if binding.position is KEYWORD_ONLY and (omitted is None or omitted is default):
        return _keyword_wrapper(orig, api, name, ints, compiled)
    return _positional_wrapper(orig, api, name, binding.index, ints,
                               default if omitted is not default else None, omitted)


def _keyword_wrapper(orig, api, name, ints, compiled):
    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if kwargs:
            value = kwargs.get(name)
            if value is not None:
                new = translate(value, ints=ints)
                if new is not value:
                    kwargs[name] = new
                    note(api, name, value, new)
            return orig(*args, **kwargs)
        return orig(*args)

    if compiled and isinstance(orig, types.BuiltinFunctionType):
        return gated(orig, api, name, wrapper)
    return wrapper


def gated(orig, api: str, name: str, wrapper, *, position: int | None = None, plain: type | None = None):
    """``wrapper`` behind a compiled gate that reads the device argument ``name`` of the builtin ``orig`` in
    C (``ascend_shim/_speedups.c``); ``wrapper`` itself when the speedups are not built.

    A call without a CUDA device reaches ``orig`` with no Python frame; a CUDA string translated before is
    translated and counted there too; everything else runs ``wrapper``. ``position``: a method's device may
    also come at this index of its arguments (self is 0), and the gate binds as a method; ``plain``: a type
    that at ``position`` means no device (``x.to(torch.float16)``). ``torch.compile`` writes a gated
    factory into its graph as it does torch's own (torch_features.dynamo_calls_compiled_gates).
    """
    if not speedups.BUILT:
        return wrapper
    made = GATES.get((orig, api, name, position, plain))
    if made is not None:
        return made
    method = {} if position is None else {"position": position, **({"plain": plain} if plain else {})}
    kind = speedups.MethodGate if method else speedups.KeywordGate
    gate = kind(orig, name, wrapper, api, devices.string_translations(), devices.device_type(), _per_thread,
                lambda old, new: note(api, name, old, new), **method)
    vars(gate).update(vars(wrapper))  # __wrapped__ (functools.wraps)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(gate, attr, getattr(wrapper, attr))
    GATES[orig, api, name, position, plain] = gate
    for listener in GATE_LISTENERS:
        listener(gate)
    return gate


def _positional_wrapper(orig, api, name, position, ints, default, omitted):
    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if len(args) > position:
            value = args[position]
            new = translate(value, ints=ints)
            if new is not value:
                args = args[:position] + (new,) + args[position + 1:]
                note(api, name, value, new)
        elif name in kwargs:
            value = kwargs[name]
            new = translate(value, ints=ints)
            if new is not value:
                kwargs[name] = new
                note(api, name, value, new)
        elif default is not None:
            kwargs[name] = omitted
            note(api, name, default, omitted)
        return orig(*args, **kwargs)

    return wrapper
