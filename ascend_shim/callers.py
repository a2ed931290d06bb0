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
* else its top-level package is torch, torch_npu, or declared with :func:`register_native` -- and, for a
  declared one, the running code is that library's own: not a file of the user's named like it
  (``proj/transformers.py``, ``proj/accelerate/``). Where code lives is judged as the rewrite judges it (the
  user's tree vs. the environment: :func:`ascend_shim.rewrite.hook.dir_is_users`); code in the user's tree
  is the library's only where an installed distribution of that name keeps it (a ``--target`` directory, an
  editable install's project), where no distribution of that name is installed, or where the declaration
  says a source checkout is the library too (a project such as AReaL, gated on a checkout's version file).

Everything else believes in CUDA, and so does a call with no Python caller at all (straight from C: an
``atexit`` callback, a thread a C extension started). Huawei's transfer_to_npu swaps
``torch.cuda.is_available`` back and forth around a list of library functions, which is neither thread-safe
nor exception-safe; here the decision is made per call from the calling frame (cached per code object, where
code lives per file), without mutating anything. :func:`native_scope` marks a region of code (e.g. a callback)
as native explicitly. The load-time rewrite of comparisons (:mod:`ascend_shim.rewrite`) selects its modules with
the same rule (:func:`is_native_code`).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType

#: native whatever the settings say (their code is the NPU's own)
ALWAYS_NATIVE = frozenset({"torch", "torch_npu"})

_lock = threading.Lock()
_native: set[str] = set(ALWAYS_NATIVE)  # top-level package names declared native (by patch sets)
_checkouts: set[str] = set()  # ... of which a source checkout is the library too, wherever it lies
_override: dict[str, bool] = {}  # package or module name -> native? (from the settings; most specific wins)
# id(code) -> (code, is it native?). Keyed by identity: code objects compare by value (not by file), so two
# identical small functions, one in user code and one in a library, would share an entry; the stored code
# object keeps its id from being reused.
_cache: dict[int, tuple[object, bool]] = {}
_libraries_own: dict[str, bool] = {}  # file of code whose module is named native -> is it the library's own?
_installed_at: dict[str, tuple[str, ...]] = {}  # top-level package -> where installed distributions keep it
_scope = contextvars.ContextVar("ascend_shim_native_scope", default=0)


def register_native(*packages: str, checkouts: bool = False) -> tuple[str, ...]:
    """Declare ``packages`` native; returns those that were not already (what the caller must unregister).
    ``checkouts``: their code is the library's wherever it lies (a project used from a source checkout), not
    only where an installed distribution keeps it."""
    with _lock:
        added = tuple(p for p in dict.fromkeys(packages) if p not in _native)
        _native.update(added)
        if checkouts:
            _checkouts.update(added)
        _cache.clear()
    return added


def unregister_native(*packages: str) -> None:
    with _lock:
        _native.difference_update(p for p in packages if p not in ALWAYS_NATIVE)
        _checkouts.difference_update(packages)
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


def is_native_code(name: str, filename: str) -> bool:
    """Is code of the module ``name`` (dotted) compiled from ``filename`` NPU-native in this process? As
    :func:`is_native_module`, but a module named like a declared library is native only when it is that
    library's (see the module docstring)."""
    if not is_native_module(name):
        return False
    top = name.partition(".")[0]
    if top in _checkouts or decide(name, (), _override) or not filename or filename.startswith("<"):
        return True  # torch, torch_npu, a project's checkout, a setting's word; generated code: by name
    own = _libraries_own.get(filename)
    if own is None:
        own = _libraries_own[filename] = _library_owns(top, filename)
    return own


def _library_owns(top: str, filename: str) -> bool:
    """Is ``filename``, the code of a module named like the native library ``top``, the library's own?"""
    path = os.path.realpath(os.path.abspath(filename))
    if not _users_dir(os.path.dirname(path)):
        return True  # site-packages, the interpreter's prefixes, outside the user's roots
    places = _installed_at.get(top)
    if places is None:
        places = _installed_at.setdefault(top, _distribution_places(top))
    if not places:
        return True  # no distribution of that name: a source checkout on the path is the library
    return any(path.startswith(place) for place in places)


def _users_dir(directory: str) -> bool:
    """Where the user's code lives: the rewrite's rule."""
    from .rewrite.hook import dir_is_users

    return dir_is_users(directory)


def _distribution_places(top: str) -> tuple[str, ...]:
    """The directories (real, ending in a separator) where the installed distributions named ``top`` keep
    their code: the directory holding their metadata, and an editable install's project."""
    import importlib.metadata
    import json
    import urllib.parse

    places = set()
    try:
        found = list(importlib.metadata.distributions(name=top))
    except Exception:  # noqa: BLE001 - a broken metadata directory: no place known
        found = []
    for dist in found:
        with contextlib.suppress(Exception):
            places.add(str(dist.locate_file("")))
        with contextlib.suppress(Exception):
            url = json.loads(dist.read_text("direct_url.json") or "{}")
            parsed = urllib.parse.urlparse(url.get("url", ""))
            if url.get("dir_info", {}).get("editable") and parsed.scheme == "file":
                places.add(urllib.parse.unquote(parsed.path))
    return tuple(os.path.join(os.path.realpath(p), "") for p in places if p)


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
    """True when the first frame outside ascend_shim (``depth`` frames up) is native code; false with no Python
    caller (CUDA code, the user's default)."""
    if _scope.get():
        return True
    frame: FrameType | None
    try:
        frame = sys._getframe(depth)
    except ValueError:  # called straight from C (an atexit callback, a C thread): no Python caller
        return False
    while frame is not None:
        g = frame.f_globals
        name = g.get("__name__") or ""
        if not (name.startswith("ascend_shim") or g.get("__ascend_shim_internal__")):
            code = frame.f_code
            entry = _cache.get(id(code))
            if entry is None or entry[0] is not code:
                entry = _cache[id(code)] = (code, is_native_code(name, code.co_filename))
            return entry[1]
        frame = frame.f_back
    return False
