"""Bringing Huawei's prepared torch_npu Python in front of the emulated device.

:func:`enable` makes ``import torch_npu`` find the prepared package and answers ``import torch_npu._C`` with the
stand-in native layer (:mod:`.native`); Huawei's ``import torch_npu`` then runs unchanged. Only a process the shim
activates with the real layer does this: a plain ``import torch`` elsewhere in the environment never sees the
package (it lives in the shim's cache, not in site-packages).
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import os
import sys
import threading
from pathlib import Path

from .. import import_system
from ..errors import ConfigError
from . import prepare

_lock = threading.Lock()
_enabled_site: str | None = None
_native_built = False  # once Huawei's torch_npu has brought the device up, it stays (torch cannot undo it)


def find_prepared(version: str | None = None) -> Path | None:
    """The prepared package for the installed torch's torch_npu line (or ``version``), if it is usable.

    Read without importing torch (activation decides the layer before the program imports torch)."""
    from ..versions import base, installed_version

    wanted = version or base(installed_version("torch") or "")
    where = prepare.prepared_dir(wanted)
    try:
        meta = json.loads((where / "prepared.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != prepare.FORMAT or not (where / "site" / "torch_npu" / "__init__.py").is_file():
        return None
    return where


@functools.lru_cache(maxsize=1)
def _metadata(where: str) -> dict:
    return json.loads((Path(where) / "prepared.json").read_text())


def prepared_metadata() -> dict:
    """``prepared.json`` of the enabled package (its version, op schemas, ops with NPU kernels)."""
    if _enabled_site is None:
        raise RuntimeError("the real torch_npu layer is not enabled in this process")
    return _metadata(str(Path(_enabled_site).parent))


def _check_safe(where: Path) -> None:
    """Code is imported from here: refuse a directory another user could have written."""
    if not hasattr(os, "getuid"):
        return
    for path in (where, where / "site", where / "site" / "torch_npu"):
        st = path.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise ConfigError(f"{path} is not safe to import from (owned by uid {st.st_uid}, mode "
                              f"{oct(st.st_mode & 0o777)}): it must be yours and not writable by others. Delete it "
                              f"and run `ascend-shim fetch-torch-npu` again.")


_ANY_DISTRIBUTION = importlib.metadata.DistributionFinder.Context()  # the default query: every name


class _PreparedPackageFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``torch_npu`` (and its distribution metadata) in the prepared package, whatever ``sys.path`` holds
    (a script's runner replaces ``sys.path[0]``), and answers ``torch_npu._C`` with the stand-in native layer."""

    def find_spec(self, fullname, path=None, target=None):
        site = _enabled_site
        if site is None:
            return None
        if fullname == "torch_npu":
            return importlib.machinery.PathFinder.find_spec(fullname, [site])
        if fullname != "torch_npu._C":
            return None  # submodules are found through the package's own __path__
        origin = getattr(sys.modules.get("torch_npu"), "__file__", None) or ""
        if not origin.startswith(site + os.sep):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=__name__)

    def find_distributions(self, context: importlib.metadata.DistributionFinder.Context = _ANY_DISTRIBUTION):
        site = _enabled_site
        if site is None or "path" in vars(context) or context.name not in (None, "torch_npu", "torch-npu"):
            return iter(())
        here = importlib.metadata.DistributionFinder.Context(name=context.name, path=[site])
        return importlib.metadata.MetadataPathFinder.find_distributions(here)

    def create_module(self, spec):
        global _native_built
        from . import native

        module = native.build(spec.name)
        _native_built = True
        return module

    def exec_module(self, module):
        pass


_finder = _PreparedPackageFinder()


def enable(where: Path) -> None:
    """Make ``import torch_npu`` load the prepared package over the emulated device (idempotent)."""
    global _enabled_site
    with _lock:
        site = str(where / "site")
        if _enabled_site == site:
            return
        _check_safe(where)
        import_system.install("real_layer", _finder)
        _enabled_site = site


def disable() -> None:
    """Stop answering imports (an imported torch_npu stays: torch cannot unregister its device)."""
    global _enabled_site
    with _lock:
        import_system.uninstall("real_layer")
        _enabled_site = None


def enabled_site() -> str | None:
    return _enabled_site


def native_layer_built() -> bool:
    """Has Huawei's torch_npu been imported over the emulated device in this process?"""
    return _native_built
