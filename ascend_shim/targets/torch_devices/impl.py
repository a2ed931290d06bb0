"""torch's device boundary on the NPU: ``torch.device("cuda")`` and classes built with a device (Generator, Stream,
Event) come out npu, factories and ``Tensor.to`` translate their device argument, ``torch.load`` restores cuda-tagged
storages onto the NPU. Only device values are translated, never substrings."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ascend_shim.constructors import hook_constructor
from ascend_shim.devices import translate
from ascend_shim.targets._shared.device_wrappers import note, translate_device

if TYPE_CHECKING:
    from typing import Any

    from ascend_shim.context import PatchContext


def device_constructor(ctx: PatchContext) -> Callable[[], None]:
    """``torch.device(...)`` answering npu for cuda (from a cache of what was built); returns the undo."""
    import torch

    device_class = torch.device
    modes = torch._C._len_torch_function_stack
    made_from: dict[tuple, tuple] = {}  # constructor arguments -> (device made, device returned): both immutable

    def make_new(original):
        def __new__(cls, *args, **kwargs):
            try:
                known = made_from.get(args) if cls is device_class and not kwargs and not modes() else None
            except TypeError:  # unhashable arguments: torch gives its own error below
                known = None
            if known is None:
                made = original(cls, args, kwargs)
                if type(made) is not device_class:  # a torch function mode may return others
                    return made
                known = (made, translate(made) if made.type == "cuda" else made)
                if cls is device_class and not kwargs and len(made_from) < 1024:
                    made_from[args] = known
            made, new = known
            if new is not made:
                note("torch.device", "device", made, new)
            return new
        return __new__

    return hook_constructor(device_class, make_new, probe=("cpu",))


def _device_kw_new(api: str) -> Callable:
    def make_new(original):
        def __new__(cls, *args, **kwargs):
            value = kwargs.get("device")
            if value is not None:
                new = translate(value, ints=True)
                if new is not value:
                    kwargs["device"] = new
                    note(api, "device", value, new)
            elif args:
                new = translate(args[0], ints=True)
                if new is not args[0]:
                    note(api, "device", args[0], new)
                    args = (new,) + args[1:]
            return original(cls, args, kwargs)
        return __new__
    return make_new


def translating_factory(ctx: PatchContext, api: str) -> Callable:
    """A torch factory (``torch.zeros`` ...) with its device= keyword translated."""
    # ``with torch.device(...)`` recognises factories by identity in this cached set: fill it with the
    # originals before any wrapper replaces them
    import torch.utils._device

    torch.utils._device._device_constructors()
    return translate_device(ctx.original, api)


def tensor_to(ctx: PatchContext) -> Callable:
    """Tensor.to with a positional or device= CUDA device translated (dtype-only calls go straight through)."""
    import torch

    from ascend_shim.devices import _TorchDevice  # read now: it is bound once torch is imported

    orig = ctx.original
    dtype = torch.dtype
    missing = object()

    @functools.wraps(orig)
    def to(self, first=missing, /, *args, **kwargs):
        kind = type(first)
        if kind is dtype:  # x.to(torch.float16): the hot path
            return orig(self, first, *args, **kwargs) if args or kwargs else orig(self, first)
        if kind is str or kind is _TorchDevice or kind is int:
            new = translate(first, ints=True)
            if new is not first:
                note("Tensor.to", "device", first, new)
                first = new
        if kwargs:
            value = kwargs.get("device")
            if value is not None:
                new = translate(value, ints=True)
                if new is not value:
                    kwargs["device"] = new
                    note("Tensor.to", "device", value, new)
        if first is missing:
            return orig(self, **kwargs)
        return orig(self, first, *args, **kwargs)

    return to


def load_onto_npu(ctx: PatchContext) -> Callable:
    """torch.load whose map_location values are translated and whose cuda-tagged storages restore onto the NPU."""
    import torch.serialization as ser

    from ascend_shim.devices import untranslate

    orig = ctx.original

    def restore_cuda_on_npu(storage, location):
        if location.startswith("cuda"):
            new = translate(location)
            note("torch.load", "storage location", location, new)
            return ser.default_restore_location(storage, new)
        return None

    def after(user_map):
        def restore(storage, location):
            result = user_map(storage, location)
            return restore_cuda_on_npu(storage, location) if result is None else result
        return restore

    def mapped(mapping):
        def restore(storage, location):
            target = mapping.get(location)
            if target is None:  # a key names the tag's counterpart (cuda:N for npu:N) or nothing
                alias = translate(location) if location.startswith("cuda") else untranslate(location)
                target = mapping.get(alias, location)
            new = translate(target)
            if new is not target:
                note("torch.load", "map_location", f"{location} -> {target}", new)
            return ser.default_restore_location(storage, new)
        return restore

    @functools.wraps(orig)
    def load_(f, map_location=None, *args, **kwargs):
        if map_location is None:
            map_location = restore_cuda_on_npu
        elif isinstance(map_location, dict):
            map_location = mapped(map_location)
        elif callable(map_location):
            map_location = after(map_location)
        else:
            new = translate(map_location)
            if new is not map_location:
                note("torch.load", "map_location", map_location, new)
            map_location = new
        return orig(f, map_location, *args, **kwargs)

    return load_


def translating_constructor(ctx: PatchContext, name: str) -> Callable[[], None]:
    """``torch.<name>`` (Generator, Stream, Event) built with a cuda device translated; returns the undo."""
    import torch

    return hook_constructor(getattr(torch, name), _device_kw_new(f"torch.{name}"),
                            probe=() if name == "Generator" else ("cpu",))


def tensor_cuda(ctx: PatchContext) -> Callable[..., Any]:
    import torch

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        target = translate(device, ints=True) if device is not None else "npu"
        note("Tensor.cuda", "device", device if device is not None else "cuda", target)
        return self.to(target, non_blocking=non_blocking, memory_format=memory_format)

    return cuda


def tensor_is_cuda(ctx: PatchContext) -> property:
    from ascend_shim.callers import caller_is_native

    real = ctx.original

    def is_cuda(self):
        if real.__get__(self):
            return True
        return self.device.type == "npu" and not caller_is_native(2)

    return property(is_cuda, doc=real.__doc__)


def module_cuda(ctx: PatchContext) -> Callable[..., Any]:
    def cuda(self, device=None):
        target = translate(device, ints=True) if device is not None else "npu"
        note("Module.cuda", "device", device if device is not None else "cuda", target)
        return self.to(target)

    return cuda
