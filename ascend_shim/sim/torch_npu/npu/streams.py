"""Streams and events of torch.npu, built as torch_npu builds them: on the native stream and event bases.

The bases (:mod:`ascend_shim.sim.streams`, which the real layer's ``torch_npu._C`` provides too) keep what the
hardware shows: stream ids by kind and pool, one raw handle per stream (``npu_stream``), external streams that
wrap a handle made elsewhere, events that record the host clock (``recorded_time``, ``elapsed_time``). Emulated
kernels run synchronously on the host, so a stream is always idle and an event completes when it is recorded.
"""
from __future__ import annotations

import ctypes
from typing import Any

from ascend_shim.sim import streams as _native_streams

from ._unemulated import module_getattr
from ._utils import _checked_index, _get_device_index

__all__ = ["Stream", "Event", "StreamContext", "stream", "set_stream", "current_stream", "default_stream",
           "SyncLaunchStream", "ExternalStream", "ExternalEvent"]


def _on_device(device, make):
    """``make()`` with ``device`` current (None: the current device), as torch_npu creates streams."""
    if device is None:
        return make()
    from .utils import device as device_context

    with device_context(_checked_index(device)):
        return make()


class _StreamMethods:
    """What torch_npu's stream classes add to the native base: events, waits, identity and repr."""

    npu_stream: int
    device: Any
    _kind = "Stream"

    def wait_event(self, event) -> None:
        """Make future work on this stream wait for ``event`` (complete at once: kernels run synchronously)."""
        event.wait(self)

    def wait_stream(self, stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        """Record ``event`` (a new one if None) on this stream and return it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    @property
    def _as_parameter_(self):
        return ctypes.c_void_p(self.npu_stream)

    def __eq__(self, other):
        if isinstance(other, _StreamMethods):
            return super().__eq__(other)
        return False

    def __hash__(self):
        return hash((self.npu_stream, self.device))

    def __repr__(self):
        return f"<torch_npu.npu.{self._kind} device={self.device} npu_stream={self.npu_stream:#x}>"


class Stream(_StreamMethods, _native_streams._NPUStreamBase):
    """An npu stream: ``Stream(device=None, priority=0)``; ``Stream(stream_id=, device_index=, device_type=)``
    rebuilds an existing one (checked as the runtime checks it)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        return _on_device(device, lambda: super(Stream, cls).__new__(cls, priority=priority, **kwargs))


class SyncLaunchStream(_StreamMethods, _native_streams._NPUStreamBase):
    """A stream whose kernels launch synchronously (one of the device's 4 sync-launch streams); every emulated
    stream does."""

    _kind = "SyncLaunchStream"

    def __new__(cls, device=None, priority=0, **kwargs):
        return _on_device(device, lambda: super(SyncLaunchStream, cls).__new__(cls, priority=priority,
                                                                               is_sync_launch=1, **kwargs))


class ExternalStream(Stream):
    """A stream over a raw runtime handle made outside torch (``stream_ptr``); its life-cycle is the caller's.
    Querying or synchronizing it raises, as on torch_npu."""

    def __new__(cls, stream_ptr, device=None, **kwargs):
        return _on_device(device, lambda: super(Stream, cls).__new__(cls, stream_ptr=stream_ptr, **kwargs))


class Event(_native_streams._NPUEventBase):
    """An npu event: ``Event(enable_timing=False, blocking=False, interprocess=False)``."""

    _kind = "Event"

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return super().__new__(cls, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def record(self, stream=None):
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream=None):
        super().wait(current_stream() if stream is None else stream)

    @property
    def _as_parameter_(self):
        return ctypes.c_void_p(self.npu_event)

    def __repr__(self):
        if self.npu_event:
            return f"<torch_npu.npu.{self._kind} {self._as_parameter_.value:#x}>"
        return f"<torch_npu.npu.{self._kind} uninitialized>"


class ExternalEvent(Event):
    """An event for graph capture, recorded and waited outside the graph's own tracking; never timed."""

    _kind = "ExternalEvent"

    def __new__(cls):
        return super().__new__(cls)


def current_stream(device=None) -> Stream:
    stream_id, index, device_type = _native_streams.current_stream(_checked_index(device))
    return Stream(stream_id=stream_id, device_index=index, device_type=device_type)


def default_stream(device=None) -> Stream:
    stream_id, index, device_type = _native_streams.default_stream(_checked_index(device))
    return Stream(stream_id=stream_id, device_index=index, device_type=device_type)


def set_stream(stream) -> None:
    """Make ``stream`` the current stream of its device (and that device the current device)."""
    if stream is None:
        return
    _native_streams.set_stream(stream.stream_id, stream.device_index, stream.device_type)


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


__getattr__ = module_getattr("torch.npu.streams")
