"""What the emulated device tells whoever listens: an operator falling back to the CPU, a torch_npu layer coming or
going. The emulator knows nothing of its listeners (the shim records these in its migration report); with none,
an event costs a check of an empty tuple.

Kinds and their fields:

* ``cpu_fallback``: ``op`` (the name the NPU reports, ``aten::cholesky``), ``via`` (the operator that reached the
  device, the same or a composite), ``refused`` (``TORCH_NPU_FALLBACK_CPU_DISABLE=1``: it raises instead),
  ``frame`` (the Python frame that called it, or None) and ``site`` (``(file, line)`` where no frame runs Python);
* ``no_kernel_list``: ``release`` (a torch_npu release line without a shipped list: nothing is checked);
* ``layer``: ``layer`` (``builtin`` when the builtin torch_npu layer came, ``""`` when it went): whatever cached
  whether ``torch_npu`` is importable is stale.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Listener = Callable[[str, dict[str, Any]], object]

_lock = threading.Lock()
_listeners: tuple[Listener, ...] = ()  # replaced, never changed in place: emit reads it without the lock


def subscribe(listener: Listener) -> None:
    """Call ``listener(kind, fields)`` for every event from now on, in the thread that emits it (idempotent)."""
    global _listeners
    with _lock:
        if listener not in _listeners:
            _listeners = (*_listeners, listener)


def unsubscribe(listener: Listener) -> None:
    global _listeners
    with _lock:
        _listeners = tuple(fn for fn in _listeners if fn != listener)


def listening() -> bool:
    """Is anyone listening? Lets an emitter skip gathering what nobody reads."""
    return bool(_listeners)


def emit(kind: str, **fields: Any) -> None:
    """Tell every listener, in the order they subscribed; a listener's exception reaches the emitter."""
    for listener in _listeners:
        listener(kind, fields)
