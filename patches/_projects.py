"""Helpers shared by the project patch sets (AReaL, realhf, Twinkle): version gates that also work for source
checkouts, and the "this project is NPU-native" registration.

Projects are often used from a git checkout: ``pip install -e .`` gives distribution metadata, a bare
``PYTHONPATH=.`` does not (realhf never had a distribution of its own). A set-level ``requires`` would make such
a set inactive, so these sets gate themselves: the distribution's version when installed, otherwise the
literal ``__version__`` in the package's version file, read from disk without importing the package.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from ascend_shim.errors import NotNeeded, TargetMissing
from ascend_shim.versions import installed_version, satisfies

_VERSION = re.compile(r"""__version__\s*=\s*["']([^"']+)["']""")
_cache: dict[tuple, tuple[str, str]] = {}


def project_version(dist: str | None, package: str, version_file: str = "version.py") -> tuple[str | None, str]:
    """``(version, where)``: ``(None, reason)`` when the package is not importable here; version ``""`` when
    it is importable but declares no literal version (a checkout whose version comes from metadata)."""
    key = (dist, package, version_file)
    if key in _cache:
        return _cache[key]
    found: tuple[str | None, str]
    version = installed_version(dist) if dist else None
    if version:
        found = (version, f"distribution {dist} {version}")
    else:
        try:
            spec = importlib.util.find_spec(package)  # a top-level name: finds, does not import
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            found = (None, f"{package} is not installed")
        else:
            where = list(spec.submodule_search_locations or [])
            text = ""
            if where:
                try:
                    text = (Path(where[0]) / version_file).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    text = ""
            match = _VERSION.search(text)
            found = (match.group(1), f"{package}/{version_file} of a source checkout") if match else \
                ("", f"{package} from a source checkout without a version")
    _cache[key] = found
    return found


def gate(dist: str | None, package: str, specifier: str, version_file: str = "version.py") -> str:
    """The project version, or raise: NotNeeded when the project is absent (nothing to patch), TargetMissing
    (a reported skip) when its version is outside the range the set was checked against."""
    version, where = project_version(dist, package, version_file)
    if version is None:
        raise NotNeeded(where)
    if version == "":
        return where  # a checkout that takes its version from metadata it does not have: the newest code
    if not satisfies(version, specifier):
        raise TargetMissing(f"{package} {version} ({where}) is outside the checked range {specifier}")
    return version


def register_native(ctx, *packages: str) -> None:
    """Frames of ``packages`` get the real CUDA answers (their own NPU detection runs); undone on deactivate."""
    from ascend_shim import callers

    added = callers.register_native(*packages)
    ctx.on_undo(lambda: callers.unregister_native(*added))
