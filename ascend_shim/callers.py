"""Who believes in CUDA: the one rule behind every caller-aware answer.

Code that was written for CUDA -- the user's, and every library that is not NPU-native (Lightning,
megatron-core, torchmetrics ...) -- must see CUDA: ``is_available()`` true, its devices as CUDA devices
(``device.type == "cuda"`` holds, ``x.type()`` reads ``torch.cuda.FloatTensor``), or it takes a CPU branch or
rejects the device it was handed. Code that supports the NPU natively -- torch, torch_npu, and the libraries
the patch sets declare (transformers, accelerate, peft, trl, deepspeed, vllm-ascend ...) -- must see the real
device, or it takes CUDA-only paths on an NPU (accelerate#3020). So a module is **native** when

* a setting names it, or a package holding it: ``ASCEND_SHIM_NATIVE_PACKAGES`` -> native,
  ``ASCEND_SHIM_USER_PACKAGES`` -> CUDA code (the most specific name wins: ``transformers.models.x`` named a
  user package stays CUDA code inside a native ``transformers``); torch and torch_npu cannot be overridden;
* else its top-level package is torch, torch_npu, or declared with :func:`register_native`.

Everything else believes in CUDA. Huawei's transfer_to_npu swaps ``torch.cuda.is_available`` back and forth
around a list of library functions, which is neither thread-safe nor exception-safe; here the decision is made
per call from the calling frame (cached per code object), without mutating anything. :func:`native_scope`
marks a region of code (e.g. a callback) as native explicitly. The load-time rewrite of comparisons
(:mod:`ascend_shim.rewrite`) selects its modules with the same :func:`is_native_module`.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
from collections.abc import Callable
from types import FrameType

#: native whatever the settings say (their code is the NPU's own)
ALWAYS_NATIVE = frozenset({"torch", "torch_npu"})

_lock = threading.Lock()
_native: set[str] = set(ALWAYS_NATIVE)  # top-level package names declared native (by patch sets)
_override: dict[str, bool] = {}  # package or module name -> native? (from the settings; most specific wins)
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


def unregister_native(*packages: str) -> None:
    with _lock:
        _native.difference_update(p for p in packages if p not in ALWAYS_NATIVE)
        _cache.clear()


def set_overrides(user=(), native=()) -> Callable[[], None]:
    """The settings' word on packages: ``user`` names are CUDA code, ``native`` names native, whatever the
    patch sets declare. Replaces earlier overrides; returns the undo (the previous overrides back)."""
    new = overrides_of(user, native)
    with _lock:
        previous = dict(_override)
        _override.clear()
        _override.update(new)
        _cache.clear()

    def undo():
        with _lock:
            _override.clear()
            _override.update(previous)
            _cache.clear()

    return undo


def decide(name: str, declared, override) -> bool:
    """The one rule (see the module docstring) for the module ``name`` (dotted), given the ``declared`` native
    top-level packages and the settings' ``override`` ({name: native?}). ``scan`` asks it with the patch
    sets' declarations; a running process asks :func:`is_native_module`."""
    top = name.partition(".")[0]
    if top in ALWAYS_NATIVE:
        return True
    if override:
        while name:
            verdict = override.get(name)
            if verdict is not None:
                return verdict
            name = name.rpartition(".")[0]
    return top in declared


def overrides_of(user=(), native=()) -> dict[str, bool]:
    """The settings as :func:`decide` takes them: ``user`` names are CUDA code, ``native`` names native."""
    return {**{name: True for name in native}, **{name: False for name in user}}


def is_native_module(name: str) -> bool:
    """Is the module ``name`` (dotted) NPU-native in this process?"""
    return decide(name, _native, _override)


def is_native_package(top: str) -> bool:
    """Is ``top`` (a top-level package name) native? Its modules get the real device answers."""
    return is_native_module(top)


def native_packages() -> list[str]:
    """The packages currently native: declared ones and the settings' (minus the settings' user packages)."""
    with _lock:
        names = set(_native) | {n for n, v in _override.items() if v}
    return sorted(n for n in names if is_native_module(n))


def overridden_user_packages() -> list[str]:
    """Packages the settings make CUDA code although they would be native."""
    with _lock:
        return sorted(n for n, v in _override.items() if not v)


@contextlib.contextmanager
def native_scope():
    """Everything called inside sees the real device answers."""
    token = _scope.set(_scope.get() + 1)
    try:
        yield
    finally:
        _scope.reset(token)


def caller_is_native(depth: int = 2) -> bool:
    """True when the first frame outside ascend_shim (``depth`` frames up) belongs to a native module."""
    if _scope.get():
        return True
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        g = frame.f_globals
        name = g.get("__name__") or ""
        if not (name.startswith("ascend_shim") or g.get("__ascend_shim_internal__")):
            code = frame.f_code
            entry = _cache.get(id(code))
            if entry is None or entry[0] is not code:
                entry = _cache[id(code)] = (code, is_native_module(name))
            return entry[1]
        frame = frame.f_back
    return False
