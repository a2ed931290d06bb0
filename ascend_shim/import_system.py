"""The shim's place in Python's import system: its meta-path finders, their order, and the one path hook.

Every finder of the shim goes into ``sys.meta_path`` through :func:`install` and leaves through
:func:`uninstall`; nothing else in the package touches ``sys.meta_path`` or ``sys.path_hooks``. A finder has a
*slot* in :data:`SLOTS`, and whatever the order in which features install and remove their finders, the
installed ones always stand in slot order: the front slots ahead of every other finder (Python's own, editable
installs', other libraries'), the back slots behind all of them. Those other finders keep their own order.

Finders that wrap or rewrite what others find ask the finders behind them directly
(:func:`spec_from_others`): ``importlib.util.find_spec`` would import the parent package, and finders run
under the import system's global lock, so an import from there deadlocks against a thread importing that
parent, beyond Python's deadlock detection.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NamedTuple

Finder = importlib.abc.MetaPathFinder
PathHook = Callable[[str], importlib.abc.PathEntryFinder]


class Slot(NamedTuple):
    name: str
    front: bool  # ahead of every other finder (else behind all of them)
    why: str


#: The order of the shim's finders in ``sys.meta_path``, first to last (enforced by :func:`install`).
SLOTS: tuple[Slot, ...] = (
    Slot("virtual", True,
         "Module aliases (the emulator's torch_npu, the flash_attn provider) answer first: an active alias is never "
         "shadowed by a real module of the same name. Ahead of the post-import finder: the alias hands back a module "
         "already executed under its real name (whose hooks ran then); the post-import wrapper would put the "
         "alias's loader on that real module."),
    Slot("post_import_hooks", True,
         "Ahead of the rewriter and the real layer, so that it wraps the loaders they produce: hooks run for "
         "rewritten modules and for Huawei's torch_npu (behind the real layer's finder, `import torch_npu` would "
         "never reach it), and the rewriter finds plain loaders to swap."),
    Slot("rewrite", True,
         "Ahead of Python's own finders and the editable-install ones: it asks them for the spec and swaps the "
         "SourceFileLoader of CUDA code for the rewriting one."),
    Slot("real_layer", True,
         "Ahead of Python's path finder: `import torch_npu` loads the prepared package whatever sys.path holds, "
         "and `torch_npu._C` is the stand-in native layer."),
    Slot("torch_first", False,
         "Behind every other finder: under the emulator, before torch is imported, it answers `import torch_npu` "
         "only when nothing else does (no active alias, no torch_npu on sys.path)."),
)
_SLOT_NAMES = tuple(slot.name for slot in SLOTS)
_FRONT = {slot.name: slot.front for slot in SLOTS}

_lock = threading.Lock()
_installed: dict[str, Finder] = {}  # slot name -> the finder in it
_placed: list[Finder] = []  # the finders this module put in sys.meta_path (to tell them from everyone else's)
_asking = threading.local()  # .keys: {(id(finder), module name)} this thread's finders are looking up now


def _is_any(item: object, items: list) -> bool:
    return any(item is x for x in items)


def _arrange() -> None:
    """Put the installed finders in slot order around everyone else's (who keep their order); one assignment, so
    an import running in another thread sees the list before or after, never half-way."""
    front = [_installed[n] for n in _SLOT_NAMES if n in _installed and _FRONT[n]]
    back = [_installed[n] for n in _SLOT_NAMES if n in _installed and not _FRONT[n]]
    ours = front + back
    others = [f for f in sys.meta_path if not _is_any(f, _placed) and not _is_any(f, ours)]
    wanted = front + others + back
    if list(map(id, wanted)) != list(map(id, sys.meta_path)):
        sys.meta_path[:] = wanted
    _placed[:] = ours


def install(slot: str, finder: Finder) -> None:
    """Put ``finder`` in ``sys.meta_path`` at its slot (replacing the slot's previous finder). Idempotent."""
    if slot not in _SLOT_NAMES:
        raise ValueError(f"no import slot {slot!r}; slots: {', '.join(_SLOT_NAMES)}")
    with _lock:
        _installed[slot] = finder
        _arrange()


def uninstall(slot: str) -> None:
    """Take the slot's finder out of ``sys.meta_path``; the others stay in order. Idempotent."""
    with _lock:
        if _installed.pop(slot, None) is not None:
            _arrange()


def is_installed(finder: object) -> bool:
    """Does the import system ask ``finder`` now?"""
    return _is_any(finder, sys.meta_path)


def spec_from_others(finder: object, fullname: str, path: Sequence[str] | None = None,
                     target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
    """The spec the finders behind ``finder`` give ``fullname`` (all others when it is not installed), as the
    import system would find it.

    None when none does, at a legacy finder (no ``find_spec``: the import system then searches itself), and
    when ``finder`` is already asking for ``fullname`` in this thread: a finder behind it that asks the import
    system again reaches it again. The guard is per thread: another thread importing the same name is answered.
    """
    keys = getattr(_asking, "keys", None)
    if keys is None:
        keys = _asking.keys = set()
    key = (id(finder), fullname)
    if key in keys:
        return None
    keys.add(key)
    try:
        finders = list(sys.meta_path)
        mine = [i for i, f in enumerate(finders) if f is finder]
        for other in finders[mine[0] + 1:] if mine else [f for f in finders if f is not finder]:
            find = getattr(other, "find_spec", None)
            if find is None:
                return None
            spec = find(fullname, path, target)
            if spec is not None:
                return spec
        return None
    finally:
        keys.discard(key)


# -- the path hook ------------------------------------------------------------------------------------------
def install_path_hook(hook: PathHook) -> None:
    """First in ``sys.path_hooks``: Python asks the hooks in order and takes the first finder one returns, so the
    shim's hook sees a path entry before any other claims it. Idempotent."""
    with _lock:
        if hook not in sys.path_hooks:
            sys.path_hooks.insert(0, hook)


def uninstall_path_hook(hook: PathHook) -> None:
    with _lock:
        if hook in sys.path_hooks:
            sys.path_hooks.remove(hook)
