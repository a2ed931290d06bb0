"""torch_npu's native streams and events (``_NPUStreamBase``, ``_NPUEventBase``, ``_npurt``) over the emulated device.

Both torch_npu layers build their stream and event classes on these bases (the real layer's ``torch_npu._C``,
the builtin ``torch.npu.streams``), so stream ids, raw handles and event timing answer alike.

Kernels run synchronously, so streams are always idle and an event is complete once recorded. What programs and
torch_npu's own tests observe is kept as on the hardware (``NPUStream.cpp``):

* stream ids: ``(type << 5) | index`` with DEFAULT 0, SECONDARY 1, SYNCLAUNCH 2 (4 per device), NORMAL 3 and
  HIGH 4 (pools of 32, handed out round-robin by the device guard); external streams carry bit 30 and the index
  of their registration. Rebuilding a stream from ``(stream_id, device_index, device_type)`` checks all three.
* raw handles (``npu_stream``, ``_npu_getCurrentRawStream``): one distinct non-zero value per stream; an external
  stream's handle is the one it wraps (made by ``torch_npu.npu.npurt().npuStreamCreate``).
* events are ``torch.Event``s; ``elapsed_time`` checks as torch_npu does (``RuntimeError``), ``recorded_time``
  gives the host's monotonic clock at ``record`` in microseconds, ``elapsed_time`` the milliseconds between two.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time

import torch

from . import _device_index, _extension
from .errors import NotEmulatedError

#: PrivateUse1, the device type torch_npu registers ``npu`` as
DEVICE_TYPE = 20
_TYPE_BITS = 5
_SECONDARY, _SYNC_LAUNCH, _NORMAL, _HIGH = 1, 2, 3, 4
_POOL_SIZE, _SYNC_LAUNCH_STREAMS = 32, 4
_EXTERNAL = 1 << 30
_HANDLE_BASE = 0x7E5F_0000_0000  # raw handles of the emulated runtime's own streams

_lock = threading.Lock()
_external: dict[tuple[int, int], int] = {}  # (device, handle) -> index of an external stream
_external_handles: dict[tuple[int, int], int] = {}  # (device, index) -> handle
_sync_launch_next = [itertools.count() for _ in range(64)]
_created = itertools.count(1)  # handles made by npuStreamCreate
_live_handles: set[int] = set()


def _native():
    return _extension.load()


def _valid_stream(stream_id: int, device_index: int, device_type: int) -> None:
    """As ``NPUStream::unpack3``: the stream must be one the runtime could have handed out."""
    if device_type != DEVICE_TYPE:
        raise RuntimeError(f"Invalid device type {device_type} for an NPU stream (expected {DEVICE_TYPE}, npu)")
    if not 0 <= device_index < _device_index.device_count():
        raise RuntimeError(f"Invalid device index {device_index} for an NPU stream: the machine has "
                           f"{_device_index.device_count()} devices")
    if stream_id < 0:
        raise RuntimeError(f"Invalid stream id {stream_id}")
    if stream_id & _EXTERNAL:
        if (device_index, stream_id & (_EXTERNAL - 1)) not in _external_handles:
            raise RuntimeError(f"Unrecognized external stream id {stream_id}: wrap the stream with "
                               f"torch_npu.npu.ExternalStream first")
        return
    kind, index = stream_id >> _TYPE_BITS, stream_id & ((1 << _TYPE_BITS) - 1)
    limit = {0: 1, _SECONDARY: 1, _SYNC_LAUNCH: _SYNC_LAUNCH_STREAMS, _NORMAL: _POOL_SIZE, _HIGH: _POOL_SIZE}.get(kind)
    if limit is None or index >= limit:
        raise RuntimeError(f"Unrecognized stream id {stream_id} (type {kind}, index {index}): get streams from "
                           f"the official API (torch.npu.Stream(), torch.npu.current_stream()).")


def raw_handle(stream_id: int, device_index: int) -> int:
    """The runtime handle (aclrtStream) of a stream: distinct and non-zero; an external stream's own."""
    if stream_id & _EXTERNAL:
        return _external_handles[(device_index, stream_id & (_EXTERNAL - 1))]
    return _HANDLE_BASE + (device_index << 16) + (stream_id << 4)


def _register_external(handle: int, device_index: int) -> int:
    with _lock:
        index = _external.get((device_index, handle))
        if index is None:
            index = len(_external)
            _external[(device_index, handle)] = index
            _external_handles[(device_index, index)] = handle
    return _EXTERNAL | index


class _NPUStreamBase(torch.Stream):
    """torch_npu's stream base: a ``torch.Stream`` of the PrivateUse1 guard, which keeps the current stream."""

    def __new__(cls, priority=0, stream_id=None, device_index=None, device_type=None, stream_ptr=0,
                is_sync_launch=0, **kwargs):
        if stream_id is not None or device_index is not None or device_type is not None:
            stream_id, device_index, device_type = int(stream_id or 0), int(device_index or 0), int(device_type or 0)
            _valid_stream(stream_id, device_index, device_type)
            return super().__new__(cls, stream_id=stream_id, device_index=device_index, device_type=device_type)
        current = _native().current_device()
        if stream_ptr:
            if priority or is_sync_launch:
                raise RuntimeError("ExternalStream does not support priority or is_sync_launch: keep their defaults")
            stream_id = _register_external(int(stream_ptr), current)
            return super().__new__(cls, stream_id=stream_id, device_index=current, device_type=DEVICE_TYPE)
        if is_sync_launch:
            slot = next(_sync_launch_next[current]) % _SYNC_LAUNCH_STREAMS
            return super().__new__(cls, stream_id=(_SYNC_LAUNCH << _TYPE_BITS) | slot, device_index=current,
                                   device_type=DEVICE_TYPE)
        return super().__new__(cls, device=torch.device("npu", current), priority=priority)

    @property
    def npu_stream(self):
        if self.stream_id & _EXTERNAL and os.environ.get("TASK_QUEUE_ENABLE", "1") != "0" and \
                os.environ.get("PER_STREAM_QUEUE") == "1":
            raise RuntimeError("External NPU stream is not supported in NPUStream::stream() with per-stream task "
                               "queue.")
        return raw_handle(self.stream_id, self.device_index)

    def query(self):
        if self.stream_id & _EXTERNAL:
            raise RuntimeError("Cannot query an external NPU stream: it is outside the task queue's tracking.")
        return True

    def synchronize(self):
        if self.stream_id & _EXTERNAL:
            raise RuntimeError("External NPU stream is not supported in NPUStream::synchronize. Synchronize the "
                               "device (torch.npu.synchronize()) instead.")
        return None

    def set_data_preprocess_stream(self, is_data_preprocess_stream=False):
        return None


class _NPUEventBase(torch.Event):
    """torch_npu's event base: a ``torch.Event`` on the npu device."""

    _recorded_ns: int | None
    _timing: bool

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, graph_external=False, **kwargs):
        self = super().__new__(cls, device=torch.device("npu", _native().current_device()),
                               enable_timing=bool(enable_timing), blocking=bool(blocking),
                               interprocess=bool(interprocess))
        self._recorded_ns = None
        self._timing = bool(enable_timing)
        return self

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        if stream is None:
            stream = torch.accelerator.current_stream(_native().current_device())
        super().record(stream)
        self._recorded_ns = time.monotonic_ns()

    def wait(self, stream=None):
        if stream is None:
            stream = torch.accelerator.current_stream(_native().current_device())
        if self._recorded_ns is not None:
            super().wait(stream)

    def reset(self, stream=None):
        self._recorded_ns = None

    def elapsed_time(self, end_event):
        if not (self._timing and getattr(end_event, "_timing", False)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._recorded_ns is None or getattr(end_event, "_recorded_ns", None) is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._recorded_ns - self._recorded_ns) / 1e6

    def recorded_time(self):
        if self._recorded_ns is None:
            raise RuntimeError("The event must be recorded before its recorded time is read.")
        return self._recorded_ns // 1000

    def ipc_handle(self):
        raise NotEmulatedError("torch_npu._C._NPUEventBase.ipc_handle is not emulated: events are not shared "
                               "between processes on the emulated NPU.")

    @classmethod
    def from_ipc_handle(cls, device, handle):
        raise NotEmulatedError("torch_npu._C._NPUEventBase.from_ipc_handle is not emulated.")

    @property
    def npu_event(self):
        return self.event_id


def current_stream(index) -> tuple[int, int, int]:
    stream = torch.accelerator.current_stream(_device_or_current(index))
    return stream.stream_id, stream.device_index, stream.device_type


def default_stream(index) -> tuple[int, int, int]:
    return 0, _device_or_current(index), DEVICE_TYPE


def set_stream(stream_id=0, device_index=0, device_type=0) -> None:
    _valid_stream(int(stream_id), int(device_index), int(device_type))
    torch.accelerator.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                              device_type=device_type))


def current_raw_stream(device_index=None) -> int:
    index = _device_or_current(device_index)
    return raw_handle(torch.accelerator.current_stream(index).stream_id, index)


def _device_or_current(index) -> int:
    return int(index) if index is not None and int(index) >= 0 else _native().current_device()


# -- torch_npu._C._npurt: raw runtime streams and host registration --------------------------------------------
def npu_stream_create(ptr: int) -> int:
    """``aclrtCreateStream``: writes a new stream handle at address ``ptr``; 0 on success."""
    if not ptr:
        return 107000  # ACL_ERROR_INVALID_PARAM
    handle = _HANDLE_BASE - (next(_created) << 8)
    _live_handles.add(handle)
    ctypes.c_void_p.from_address(int(ptr)).value = handle
    return 0


def npu_stream_destroy(handle: int) -> int:
    if not handle or handle not in _live_handles:
        return 107000
    _live_handles.discard(handle)
    return 0


_registered_host: dict[int, int] = {}


def npu_host_register(ptr: int, size: int, flags: int) -> int:
    """``aclrtHostRegister``: host memory is device-accessible on the emulated NPU; the range is remembered."""
    if not ptr:
        return 107000
    _registered_host[int(ptr)] = int(size)
    return 0


def npu_host_unregister(ptr: int) -> int:
    if not ptr or _registered_host.pop(int(ptr), None) is None:
        return 107000
    return 0
