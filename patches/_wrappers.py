"""Wrapper builders shared by the patch sets: translate device-valued arguments, record each translation.

Wrappers are plain ``functools.wraps`` closures (cheaper than wrapt proxies, picklable by reference,
understood by dynamo). The untranslated path does one keyword lookup and one ``type()`` check.
"""
from __future__ import annotations

import functools
import sys

from ascend_shim.devices import describe, translate
from ascend_shim.report import REPORT


@functools.lru_cache(maxsize=512)
def _detail(name: str, old, new) -> str:
    return f"{name}={describe(old)} -> {describe(new)}"


def note(api: str, name: str, old, new) -> None:
    """Record one translation at the user's call site (the search starts at the wrapper's caller)."""
    try:
        detail = _detail(name, old, new)
    except TypeError:  # unhashable (a map_location dict)
        detail = _detail.__wrapped__(name, old, new)
    REPORT.event("translated", api, detail, frame=sys._getframe(2))


def translate_kwargs(orig, api: str, names=("device",), ints: bool = False):
    """Wrap ``orig`` so that the keyword arguments ``names`` are translated when they name a CUDA device."""
    if names == ("device",):
        @functools.wraps(orig)
        def wrapper(*args, device=None, **kwargs):
            if device is None:
                return orig(*args, **kwargs)
            new = translate(device, ints=ints)
            if new is not device:
                note(api, "device", device, new)
            return orig(*args, device=new, **kwargs)
    else:
        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            for key in names:
                value = kwargs.get(key)
                if value is not None:
                    new = translate(value, ints=ints)
                    if new is not value:
                        kwargs[key] = new
                        note(api, key, value, new)
            return orig(*args, **kwargs)
    return wrapper


def translate_arg(orig, api: str, position: int, name: str = "device", ints: bool = True, default=None):
    """Wrap ``orig`` whose device is the positional argument ``position`` or the keyword ``name``.

    ``default`` is what an omitted argument means to the original (e.g. ``"cuda"`` for ``GradScaler``),
    so an omitted CUDA default is translated too.
    """

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
            new = translate(default, ints=ints)
            if new is not default:
                kwargs[name] = new
                note(api, name, default, new)
        return orig(*args, **kwargs)

    return wrapper
