"""Bringing Huawei's prepared torch_npu Python in front of the emulated device.

:func:`enable` makes ``import torch_npu`` find the prepared package and answers ``import torch_npu._C`` with the
stand-in native layer (:mod:`.native`); Huawei's ``import torch_npu`` then runs unchanged. Only a process the shim
activates with the real layer does this: a plain ``import torch`` elsewhere in the environment never sees the
package (it lives in the shim's cache, not in site-packages).

Before the package is imported, its files are compared with what ``fetch-torch-npu`` recorded (the file list and
sizes, owners and modes: :func:`.prepare.check_files`), and whatever stops it from coming up, a damaged file or the
stand-in native layer, is one :class:`~ascend_shim.errors.BringUpError` naming the cause and the fix (shown as one
line, not as torch's "Failed to load the backend extension" with its autoload advice).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import os
import sys
import threading
from pathlib import Path

from ... import import_system
from ...errors import BringUpError, ConfigError
from .. import register_layer
from . import prepare
from .enabled import enabled_site as enabled_site, metadata as _metadata, prepared_metadata as prepared_metadata
from .enabled import set_site as _set_site

_lock = threading.Lock()
_native_built = False  # once Huawei's torch_npu has brought the device up, it stays (torch cannot undo it)


def find_prepared(version: str | None = None) -> Path | None:
    """The prepared package for the installed torch's torch_npu line (or ``version``), if it is usable.

    Read without importing torch (activation decides the layer before the program imports torch)."""
    where, kind, _ = prepared_state(version)
    return None if kind else where


def prepared_problem(version: str | None = None) -> str:
    """Why there is no usable prepared package (what :func:`find_prepared` found), "" when there is one."""
    return prepared_state(version)[2]


def prepared_state(version: str | None = None) -> tuple[Path, str, str]:
    """``(where, kind, why)``: kind "" (usable), ``absent`` (not prepared), ``stale`` (prepared by another version of
    the shim: ``fetch-torch-npu`` prepares it again) or ``incomplete``; ``why`` says it in words."""
    from ...versions import base, installed_version

    wanted = version or base(installed_version("torch") or "")
    where = prepare.prepared_dir(wanted)
    try:
        meta = json.loads((where / "prepared.json").read_text())
    except (OSError, ValueError):
        return where, "absent", f"Huawei's torch_npu {wanted or '?'} is not prepared"
    stale = prepare.format_problem(meta) if isinstance(meta, dict) else "its prepared.json is not a record"
    if stale:
        return where, "stale", f"Huawei's torch_npu in {where} cannot be used: {stale}"
    if not (where / "site" / "torch_npu" / "__init__.py").is_file():
        return where, "incomplete", f"Huawei's torch_npu in {where} is incomplete (torch_npu/__init__.py is missing)"
    return where, "", ""


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
    """Finds ``torch_npu`` and ``torchnpugen`` (and torch_npu's distribution metadata) in the prepared package,
    whatever ``sys.path`` holds (a script's runner replaces ``sys.path[0]``), and answers ``torch_npu._C`` with the
    stand-in native layer."""

    def find_spec(self, fullname, path=None, target=None):
        site = enabled_site()
        if site is None:
            return None
        if fullname == "torch_npu":
            if "torch" not in sys.modules:
                return _torch_first_spec(site)
            spec = importlib.machinery.PathFinder.find_spec(fullname, [site])
            if spec is not None and spec.loader is not None:
                spec.loader = _CheckedLoader(spec.loader, Path(site).parent)
            return spec
        if fullname == "torchnpugen":
            return importlib.machinery.PathFinder.find_spec(fullname, [site])
        if fullname != "torch_npu._C":
            return None  # submodules are found through the package's own __path__
        origin = getattr(sys.modules.get("torch_npu"), "__file__", None) or ""
        if not origin.startswith(site + os.sep):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=__name__)

    def find_distributions(self, context: importlib.metadata.DistributionFinder.Context = _ANY_DISTRIBUTION):
        site = enabled_site()
        if site is None or "path" in vars(context) or context.name not in (None, "torch_npu", "torch-npu"):
            return iter(())
        here = importlib.metadata.DistributionFinder.Context(name=context.name, path=[site])
        return importlib.metadata.MetadataPathFinder.find_distributions(here)

    def create_module(self, spec):
        global _native_built
        from . import native

        module = native.build(spec.name)
        _native_built = True
        register_layer("real")  # the device core answers which torch_npu Python runs over it
        return module

    def exec_module(self, module):
        pass


_finder = _PreparedPackageFinder()


def _torch_first_spec(site: str) -> importlib.machinery.ModuleSpec:
    spec = importlib.machinery.ModuleSpec("torch_npu", _TorchFirst(), is_package=True)
    spec.submodule_search_locations = [os.path.join(site, "torch_npu")]
    return spec


class _TorchFirst(importlib.abc.Loader):
    """``import torch_npu`` before ``import torch`` (a program importing torch_npu first, or a Ray worker unpickling a
    task that holds a torch.cuda function, which names torch_npu's) imports torch first, as ``import torch`` does:
    torch's import brings torch_npu up under the shim (torch's backend autoload or the shim's bring-up), and the
    shim's torch patches apply once ``torch.npu`` exists. Left to itself, torch_npu's first line imports torch, whose
    patches would then apply while torch_npu has not yet attached ``torch.npu``."""

    def create_module(self, spec):
        importlib.import_module("torch")
        module = sys.modules.get("torch_npu")
        if module is None:  # torch came up without it (autoload off, no bring-up): now torch_npu itself
            module = importlib.import_module("torch_npu")
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # already executed under its own spec, which the import system (and a post-import hook) replaced
        spec = self._spec
        module.__spec__ = spec
        if spec is not None:
            module.__loader__ = spec.loader


class _CheckedLoader(importlib.abc.Loader):
    """Huawei's ``torch_npu`` package: its files checked against the record before it executes, and what stops it
    from coming up made one :class:`BringUpError`. The module gets the real loader back before it executes."""

    def __init__(self, loader, where: Path):
        self._loader, self._where = loader, where

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self._loader
        try:
            meta = _metadata(str(self._where))
        except (OSError, ValueError) as exc:
            raise BringUpError(f"Huawei's torch_npu prepared in {self._where}: its prepared.json cannot be read "
                               f"({exc}). Run `ascend-shim fetch-torch-npu` again") from None
        problems = prepare.check_files(self._where, meta)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise BringUpError(f"Huawei's torch_npu prepared in {self._where} is not as `ascend-shim fetch-torch-npu` "
                               f"prepared it: {problems[0]}{more}. Run `ascend-shim fetch-torch-npu` again")
        try:
            self._loader.exec_module(module)
        except BringUpError:
            raise
        except Exception as exc:
            raise BringUpError(_import_failure(exc, self._where)) from exc

    def __getattr__(self, name):  # get_code, get_source, is_package ... for runpy and friends
        return getattr(self._loader, name)


def _import_failure(exc: BaseException, where: Path) -> str:
    """One line: what stopped torch_npu's import, where, and the fix. The package's files are hashed then (only on
    this path): a file changed since it was prepared is named, with ``fetch-torch-npu`` as the fix."""
    site = str(where / "site") + os.sep
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename:
        frames.append((exc.filename, exc.lineno or 0))
    frames = [(f, n) for f, n in frames if not f.startswith("<")]  # the import system's frozen frames
    filename, line = frames[-1] if frames else ("?", 0)
    if filename.startswith(site):
        filename = filename[len(site):]
    text = (str(exc).strip().splitlines() or [""])[0]
    cause = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    problems = prepare.check_files(where, _metadata(str(where)), full=True)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return (f"Huawei's torch_npu prepared in {where} is damaged: {problems[0]}{more} ({cause}, at "
                f"{filename}:{line}). Run `ascend-shim fetch-torch-npu` again")
    return (f"Huawei's torch_npu prepared in {where} could not come up over the emulated NPU ({cause}, at "
            f"{filename}:{line}). `ascend-shim doctor --simulate` checks the setup; ASCEND_SHIM_SIM_LAYER=builtin "
            f"runs the emulator's own torch_npu instead")


def enable(where: Path) -> None:
    """Make ``import torch_npu`` load the prepared package over the emulated device (idempotent)."""
    with _lock:
        site = str(where / "site")
        if enabled_site() == site:
            return
        _check_safe(where)
        import_system.install("real_layer", _finder)
        _set_site(site)


def disable() -> None:
    """Stop answering imports (an imported torch_npu stays: torch cannot unregister its device)."""
    with _lock:
        import_system.uninstall("real_layer")
        _set_site(None)


def native_layer_built() -> bool:
    """Has Huawei's torch_npu been imported over the emulated device in this process?"""
    return _native_built
