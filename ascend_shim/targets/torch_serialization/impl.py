"""Inside ``torch.save``, npu storages are tagged ``cuda[:N]`` and npu ``torch.device`` values written as cuda ones
(unless ``ASCEND_SHIM_SAVE_DEVICE=npu``): the checkpoint is the CUDA checkpoint the user's code believes it wrote.

Tags come from torch's tagger registry and device objects from ``copyreg``: both are process-wide, so they act only
while the current thread is inside ``torch.save``; any other pickling is left exactly as torch does it.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ascend_shim.devices import NPU, untranslate
from ascend_shim.frames import caller
from ascend_shim.report import REPORT

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext

_local = threading.local()  # .saving: the _Save in progress on this thread, or None


class _Save:
    """One torch.save call: whether npu values become cuda, and whether any npu value was met."""

    __slots__ = ("as_cuda", "met_npu")

    def __init__(self, as_cuda: bool):
        self.as_cuda = as_cuda
        self.met_npu = False


def _saving() -> _Save | None:
    return getattr(_local, "saving", None)


def _tag_storage(storage: Any) -> str | None:
    """A tagger for torch's registry: npu storages are tagged as the CUDA storages the code made."""
    save = _saving()
    if save is None or storage.device.type != NPU:
        return None
    save.met_npu = True
    return untranslate(str(storage.device)) if save.as_cuda else None


def _no_restore(storage: Any, location: str) -> None:
    return None  # loading is left to the registered deserializers (and the shim's torch.load)


def _reduce_device(device: Any) -> tuple:
    """What torch.device's own __reduce__ gives, with an npu device named cuda inside torch.save."""
    kind, index = device.type, device.index
    save = _saving() if kind == NPU else None
    if save is not None:
        save.met_npu = True
        if save.as_cuda:
            kind = "cuda"
    return type(device), (kind,) if index is None else (kind, index)


def _install_hooks(torch: ModuleType) -> Callable[[], None]:
    """Register the tagger and the device reducer; return their undo."""
    import copyreg

    import torch.serialization as ser

    entry = (min(p for p, _, _ in ser._package_registry) - 1, _tag_storage, _no_restore)  # first, unique
    ser._package_registry.insert(0, entry)
    previous = copyreg.dispatch_table.get(torch.device)
    copyreg.dispatch_table[torch.device] = _reduce_device

    def undo():
        if entry in ser._package_registry:
            ser._package_registry.remove(entry)
        if copyreg.dispatch_table.get(torch.device) is _reduce_device:
            if previous is None:
                del copyreg.dispatch_table[torch.device]
            else:
                copyreg.dispatch_table[torch.device] = previous

    return undo


def save_as_cuda(ctx: PatchContext) -> Callable:
    """torch.save with the storage tagger and the device reducer active on its thread (reported per save)."""
    import torch

    as_cuda = ctx.config.save_device == "cuda"
    ctx.on_undo(_install_hooks(torch))
    detail = ("npu storages and devices written as cuda (ASCEND_SHIM_SAVE_DEVICE=cuda: a portable CUDA "
              "checkpoint)" if as_cuda else
              "npu storages and devices kept as npu (ASCEND_SHIM_SAVE_DEVICE=npu: loads on NPUs, elsewhere "
              "only with map_location)")
    orig = ctx.original

    @functools.wraps(orig)
    def save_(*args, **kwargs):
        outer = _saving()
        current = _local.saving = _Save(as_cuda)
        try:
            return orig(*args, **kwargs)
        finally:
            _local.saving = outer
            if current.met_npu:
                REPORT.event("translated", "torch.save", detail, frame=caller())

    return save_
