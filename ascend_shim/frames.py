"""The Python code that called a patched function -- when there is any.

A patched function may be called straight from C: an ``atexit`` callback, a thread started by
``_thread.start_new_thread`` or a C extension, a callback of a C library. No Python frame lies above it then,
and ``sys._getframe`` raises ``ValueError``; the call must still happen. Such a call is CUDA code (the user's
default: :func:`ascend_shim.callers.caller_is_native`), and the report, handed no frame, puts it at an unknown
site. Hot paths (:mod:`ascend_shim.callers`, the device wrappers) inline the ``try`` instead of calling here.
"""
from __future__ import annotations

import sys
from types import FrameType


def caller(depth: int = 1) -> FrameType | None:
    """The frame ``depth`` calls above the function asking (1: the code that called it), or None: no Python
    code called it."""
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
