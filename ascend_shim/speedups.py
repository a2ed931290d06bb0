"""The compiled fast paths (``ascend_shim/_speedups.c``), when the install could build them.

They are optional: without a C compiler at install, or with ``ASCEND_SHIM_SPEEDUPS=0``, the pure-Python
wrappers do the same work a little slower. Each name below is None when the extension is not built.
"""
from __future__ import annotations

try:
    from ascend_shim._speedups import KeywordGate, MethodGate, hook_device_new, unhook_device_new
except ImportError:  # not built
    KeywordGate = MethodGate = hook_device_new = unhook_device_new = None

BUILT = KeywordGate is not None
