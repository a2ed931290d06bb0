"""Declared patches: what a patch set is, and where patch sets come from.

Declaring applies nothing. A :class:`PatchSet` names the distributions it supports (with version ranges) and
holds :class:`Patch` records; every record carries the metadata that ``list``, the migration report, ``scan``
and the coverage table of the documentation are generated from (id, target, kind, why, what, when it can be removed).

Patch-set modules must be cheap to import: they declare, and name each factory as a ``"module:function"`` string
that is imported when the patch applies (when its target module is imported), as wrapt's string hooks do; a
factory may also be a callable.

Where patch sets come from, in this order:
1. the built-in targets, ``ascend_shim.targets.<name>`` (each package's ``__init__`` declares, code beside it);
2. the entry-point group ``ascend_shim.patch_sets`` (third-party packages; an entry point names a
   :class:`PatchSet`, a list of them, or a module with ``PATCH_SETS``);
3. ``ASCEND_SHIM_PATCH_MODULES``: modules with a ``PATCH_SETS`` list (user code).
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import types
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Callable, Iterable

from . import fidelity
from .errors import ConfigError
from .removal import Removal, parse_removal
from .versions import Project

if TYPE_CHECKING:
    from .context import PatchContext

#: what a patch's factory is: called with the context (and the patch's ``kwargs``), it returns what its kind says
#: (the new attribute, or for ``call`` its undo); factories are annotated ``def f(ctx: PatchContext) -> ...``
Factory = Callable[..., object]
_F = TypeVar("_F", bound=Factory)

ENTRY_POINT_GROUP = "ascend_shim.patch_sets"
#: "module:function", or "function" of the patch set's implementation module
_FACTORY_REF = re.compile(r"^([A-Za-z_][\w.]*:)?[A-Za-z_]\w*$")

#: kind -> how the factory's result is used (see ``patching.apply_patch``)
KINDS = {
    "replace": "the attribute is replaced by the factory's result",
    "wrap": "the attribute is replaced by a wrapper around the original (``__wrapped__`` set)",
    "add": "an attribute the target lacks is added",
    "provide-module": "a module or package the environment lacks is provided (import alias + metadata)",
    "env": "environment variables are translated",
    "call": "custom code runs and returns its own undo",
}


@dataclasses.dataclass(frozen=True)
class Patch:
    """One declared change. ``target`` is ``"module:attr.path"`` (or ``"module"`` / ``"env:VAR"``);
    ``remove_when`` is ``"<condition>: <reason>"``, the condition checkable (:mod:`ascend_shim.removal`)."""

    id: str
    target: str
    kind: str
    why: str
    what: str
    remove_when: str
    #: ``"module:function"`` (imported when the patch applies) or the callable itself
    factory: Factory | str = dataclasses.field(repr=False, compare=False)
    fidelity: str = "exact"
    #: CUDA-isms this patch covers, as ``scan`` names them (e.g. "torch.cuda.memory_allocated", "nccl")
    covers: tuple[str, ...] = ()
    #: extra gating of this one patch: {distribution: specifier}
    requires: tuple[tuple[str, str], ...] = ()
    #: rebind ``from x import y`` copies of the original in already-imported modules
    sweep: bool = True
    set_id: str = ""
    #: keyword arguments the factory is called with besides the context (one factory serving a family of names)
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if isinstance(self.factory, str) and not _FACTORY_REF.match(self.factory):
            raise ValueError(f"patch {self.id}: factory {self.factory!r} is not 'module:function' (or 'function')")
        if self.kind not in KINDS:
            raise ValueError(f"patch {self.id}: unknown kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        if self.fidelity not in fidelity.NAMES:
            raise ValueError(f"patch {self.id}: unknown fidelity {self.fidelity!r}; one of {fidelity.NAMES}")
        for field in ("id", "target", "why", "what", "remove_when"):
            if not getattr(self, field).strip():
                raise ValueError(f"patch {self.id or '?'}: metadata field {field!r} is empty")
        try:
            parse_removal(self.remove_when)
        except ValueError as exc:
            raise ValueError(f"patch {self.id}: {exc}") from None

    def build(self, ctx: PatchContext) -> object:
        """Run the factory: what the patch puts in place (or, for ``call``, its undo)."""
        factory = self.factory
        if isinstance(factory, str):
            module, _, name = factory.partition(":")
            factory = getattr(importlib.import_module(module), name)
        return factory(ctx, **dict(self.kwargs))

    @property
    def removal(self) -> Removal:
        """The parsed ``remove_when``: its checkable condition and its reason."""
        return parse_removal(self.remove_when)

    @property
    def module(self) -> str | None:
        """The module whose import triggers this patch (None: applied at activation)."""
        if self.target.startswith(("env:", "process:")):
            return None
        if self.kind == "provide-module":
            return None
        return self.target.partition(":")[0]


@dataclasses.dataclass
class PatchSet:
    """A group of patches for one target (a library or a project), gated on installed versions."""

    id: str
    title: str
    #: {distribution name: PEP 440 specifier}; the set is skipped (and reported) when one is missing or outside
    requires: dict[str, str] = dataclasses.field(default_factory=dict)
    #: the set applies only under these backends
    backends: tuple[str, ...] = ("npu", "sim")
    #: off-by-default sets are turned on with ASCEND_SHIM_ENABLE
    default_enabled: bool = True
    #: what the set was checked against (versions, commits), shown by ``list``
    checked_against: str = ""
    #: a set whose required distributions are absent is simply inactive (no target, nothing to do)
    patches: list[Patch] = dataclasses.field(default_factory=list)
    source: str = "builtin"
    #: a project gate checked when each patch applies (a source checkout may join sys.path only later):
    #: project absent -> the patch is not needed; outside the range -> skipped and reported
    project: Project | None = None
    #: the module a factory named without a module (``factory="f"``) is taken from
    implementation: str = ""
    #: packages that support the NPU natively: their frames get the real device answers (a declared patch,
    #: ``<id>.native``, applied at activation and undone on deactivation); ``native_why`` says why this set does
    native: tuple[str, ...] = ()
    native_why: str = ""

    def __post_init__(self):
        if self.native:
            names = ", ".join(self.native)
            self.add(Patch(
                id=f"{self.id}.native", target=f"process:native-{self.native[0]}", kind="call",
                covers=("torch.cuda.is_available", "torch.cuda.device_count"),
                factory=_native_factory(self.native, self.project is not None),
                why=self.native_why or f"{names} test CUDA before the NPU in places; told that CUDA is available "
                                       "(as user code is) they would take CUDA-only paths on the NPU.",
                what=f"registers {names} as NPU-native: calls made from their modules get the real "
                     "torch.cuda.is_available()/device_count()/is_nccl_available()/get_backend() answers, so their "
                     "own NPU branches run.",
                remove_when="never: user code must keep seeing CUDA as available"))

    # -- declaring -------------------------------------------------------------------------------------------
    def add(self, patch: Patch) -> Patch:
        if any(p.id == patch.id for p in self.patches):
            raise ValueError(f"patch set {self.id}: duplicate patch id {patch.id}")
        if isinstance(patch.factory, str) and ":" not in patch.factory:
            if not self.implementation:
                raise ValueError(f"patch {patch.id}: factory {patch.factory!r} names no module and patch set "
                                 f"{self.id} has no implementation module")
            patch = dataclasses.replace(patch, factory=f"{self.implementation}:{patch.factory}")
        if patch.set_id != self.id:
            patch = dataclasses.replace(patch, set_id=self.id)
        self.patches.append(patch)
        return patch

    def patch(self, target: str, *, kind: str = "wrap", why: str, what: str, remove_when: str,
              id: str | None = None, fidelity: str = "exact", covers: Iterable[str] = (),
              requires: dict[str, str] | None = None, sweep: bool = True, factory: str | None = None,
              kwargs: dict[str, Any] | None = None) -> Any:
        """Declare a patch. ``factory``: ``"module:function"``, or a function of the set's ``implementation``
        module (``"function"``); called ``function(ctx, **kwargs)`` when the patch applies. Without ``factory``,
        a decorator taking the factory function itself (for patch modules of user code)."""

        def declare(made: Factory | str) -> Patch:
            return self.add(Patch(id=id or f"{self.id}.{target.replace(':', '.')}", target=target, kind=kind, why=why,
                                  what=what, remove_when=remove_when, factory=made, fidelity=fidelity,
                                  covers=tuple(covers), requires=tuple((requires or {}).items()), sweep=sweep,
                                  set_id=self.id, kwargs=tuple((kwargs or {}).items())))

        if factory is not None:
            return declare(factory)

        def decorate(made: _F) -> _F:
            declare(made)
            return made

        return decorate


def _native_factory(packages: tuple[str, ...], checkouts: bool) -> Factory:
    """``checkouts``: a source checkout of the packages is the library too (a project gate reads its version)."""

    def native(ctx: PatchContext) -> Callable[[], None]:
        from .callers import register_native, unregister_native

        added = register_native(*packages, checkouts=checkouts)
        return lambda: unregister_native(*added)

    return native


def _sets_from(obj: Any, where: str) -> list[PatchSet]:
    if isinstance(obj, types.ModuleType):
        # frames of a patch module's wrappers are not the user's call sites (see report._call_site)
        obj.__dict__["__ascend_shim_internal__"] = True
    if isinstance(obj, PatchSet):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [s for item in obj for s in _sets_from(item, where)]
    if hasattr(obj, "PATCH_SETS"):
        return _sets_from(obj.PATCH_SETS, where)
    raise TypeError(f"{where} does not define patch sets (expected a PatchSet, a list, or a module with PATCH_SETS)")


def builtin_patch_sets() -> list[PatchSet]:
    pkg = importlib.import_module("ascend_shim.targets")
    found: list[PatchSet] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):  # helpers shared by several targets
            continue
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        if hasattr(module, "PATCH_SETS"):
            found.extend(_sets_from(module, module.__name__))
    return found


def entry_point_patch_sets() -> tuple[list[PatchSet], list[tuple[str, str]]]:
    """Third-party sets; a broken entry point is returned as (name, error) rather than raised."""
    sets, errors = [], []
    for ep in _entry_points(ENTRY_POINT_GROUP):
        try:
            for s in _sets_from(ep.load(), f"entry point {ep.name}"):
                s.source = f"entry point {ep.name} ({ep.value})"
                sets.append(s)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a third party must not end the user's program, whatever it raises (sys.exit)
            errors.append((ep.name, describe_exception(exc)))
    return sets, errors


def describe_exception(exc: BaseException) -> str:
    """``SystemExit: 3``; the type alone when the exception says nothing (``sys.exit()``)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _entry_points(group: str) -> list:
    """``importlib.metadata.entry_points(group=group)``, without parsing the entry points of every installed
    distribution: only the files that mention the group are parsed (the first distribution of a name wins, as
    in ``importlib.metadata``)."""
    from importlib.metadata import EntryPoint, distributions

    found: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in distributions():
        name = getattr(dist, "_normalized_name", None) or dist.metadata["Name"]
        if name in seen:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and group in text:
            found.extend(ep for ep in dist.entry_points if ep.group == group)
    return found


def user_patch_sets(modules: Iterable[str]) -> list[PatchSet]:
    sets = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"ASCEND_SHIM_PATCH_MODULES: cannot import {name!r}: {exc}") from exc
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a syntax error, or the module raised (or called sys.exit) while importing
            raise ConfigError(f"ASCEND_SHIM_PATCH_MODULES: cannot import {name!r}: "
                              f"{describe_exception(exc)}") from exc
        try:
            found = _sets_from(module, name)
        except TypeError as exc:  # no PATCH_SETS, or not patch sets
            raise ConfigError(f"ASCEND_SHIM_PATCH_MODULES: {exc}") from exc
        for s in found:
            s.source = f"module {name}"
            sets.append(s)
    return sets


def all_patch_sets(patch_modules: Iterable[str] = ()) -> tuple[list[PatchSet], list[tuple[str, str]]]:
    """Every known patch set (built-in, entry points, user modules) and the entry points that failed."""
    ep_sets, ep_errors = entry_point_patch_sets()
    sets = builtin_patch_sets() + ep_sets + user_patch_sets(patch_modules)
    seen: dict[str, PatchSet] = {}
    for s in sets:
        if s.id in seen:
            raise ConfigError(f"patch set id {s.id!r} is declared twice ({seen[s.id].source} and {s.source})")
        seen[s.id] = s
    return sets, ep_errors
