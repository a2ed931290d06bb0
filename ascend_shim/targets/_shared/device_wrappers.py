"""Wrapper builders shared by the patch sets: translate a device-valued argument, record each translation.

Wrappers are plain ``functools.wraps`` closures (cheap, understood by dynamo). Where the argument sits is
bound by name from the original once, at patch time (:mod:`ascend_shim.binding`), and the wrapper is
specialised to it: a keyword-only argument costs a call without keywords nothing but the ``if kwargs`` test.
Recording a translation is a dictionary hit after the first call at a site.
"""
from __future__ import annotations

import functools
import sys
import types
from typing import TYPE_CHECKING

from ascend_shim.binding import KEYWORD_ONLY, bind
from ascend_shim.devices import describe, translate
from ascend_shim.report import REPORT

if TYPE_CHECKING:
    from collections.abc import Callable

    from ascend_shim.context import PatchContext

_per_thread = REPORT.per_thread
_getframe = sys._getframe


def note(api: str, name: str, old, new) -> None:
    """Record one translation at the user's call site (the search starts at the wrapper's caller)."""
    try:
        frame = _getframe(2)
    except ValueError:  # the wrapper was called straight from C (ascend_shim.frames): an unknown site
        REPORT.event("translated", api, f"{name}={describe(old)} -> {describe(new)}")
        return
    key: tuple | None = (id(frame.f_code), frame.f_lasti, api, old)
    try:
        _per_thread.seen[key][0] += 1  # REPORT.seen(key), inlined: every translated call after the first
        return
    except (KeyError, AttributeError):  # a new site, or this thread's first
        pass
    except TypeError:  # an unhashable value (a list of devices, a map_location dict)
        key = None
    REPORT.event("translated", api, f"{name}={describe(old)} -> {describe(new)}", frame=frame, seen_as=key,
                 code=frame.f_code)


def translating(ctx: PatchContext, api: str, name: str = "device", ints: bool = True) -> Callable:
    """A patch factory: the original with its argument ``name`` translated (see :func:`translate_device`)."""
    return translate_device(ctx.original, api, name, ints=ints)


def translate_device(orig, api: str, name: str = "device", *, ints: bool = True):
    """Wrap ``orig`` so that its argument ``name``, given by position or keyword, is translated.

    ``ints``: a bare int is a CUDA index there (``x.to(0)``). An omitted argument whose default is a CUDA
    device (``GradScaler(device="cuda")``) is translated too.
    """
    binding = bind(orig, name, api)
    default = binding.default
    omitted = translate(default, ints=ints) if default is not None else None
    if binding.position is KEYWORD_ONLY and (omitted is None or omitted is default):
        wrapper = _keyword_wrapper(orig, api, name, ints)
    else:
        wrapper = _positional_wrapper(orig, api, name, binding.index, ints,
                                      default if omitted is not default else None, omitted)
    if isinstance(orig, types.BuiltinFunctionType):
        # pickled by reference where it stands, as torch's own function is (torch.zeros, not its C class's qualname)
        wrapper.__qualname__ = orig.__name__
    return wrapper


def _keyword_wrapper(orig, api, name, ints):
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

    return wrapper


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
