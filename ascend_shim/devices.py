"""Translating device *values* from CUDA to the NPU: never substrings, only device-valued arguments.

``"cuda"`` -> ``"npu"``, ``"cuda:1"`` -> ``"npu:1"``, ``torch.device("cuda", 1)`` -> ``torch.device("npu", 1)``,
an ``int`` -> ``"npu:N"`` only where torch reads a bare int as a CUDA index (the caller says so). Everything
else (``"cpu"``, ``"meta"``, ``"npu:0"``, a file name that happens to contain "cuda") passes through as the
identical object, so callers can test ``new is value`` to know whether anything changed.

The checks are ordered for the hot path: one ``type()`` and one comparison for the common non-CUDA case.
"""
from __future__ import annotations

import functools
import sys

from .digits import is_digits

NPU = "npu"


class _Unbound:  # placeholder until torch is imported: activating the shim must not import torch
    pass


_TorchDevice: type = _Unbound  # torch.device, bound once torch is imported (read here on hot paths)


def bind_torch() -> None:
    """Called once torch is imported (before any patch applies)."""
    global _TorchDevice
    if _TorchDevice is _Unbound:
        torch = sys.modules["torch"]
        _TorchDevice = type(torch.device("cpu"))


_str_cache: dict[str, str] = {}  # device strings seen so far -> translation (bounded below)


def _translate_str(value: str) -> str:
    new = _str_cache.get(value)
    if new is None:
        if value == "cuda":
            new = NPU
        elif value.startswith("cuda:") and is_digits(value[5:]):
            new = f"{NPU}:{value[5:]}"
        else:
            return value
        if len(_str_cache) < 1024:
            _str_cache[value] = new
    return new


@functools.lru_cache(maxsize=64)
def _npu_device(index):
    return _TorchDevice(NPU, index) if index is not None else _TorchDevice(NPU)


def translate(value, *, ints: bool = False):
    """The NPU equivalent of a device value, or ``value`` itself when it is not a CUDA device."""
    kind = type(value)
    if kind is str:
        return _str_cache.get(value) or (_translate_str(value) if value.startswith("cuda") else value)
    if kind is _TorchDevice:
        return _npu_device(value.index) if value.type == "cuda" else value
    if ints and kind is int:
        return f"{NPU}:{value}"
    return value


def untranslate(value):
    """The CUDA device string the user's code meant by an npu one (``"npu:1"`` -> ``"cuda:1"``), else ``value``:
    what the shim writes where a CUDA program's output is kept (checkpoint location tags)."""
    if type(value) is str and value.startswith(NPU):
        if value == NPU:
            return "cuda"
        if value[3:4] == ":" and is_digits(value[4:]):
            return "cuda" + value[3:]
    return value


def translate_backend(value):
    """``"nccl"`` -> ``"hccl"``; ``"cpu:gloo,cuda:nccl"`` -> ``"cpu:gloo,npu:hccl"``; anything else unchanged."""
    if type(value) is not str:
        return value
    if value.lower() == "nccl":
        return "hccl"
    if ":" in value and "," in value or value.startswith("cuda:"):
        parts = []
        for part in value.split(","):
            dev, sep, be = part.partition(":")
            if sep:
                dev = translate(dev.strip())
                be = "hccl" if be.strip().lower() == "nccl" else be
                parts.append(f"{dev}:{be}")
            else:
                parts.append(part)
        return ",".join(parts)
    return value


def describe(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)
