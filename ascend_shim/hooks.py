"""Post-import hooks: run a callback when a module has finished importing (or at once if it already has).

Modelled on wrapt's importer: a meta-path finder wraps the loader of a watched module, and the wrapper puts the
real loader back on the module (``__loader__``, ``__spec__.loader``) before executing it, so runpy,
pkg_resources and pickling see nothing unusual. It differs where patching torch needs it:

* a hook for ``torch.cuda`` does not run while ``torch`` (any parent package) is still initialising: it
  waits until the whole package is importable, so patches never see a half-built parent;
* the finder asks the finders behind it directly (:func:`.import_system.spec_from_others`) instead of
  ``importlib.util.find_spec``, which imports the parent package under the import system's global lock;
* hooks can be removed (``clear``), and the finder leaves ``sys.meta_path`` when nothing is watched.

Each module's hooks run once, outside the registry lock (a hook may import other modules); the import
system's per-module lock already serialises two threads importing the same module.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import sys
import threading
from collections.abc import Callable
from typing import Any

from . import import_system

Hook = Callable[[Any], None]  # given the module just imported (Any: its attributes are its own)

_lock = threading.RLock()
_hooks: dict[str, list[Hook]] = {}  # module name -> hooks still to run
_watched: set[str] = set()  # module names (with their parents) the finder intercepts
_pending: set[str] = set()  # imported modules whose hooks wait for a parent package to finish
_batch_end: list[Callable[[], None]] = []  # run after each group of hooks that became ready together
_group = threading.local()  # .depth of one_group() blocks in this thread, .ran: hooks ran inside


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _initializing(name: str) -> bool:
    module = sys.modules.get(name)
    if module is None:
        return True  # a parent not in sys.modules yet is certainly not finished
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class _NotifyingLoader(importlib.abc.Loader):
    """Runs the real loader, then the hooks; restores the real loader on the module before executing it."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        # the import machinery clears ``_initializing`` only after we return: tell the check it is done
        _module_finished(module.__name__)

    def __getattr__(self, name):  # get_code, get_source, is_package ... for runpy and friends
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _watched:
            return None
        spec = import_system.spec_from_others(self, fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(spec.loader)
        return spec


_finder = _PostImportFinder()


def _done(name: str, just_finished: str | None) -> bool:
    return name == just_finished or (name in sys.modules and not _initializing(name))


def _module_finished(name: str | None) -> None:
    """``name`` has just executed (its ``_initializing`` flag is still set): run every hook now ready."""
    with _lock:
        if name in _hooks:
            _pending.add(name)
        ready = [m for m in sorted(_pending, key=lambda m: m.count("."))
                 if _done(m, name) and all(_done(p, name) for p in _parents(m))]
        jobs = []
        for mod in ready:
            _pending.discard(mod)
            jobs.append((mod, _hooks.pop(mod, [])))
    errors = []
    for mod, hooks in jobs:
        module = sys.modules.get(mod)
        for hook in hooks:
            try:
                hook(module)
            except BaseException as exc:  # run the other hooks, then let the first error through
                errors.append(exc)
    if jobs:
        if getattr(_group, "depth", 0):
            _group.ran = True  # one_group() runs the batch-end callbacks once, when it ends
        else:
            _end_batch(errors)
    if errors:
        raise errors[0]


def _end_batch(errors: list) -> None:
    for callback in list(_batch_end):
        try:
            callback()
        except BaseException as exc:
            errors.append(exc)
    _maybe_drop_finder()


@contextlib.contextmanager
def one_group():
    """Hooks that become ready inside this block (e.g. registered for modules already imported) count as one
    group: the batch-end callbacks run once, when the block ends, instead of after each module."""
    depth = getattr(_group, "depth", 0)
    _group.depth = depth + 1
    if depth == 0:
        _group.ran = False
    try:
        yield
    finally:
        _group.depth = depth
        if depth == 0 and _group.ran:
            errors: list = []
            _end_batch(errors)
            if errors:
                raise errors[0]


def _maybe_drop_finder():
    with _lock:
        if not _hooks:
            import_system.uninstall("post_import_hooks")
            _watched.clear()


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once ``name`` and all its parent packages have finished importing."""
    with _lock:
        _hooks.setdefault(name, []).append(hook)
        _watched.add(name)
        _watched.update(_parents(name))
        import_system.install("post_import_hooks", _finder)
        already = name in sys.modules
        if already:
            _pending.add(name)
    if already and not _initializing(name):
        # imported before we watched it: run now if its parents are complete, else when they finish
        _module_finished(None)


def on_batch_end(callback: Callable[[], None]) -> None:
    """Run ``callback`` after every group of hooks that ran together (e.g. all of torch's at once)."""
    with _lock:
        if callback not in _batch_end:
            _batch_end.append(callback)


def clear() -> None:
    """Drop every hook that has not run yet and leave ``sys.meta_path``."""
    with _lock:
        _hooks.clear()
        _pending.clear()
        _watched.clear()
        _batch_end.clear()
        import_system.uninstall("post_import_hooks")
