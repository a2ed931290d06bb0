"""Building the stand-in modules of torch_npu's native layer (``torch_npu._C`` and its children): each collects its
names first, then becomes a module whose other names are absent, as on a build without them.

Its own module so that the children (:mod:`.c10d`) and ``_C`` itself (:mod:`.native`) share it without importing
each other.
"""
from __future__ import annotations

import types
from collections.abc import Callable

from ..errors import NotEmulatedError


class Namespace:
    """Collects the names of one stand-in module (``_C`` or a child) before the module is built."""

    def __init__(self, path: str):
        self.path = path
        self.names: dict[str, object] = {}
        self.getattr: Callable[[str], object] | None = None  # a module __getattr__ for names built on first use

    def provide(self, name: str, value=None):
        if value is not None:
            self.names[name] = value
            return value

        def deco(fn):
            self.names[name] = fn
            return fn
        return deco

    def not_emulated(self, *names: str) -> None:
        for name in names:
            self.names[name] = not_emulated(f"{self.path}.{name}")

    def not_emulated_class(self, *names: str) -> None:
        for name in names:
            self.names[name] = not_emulated_class(f"{self.path}.{name}")

    def module(self) -> types.ModuleType:
        mod = types.ModuleType(self.path, f"Stand-in of {self.path} over the emulated NPU (ascend_shim).")
        mod.__dict__.update(self.names)
        path = self.path

        def __getattr__(name):
            raise AttributeError(f"module {path!r} has no attribute {name!r} (the emulated NPU's native layer "
                                 f"does not provide it)")
        mod.__dict__["__getattr__"] = self.getattr or __getattr__
        return mod


def not_emulated(path: str):
    def fn(*args, **kwargs):
        raise NotEmulatedError(f"{path} is not emulated: the emulated NPU has no native implementation of it. "
                               f"Run this part on an Ascend machine, or avoid it in the dry run.")
    fn.__name__ = fn.__qualname__ = path.rsplit(".", 1)[-1]
    return fn


def not_emulated_class(path: str):
    def __init__(self, *args, **kwargs):
        raise NotEmulatedError(f"{path} is not emulated: the emulated NPU has no native implementation of it.")
    name = path.rsplit(".", 1)[-1]
    return type(name, (), {"__init__": __init__, "__module__": path.rsplit(".", 1)[0]})
