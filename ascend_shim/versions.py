"""Version gating with ``importlib.metadata``: is a distribution installed, and inside a declared range?"""
from __future__ import annotations

import importlib.metadata

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def satisfies(version: str, specifier: str) -> bool:
    """``"2.13.0+cpu"`` satisfies ``">=2.4,<2.15"``; pre-releases and local builds count as their version."""
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


def check_requirements(requires) -> tuple[bool, str, dict[str, str | None]]:
    """``(ok, reason, found_versions)`` for ``{dist: specifier}`` (a dict or pairs); every version is looked up."""
    items = list(requires.items() if isinstance(requires, dict) else requires)
    found: dict[str, str | None] = {dist: installed_version(dist) for dist, _ in items}
    for dist, spec in items:
        version = found[dist]
        if version is None:
            return False, f"{dist} is not installed", found
        if spec and not satisfies(version, spec):
            return False, f"{dist} {version} is outside the supported range {spec}", found
    return True, "", found
