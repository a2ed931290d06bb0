"""Caller-aware answers: who is asking whether CUDA is available?

User code must see CUDA "available" so it takes the accelerator path, but libraries that support the NPU
natively (transformers, accelerate, peft, trl, deepspeed, vllm-ascend, torch itself) must see the real answer,
or they take CUDA-only paths on an NPU (accelerate#3020). Huawei's transfer_to_npu swaps
``torch.cuda.is_available`` back and forth around a list of library functions, which is neither thread-safe
nor exception-safe. Here the decision is made per call from the calling frame, without mutating anything.

A patch set declares its library native with :func:`register_native`; :func:`native_scope` marks a region of
code (e.g. a callback) as native explicitly.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
import threading

_lock = threading.Lock()
_native: set[str] = {"torch"}  # top-level package names whose calls get the real answers
# id(code) -> (code, is it native?). Keyed by identity: code objects compare by value (not by file), so two
# identical small functions, one in user code and one in a library, would share an entry; the stored code
# object keeps its id from being reused.
_cache: dict[int, tuple[object, bool]] = {}
_scope = contextvars.ContextVar("ascend_shim_native_scope", default=0)


def register_native(*packages: str) -> tuple[str, ...]:
    """Declare ``packages`` native; returns those that were not already (what the caller must unregister)."""
    with _lock:
        added = tuple(p for p in dict.fromkeys(packages) if p not in _native)
        _native.update(added)
        _cache.clear()
    return added


def is_native_package(top: str) -> bool:
    """Is ``top`` (a top-level package name) declared native? Its modules are never the user's code."""
    return top in _native


def unregister_native(*packages: str) -> None:
    with _lock:
        _native.difference_update(packages)
        _cache.clear()


@contextlib.contextmanager
def native_scope():
    """Everything called inside sees the real device answers."""
    token = _scope.set(_scope.get() + 1)
    try:
        yield
    finally:
        _scope.reset(token)


def caller_is_native(depth: int = 2) -> bool:
    """True when the first frame outside ascend_shim (``depth`` frames up) belongs to a native library."""
    if _scope.get():
        return True
    frame = sys._getframe(depth)
    while frame is not None:
        g = frame.f_globals
        name = g.get("__name__") or ""
        if not (name.startswith("ascend_shim") or g.get("__ascend_shim_internal__")):
            code = frame.f_code
            entry = _cache.get(id(code))
            if entry is None or entry[0] is not code:
                entry = _cache[id(code)] = (code, name.partition(".")[0] in _native)
            return entry[1]
        frame = frame.f_back
    return False
