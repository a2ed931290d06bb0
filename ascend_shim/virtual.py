"""Modules and distributions that exist only while the shim is active.

Two things the shim must make look installed although no wheel is present:

* a module *alias*: ``import torch_npu`` answered by ``ascend_shim.sim.torch_npu`` (the emulator), or
  ``import flash_attn`` answered by our provider. The alias is the very same module object, so
  ``torch_npu.npu is ascend_shim.sim.torch_npu.npu``.
* a *distribution*: libraries detect packages with ``importlib.metadata.version("flash_attn")``; a
  :class:`VirtualDistribution` answers such queries. One is registered only where no real distribution of
  that name is installed (the providing patch checks first). Our finder has the first slot in
  ``sys.meta_path`` (:mod:`.import_system`), so that an active alias is never shadowed by a module of the same
  name.

Both are registered and unregistered explicitly, so deactivation leaves no trace.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import threading
from pathlib import Path

from . import import_system, versions

_lock = threading.RLock()
_aliases: dict[str, str] = {}  # alias top-level name -> real dotted prefix
_distributions: dict[str, VirtualDistribution] = {}  # normalized name -> dist


def _normalize(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


class VirtualDistribution(importlib.metadata.Distribution):
    """Minimal metadata (Name, Version, Summary, top_level) for a package the shim provides."""

    def __init__(self, name: str, version: str, summary: str, top_level: tuple[str, ...]):
        self._name, self._version, self._summary, self._top_level = name, version, summary, top_level

    def read_text(self, filename):
        if filename in ("METADATA", "PKG-INFO"):
            return (f"Metadata-Version: 2.1\nName: {self._name}\nVersion: {self._version}\n"
                    f"Summary: {self._summary}\n")
        if filename == "top_level.txt":
            return "\n".join(self._top_level) + "\n"
        if filename == "INSTALLER":
            return "ascend_shim\n"
        return None

    def locate_file(self, path):
        return Path(__file__).parent / str(path)


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system the real module, importing it only now (see :meth:`_VirtualFinder.find_spec`)."""

    def __init__(self, real_name: str):
        self._real_name = real_name

    def create_module(self, spec):
        return importlib.import_module(self._real_name)

    def exec_module(self, module):  # already executed under its real name
        pass


def _locate(name: str) -> tuple[bool, list[str] | None]:
    """(found, package search locations) of module ``name``, asking only finders: no import runs here.

    Imported packages along the way lend their ``__path__``; the rest is a file-system lookup.
    """
    path = None
    parts = name.split(".")
    for i in range(len(parts)):
        prefix = ".".join(parts[:i + 1])
        module = sys.modules.get(prefix)
        if module is not None:
            locations = getattr(module, "__path__", None)
        else:
            if i == 0:
                spec = (importlib.machinery.PathFinder.find_spec(prefix)
                        or import_system.spec_from_others(_finder, prefix))  # editable installs and the like
            else:
                spec = importlib.machinery.PathFinder.find_spec(prefix, path)
            if spec is None:
                return False, None
            locations = spec.submodule_search_locations
        if i < len(parts) - 1 and locations is None:
            return False, None
        path = list(locations) if locations is not None else None
    return True, path


_ANY_DISTRIBUTION = importlib.metadata.DistributionFinder.Context()  # the default query: every name


class _VirtualFinder(importlib.abc.MetaPathFinder):
    """Resolves aliased module names and virtual distributions; inert for every other name."""

    def find_spec(self, fullname, path=None, target=None):
        # The import system calls finders holding its global lock: importing here (the real module may import
        # torch, transformers, ...) would make every other importing thread wait on that lock while this one
        # waits on their module locks, a deadlock Python cannot detect. So nothing is imported here: the real
        # module is imported by the loader, which runs under the alias's own module lock like any import.
        top, _, rest = fullname.partition(".")
        real_prefix = _aliases.get(top)
        if real_prefix is None:
            return None
        real_name = real_prefix + ("." + rest if rest else "")
        module = sys.modules.get(real_name)
        if module is not None:
            found, locations = True, getattr(module, "__path__", None)
        else:
            found, locations = _locate(real_name)
        if not found:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _AliasLoader(real_name), is_package=locations is not None)
        if locations is not None:
            spec.submodule_search_locations = list(locations)
        return spec

    def find_distributions(self, context: importlib.metadata.DistributionFinder.Context = _ANY_DISTRIBUTION):
        name = getattr(context, "name", None)
        with _lock:
            dists = list(_distributions.values())
        if name is None:
            return iter(dists)
        wanted = _normalize(name)
        return iter([d for d in dists if _normalize(d._name) == wanted])


_finder = _VirtualFinder()


def _ensure_finder() -> None:
    import_system.install("virtual", _finder)


def _drop_finder_if_unused() -> None:
    if not _aliases and not _distributions:
        import_system.uninstall("virtual")


def register_alias(name: str, real: str) -> None:
    """Make ``import name[.sub]`` return the module ``real[.sub]`` itself."""
    with _lock:
        _aliases[name] = real
        _ensure_finder()


def unregister_alias(name: str) -> None:
    """Forget the alias and drop ``name`` and its submodules from ``sys.modules`` if they are the alias."""
    with _lock:
        real = _aliases.pop(name, None)
        if real is None:
            return
        for mod_name in [m for m in list(sys.modules) if m == name or m.startswith(name + ".")]:
            mod = sys.modules.get(mod_name)
            if getattr(mod, "__name__", "").startswith(real):
                del sys.modules[mod_name]
        _drop_finder_if_unused()


def register_distribution(name: str, version: str, summary: str, top_level: tuple[str, ...] = ()) -> None:
    """Answer ``importlib.metadata`` queries for ``name`` unless a real distribution of that name exists."""
    with _lock:
        _distributions[_normalize(name)] = VirtualDistribution(name, version, summary, top_level or (name,))
        _ensure_finder()
    versions.forget_installed()


def unregister_distribution(name: str) -> None:
    with _lock:
        _distributions.pop(_normalize(name), None)
        _drop_finder_if_unused()
    versions.forget_installed()


def real_distribution(name: str) -> importlib.metadata.Distribution | None:
    """The really installed distribution ``name`` (ours, the virtual ones, are ignored), or None."""
    for dist in importlib.metadata.distributions(name=name):
        if not isinstance(dist, VirtualDistribution):
            return dist
    return None
