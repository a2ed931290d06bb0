"""The one owner of what the shim replaces: every attribute replacement goes through :func:`replace` (gevent's
``patch_item`` idea) and is one :class:`Change`, undone once, by :func:`revert`. Patches replace through it, and so
does the shim's own machinery (the rewrite's ``runpy.run_path``, the exit report's ``signal.set_wakeup_fd``, the
class of ``os.environ`` that follows CUDA variables), so :func:`is_patched` and :func:`original` know them all.

* the *first* original of each attribute is kept, so two patches on one attribute revert cleanly;
* a replacement carries ``__wrapped__`` (wraps) and ``__ascend_shim_patch__`` (the patch id) where it can;
* copies bound earlier by ``from x import y`` in already-imported modules are rebound too (MindSpeed's alias
  sweep, by identity, never by name) and recorded, so ``revert`` puts them back;
* ``revert`` restores each attribute to the identical original object, most recent change first; a change
  reverted already is left alone.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import sys
import threading
import types
from typing import Any

_MISSING = object()
_lock = threading.RLock()
_SWEEPABLE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
              types.MethodDescriptorType, types.WrapperDescriptorType)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # a thread of the parent may have held it, and none of them runs in the child


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclasses.dataclass(eq=False)  # one change is one object: compared by identity, never by its values
class Change:
    """One attribute replaced by one patch, or by the shim's own machinery (with the aliases rebound alongside)."""

    patch_id: str
    owner: Any
    attr: str
    original: Any  # the raw value in owner.__dict__ (descriptors kept), or _MISSING when added
    replacement: Any
    aliases: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (module name, attribute)
    owner_name: str = ""  # what the owner is called, when it is neither a module nor a class ("os.environ")

    @property
    def target(self) -> str:
        return f"{self.owner_name or _owner_name(self.owner)}.{self.attr}"


_changes: list[Change] = []


@dataclasses.dataclass(frozen=True)
class Target:
    """A patch's target as it is before the patch: where it lives and what it holds."""

    owner: Any  # the module or class holding it; None when that cannot be reached
    attr: str
    original: Any  # as ``getattr`` gives it (static and class methods unwrapped); None when absent
    missing: str  # why it is absent ("" when it exists)


def locate(target: str) -> Target:
    """Find ``target`` (``"torch.cuda:memory.memory_allocated"``); importing its module may raise anything but an
    ``ImportError`` or ``AttributeError``, which say it is not there."""
    try:
        owner, attr = resolve(target)
        raw = raw_get(owner, attr)
    except (ImportError, AttributeError) as exc:
        return Target(None, "", None, f"{type(exc).__name__}: {exc}")
    if raw is _MISSING:
        return Target(owner, attr, None, f"{target} does not exist")
    return Target(owner, attr, bound(owner, raw), "")


def _owner_name(owner) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    return f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__qualname__', owner)}"


def resolve(target: str) -> tuple[Any, str]:
    """``"torch.cuda:memory.memory_allocated"`` -> (the ``torch.cuda.memory`` object, ``"memory_allocated"``)."""
    module_name, _, path = target.partition(":")
    owner: Any = sys.modules.get(module_name) or importlib.import_module(module_name)
    parts = path.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def raw_get(owner, attr: str):
    """The attribute as stored (a ``staticmethod`` stays one), looked up along the MRO for classes."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                return klass.__dict__[attr]
        return _MISSING
    return getattr(owner, attr, _MISSING)


def bound(owner, raw):
    """What ``getattr(owner, attr)`` gives for a raw class attribute (unwraps static/class methods)."""
    if isinstance(owner, type) and isinstance(raw, (staticmethod, classmethod)):
        return raw.__get__(None, owner)
    return raw


def replace(patch_id: str, owner, attr: str, replacement, *, allow_missing: bool = False,
            is_wrapper: bool = False, name: str = "") -> Change:
    """Set ``owner.attr = replacement`` and remember the first original.

    Only a wrapper made for this patch (``is_wrapper``) is marked; an existing object used as a replacement
    (an alias such as ``torch.npu.synchronize``) is left untouched. ``name``: what to call an owner that is
    neither a module nor a class (``"os.environ"``), for :func:`is_patched`.
    """
    with _lock:
        if isinstance(owner, type):
            original = owner.__dict__.get(attr, _MISSING)  # an inherited attribute is shadowed, then unshadowed
            current = raw_get(owner, attr)
        else:
            original = current = getattr(owner, attr, _MISSING)
        if current is _MISSING and not allow_missing:
            raise AttributeError(f"{_owner_name(owner)} has no attribute {attr!r}")
        if is_wrapper:
            _mark(replacement, patch_id, bound(owner, current) if current is not _MISSING else None)
        setattr(owner, attr, replacement)
        change = Change(patch_id, owner, attr, original, replacement, owner_name=name)
        _changes.append(change)
        return change


def _mark(obj, patch_id: str, wrapped) -> None:
    try:
        obj.__ascend_shim_patch__ = patch_id
        if wrapped is not None and not hasattr(obj, "__wrapped__") and callable(obj):
            obj.__wrapped__ = wrapped
    except (AttributeError, TypeError):
        pass  # builtins, slots: nothing to mark


def sweep_aliases(changes: list[Change]) -> None:
    """Rebind copies of the originals held by already-imported modules (``from x import y``).

    Every module's namespace is walked: first by the ids of its values against the originals' (one pass in C,
    enough for most modules), then, where one may match, by hash for types that hash by identity and by ``id``
    otherwise, only for values of an original's type (no Python-level ``__hash__``/``__eq__`` ever runs).
    """
    by_id: dict[int, tuple[Any, Change]] = {}
    by_value: dict[Any, Change] = {}
    for change in changes:
        value = bound(change.owner, change.original)
        if value is not _MISSING and isinstance(value, _SWEEPABLE):
            by_id[id(value)] = (value, change)
            if _identity_hashed(type(value)):
                by_value.setdefault(value, change)
    if not by_id:
        return
    hashed = {type(v) for v in by_value}
    other = {type(v) for v, _ in by_id.values()} - hashed

    def copies(namespace):
        return [(name, value) for name, value in namespace.items()
                if (type(value) in hashed and value in by_value) or (type(value) in other and id(value) in by_id)]

    ids = by_id.keys()
    with _lock:
        for mod_name, module in list(sys.modules.items()):
            if module is None or mod_name.startswith("ascend_shim"):
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            try:  # most namespaces hold no original: one pass in C tells
                if ids.isdisjoint(map(id, namespace.values())):
                    continue
            except RuntimeError:
                pass
            try:
                found = copies(namespace)
            except RuntimeError:  # another thread changed the namespace while we walked it
                found = copies(dict(namespace))
            for name, value in found:
                hit = by_id.get(id(value))
                if hit is None or hit[0] is not value:
                    continue
                change = hit[1]
                if module is change.owner and name == change.attr:
                    continue
                namespace[name] = bound(change.owner, change.replacement)
                change.aliases.append((mod_name, name))


def _identity_hashed(kind: type) -> bool:
    """Whether ``kind``'s instances hash by identity without running Python code (so a lookup is cheap/safe)."""
    return kind in _IDENTITY_HASHED or (issubclass(kind, type) and kind.__hash__ is type.__hash__
                                        and kind.__eq__ is type.__eq__)


_IDENTITY_HASHED = frozenset({types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                              types.WrapperDescriptorType, type})


def revert(changes: list[Change], *, keep_later: bool = False) -> None:
    """Undo the given changes (most recent first), aliases included; a change undone already is left alone.
    ``keep_later``: an attribute the program has replaced again since keeps the program's value."""
    with _lock:
        for change in reversed(changes):
            if not any(c is change for c in _changes):
                continue
            _changes[:] = [c for c in _changes if c is not change]
            if keep_later and _current(change) is not change.replacement:
                continue
            if change.original is _MISSING:
                with contextlib.suppress(AttributeError):  # already gone
                    delattr(change.owner, change.attr)
            else:
                setattr(change.owner, change.attr, change.original)
            original = bound(change.owner, change.original)
            replacement = bound(change.owner, change.replacement)
            for mod_name, name in change.aliases:
                module = sys.modules.get(mod_name)
                if module is not None and getattr(module, name, None) is replacement:
                    setattr(module, name, original)


def _current(change: Change):
    """What the changed attribute holds now, as :func:`replace` stored it."""
    if isinstance(change.owner, type):
        return change.owner.__dict__.get(change.attr, _MISSING)
    return getattr(change.owner, change.attr, _MISSING)


def find_change(target: str) -> Change | None:
    """The first change on ``target`` (``"torch.cuda.is_available"`` or ``"torch.cuda:is_available"``)."""
    dotted = target.replace(":", ".")
    with _lock:
        for change in _changes:
            if change.target == dotted:
                return change
            if isinstance(change.owner, type) and dotted.endswith(f".{change.owner.__qualname__}.{change.attr}"):
                return change
    return None


def is_patched(target: str) -> bool:
    return find_change(target) is not None


def original(target: str):
    """The object ``target`` had before any patch (raises ``KeyError`` if it is not patched)."""
    change = find_change(target)
    if change is None:
        raise KeyError(f"{target} is not patched by ascend_shim")
    if change.original is _MISSING:
        raise KeyError(f"{target} did not exist before ascend_shim added it")
    return bound(change.owner, change.original)
