"""Which patch sets and patches apply: the selection rules shared by ``activate``, ``list``, ``doctor`` and ``scan``.

A set is judged in this order: the backend it serves (``auto`` is judged as ``npu``: a report or a scan made
without hardware describes what the NPU run would do), the toggles (``ASCEND_SHIM_ONLY``, off-by-default sets
and ``ASCEND_SHIM_ENABLE``, ``ASCEND_SHIM_DISABLE``), then the installed versions of the distributions it
requires. A patch of a selected set can still be disabled by id; a project gate (``PatchSet.project``) is
checked when the patch applies, since a source checkout may join ``sys.path`` only after activation.
"""
from __future__ import annotations

import fnmatch

from . import versions
from .config import Config
from .errors import ConfigError
from .registry import Patch, PatchSet


def judged_backend(backend: str) -> str:
    """The backend selection is judged for: ``auto`` counts as ``npu``."""
    return "npu" if backend == "auto" else backend


def matches(ident: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(ident, p) for p in patterns)


def validate_ids(config: Config, sets: list[PatchSet]) -> None:
    """Every id or pattern in the toggles names a known set or patch (a typo is an error, not a no-op)."""
    known = {s.id for s in sets} | {p.id for s in sets for p in s.patches}
    for var, items in (("ASCEND_SHIM_DISABLE", config.disable), ("ASCEND_SHIM_ONLY", config.only),
                       ("ASCEND_SHIM_ENABLE", config.enable)):
        for item in items:
            if not any(fnmatch.fnmatchcase(k, item) for k in known):
                raise ConfigError(f"{var}: unknown patch set or patch id {item!r}; patch sets: "
                                  f"{', '.join(sorted(s.id for s in sets))} (all ids: `python -m ascend_shim list`)")


def set_selection(s: PatchSet, config: Config, backend: str) -> tuple[str, str]:
    """``(status, reason)`` of a set by backend and toggles, before versions: active / inactive / disabled."""
    if judged_backend(backend) not in s.backends:
        return "inactive", f"not used with backend {backend}"
    if config.only:
        if not (matches(s.id, config.only) or any(matches(p.id, config.only) for p in s.patches)):
            return "disabled", "not in ASCEND_SHIM_ONLY"
    elif not s.default_enabled and not matches(s.id, config.enable):
        return "disabled", "off by default (turn on with ASCEND_SHIM_ENABLE)"
    if matches(s.id, config.disable):
        return "disabled", "in ASCEND_SHIM_DISABLE"
    return "active", ""


def set_status(s: PatchSet, config: Config, backend: str) -> tuple[str, str, dict]:
    """``(status, reason, installed versions)``: selection, then version gating.

    active / disabled / inactive (not for this backend, or a required distribution is absent) / skipped
    (a version outside the declared range).
    """
    status, reason = set_selection(s, config, backend)
    ok, why, found = versions.check_requirements(s.requires)
    if status == "active" and not ok:
        status = "inactive" if any(v is None for v in found.values()) else "skipped"
        reason = why
    return status, reason, found


def patch_disabled(p: Patch, s: PatchSet, config: Config) -> str:
    """Why a patch of a selected set is disabled by the toggles ("" when it is not)."""
    if matches(p.id, config.disable):
        return "in ASCEND_SHIM_DISABLE"
    if config.only and not matches(s.id, config.only) and not matches(p.id, config.only):
        return "not in ASCEND_SHIM_ONLY"
    return ""


def selected_patches(sets, config: Config, backend: str) -> list[Patch]:
    """The patches the toggles select for ``backend`` (versions are not checked: a scan judges a repository,
    possibly on a machine without its dependencies)."""
    return [p for s in sets if set_selection(s, config, backend)[0] == "active"
            for p in s.patches if not patch_disabled(p, s, config)]
