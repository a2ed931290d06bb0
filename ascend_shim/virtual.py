"""Modules and distributions that exist only while the shim is active.

Two things the shim must make look installed although no wheel is present:

* a module *alias*: ``import torch_npu`` answered by ``ascend_shim.sim.torch_npu`` (the emulator), or
  ``import flash_attn`` answered by our provider. The alias is the very same module object, so
  ``torch_npu.npu is ascend_shim.sim.torch_npu.npu``.
* a *distribution*: libraries detect packages with ``importlib.metadata.version("flash_attn")``; a
  :class:`VirtualDistribution` answers such queries. A really installed distribution always wins, because
  our finder sits at the end of ``sys.meta_path``.

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

_lock = threading.RLock()
_aliases: dict[str, str] = {}  # alias top-level name -> real dotted prefix
_distributions: dict[str, "VirtualDistribution"] = {}  # normalized name -> dist


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
    def __init__(self, module):
        self._module = module

    def create_module(self, spec):
        return self._module

    def exec_module(self, module):  # already executed under its real name
        pass


class _VirtualFinder(importlib.abc.MetaPathFinder):
    """Resolves aliased module names and virtual distributions; inert for every other name."""

    def find_spec(self, fullname, path=None, target=None):
        top, _, rest = fullname.partition(".")
        real_prefix = _aliases.get(top)
        if real_prefix is None:
            return None
        real_name = real_prefix + ("." + rest if rest else "")
        try:
            module = importlib.import_module(real_name)
        except ModuleNotFoundError as exc:
            if exc.name == real_name:
                return None
            raise
        is_pkg = hasattr(module, "__path__")
        spec = importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package=is_pkg)
        if is_pkg:
            spec.submodule_search_locations = list(module.__path__)
        return spec

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        with _lock:
            dists = list(_distributions.values())
        if name is None:
            return iter(dists)
        wanted = _normalize(name)
        return iter([d for d in dists if _normalize(d._name) == wanted])


_finder = _VirtualFinder()


def _ensure_finder():
    if _finder not in sys.meta_path:
        # first for module aliases (a real module of the same name must not shadow an active alias);
        # distributions are looked up with every finder anyway and real ones come from PathFinder.
        sys.meta_path.insert(0, _finder)


def _drop_finder_if_unused():
    if not _aliases and not _distributions and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


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


def unregister_distribution(name: str) -> None:
    with _lock:
        _distributions.pop(_normalize(name), None)
        _drop_finder_if_unused()


def real_distribution(name: str) -> importlib.metadata.Distribution | None:
    """The really installed distribution ``name`` (ours, the virtual ones, are ignored), or None."""
    for dist in importlib.metadata.distributions(name=name):
        if not isinstance(dist, VirtualDistribution):
            return dist
    return None
