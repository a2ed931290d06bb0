"""Streams and events of torch.npu.

Emulated kernels run synchronously on the host, so a stream is always idle (query() is True, synchronize()
returns at once) and an event completes when it is recorded. What user code can observe is still real: stream
identity, the current stream per thread and device, and elapsed time between timing events.

``Stream`` subclasses ``torch.Stream``. ``Event(...)`` returns a plain ``torch.Event`` on the npu device, because
torch 2.13's Stream/Event methods reject Event subclasses; ``isinstance(e, torch.npu.Event)`` still holds.
"""
from __future__ import annotations

from typing import Any

import torch

from ._unemulated import module_getattr, placeholder_class
from ._utils import _checked_index, _get_device_index, _native

__all__ = ["Stream", "Event", "StreamContext", "stream", "set_stream", "current_stream", "default_stream",
           "SyncLaunchStream", "ExternalStream", "ExternalEvent"]


class Stream(torch.Stream):
    """An npu stream: ``Stream(device=None, priority=0)``."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # rebuilding an existing stream: stream_id/device_index/device_type
            return super().__new__(cls, **kwargs)
        index = _checked_index(device)
        return super().__new__(cls, device=torch.device("npu", index), priority=priority)

    @classmethod
    def _wrap(cls, base: torch.Stream) -> Stream:
        return cls(stream_id=base.stream_id, device_index=base.device_index, device_type=base.device_type)

    def __repr__(self):
        return f"<torch_npu.npu.Stream device={self.device} stream_id={self.stream_id}>"


class _EventMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device is not None and obj.device.type == "npu"


class Event(metaclass=_EventMeta):
    """An npu event: ``Event(enable_timing=False, blocking=False, interprocess=False)`` -> torch.Event."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return torch.Event(device=torch.device("npu", _native().current_device()), enable_timing=enable_timing,
                           blocking=blocking, interprocess=interprocess)


def current_stream(device=None) -> Stream:
    return Stream._wrap(torch.accelerator.current_stream(torch.device("npu", _checked_index(device))))


def default_stream(device=None) -> Stream:
    current = current_stream(device)
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream) -> None:
    """Make ``stream`` the current stream of its device (and that device the current device)."""
    if stream is None:
        return
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that selects a stream (and its device), restoring both on exit; None is a no-op."""

    def __init__(self, stream_ctx):
        self.stream = stream_ctx
        self.idx = _get_device_index(None, optional=True)
        # the streams current on entry (set by __enter__ when it selects a stream)
        self.src_prev_stream: Any = None
        self.dst_prev_stream: Any = None

    def __enter__(self):
        cur = self.stream
        if cur is None or self.idx == -1:
            return
        self.src_prev_stream = current_stream(None)
        if self.src_prev_stream.device != cur.device:
            from .utils import device

            with device(cur.device):
                self.dst_prev_stream = current_stream(cur.device)
        set_stream(cur)

    def __exit__(self, *exc):
        cur = self.stream
        if cur is None or self.idx == -1:
            return
        if self.src_prev_stream.device != cur.device:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)


def stream(stream) -> StreamContext:
    return StreamContext(stream)


class SyncLaunchStream(Stream):
    """A stream whose kernels launch synchronously: every emulated stream already does."""


_EXTERNAL = "it wraps a raw ACL runtime handle created outside torch"
ExternalStream = placeholder_class("torch.npu.ExternalStream", _EXTERNAL, bases=(Stream,),
                                   params="stream_ptr, device=None, **kwargs")
ExternalEvent = placeholder_class("torch.npu.ExternalEvent", _EXTERNAL, params="")

__getattr__ = module_getattr("torch.npu.streams")
