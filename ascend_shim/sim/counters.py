"""Counters of the emulated NPU, for tests and benchmarks: one small public API.

* ``op_calls``: calls per fused op (``npu_fusion_attention`` ...), recorded by the op implementations.
* ``d2h_syncs``: device-to-host synchronisations (``.item()``, ``.tolist()``, ``.cpu()``, ``print``), counted by
  the device backend where npu memory is copied to the host.
* ``live_bytes`` / ``peak_bytes``: per npu index, from the emulator's allocator.

``snapshot()`` returns all of them as plain data; ``reset()`` zeroes the counts and the peaks.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

_lock = threading.Lock()
_op_calls: Counter = Counter()
# The device backend registers how to read and reset its native counters (d2h syncs, bytes per device).
_native_snapshot: Callable[[], dict] | None = None
_native_reset: Callable[[], None] | None = None


def record_op(name: str) -> None:
    """Called by each emulated fused op once per call."""
    with _lock:
        _op_calls[name] += 1


def set_native_source(snapshot: Callable[[], dict], reset: Callable[[], None]) -> None:
    """Used by the device backend to plug in its native counters."""
    global _native_snapshot, _native_reset
    _native_snapshot, _native_reset = snapshot, reset


def op_calls(name: str | None = None):
    with _lock:
        return dict(_op_calls) if name is None else _op_calls[name]


def snapshot() -> dict:
    """``{"op_calls": {...}, "d2h_syncs": int, "live_bytes": {idx: n}, "peak_bytes": {idx: n}}``."""
    native = _native_snapshot() if _native_snapshot else {"d2h_syncs": 0, "live_bytes": {}, "peak_bytes": {}}
    return {"op_calls": op_calls(), **native}


def d2h_syncs() -> int:
    return snapshot()["d2h_syncs"]


def reset() -> None:
    with _lock:
        _op_calls.clear()
    if _native_reset:
        _native_reset()
