"""Coverage verdicts from the patch metadata: which declared patch covers a finding, and how well.

Nothing here knows what any particular patch set contains: the verdicts come from ``Patch.covers``,
``Patch.target`` and ``Patch.fidelity`` of the patch sets given (by default every registered set selected by
the configuration), matched by the rules documented in :mod:`ascend_shim.scan.symbols`.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable

from ..registry import Patch, PatchSet
from .. import fidelity
from .symbols import VERDICTS, known_unsupported, target_symbol

_GLOB_CHARS = set("*?[")


@dataclasses.dataclass(frozen=True)
class Verdict:
    verdict: str                    # one of symbols.VERDICTS
    patches: tuple[str, ...] = ()   # ids of the deciding patches
    key: str = ""                   # the finding key that matched
    reason: str = ""


@dataclasses.dataclass
class _Entry:
    patch: Patch
    exact: frozenset[str]
    globs: tuple[str, ...]
    module: str | None              # provide-module patches contain everything below their module


def _entry(patch: Patch) -> _Entry:
    exact, globs = set(), []
    for c in patch.covers:
        c = c.strip()
        if not c:
            continue
        (globs.append(c) if _GLOB_CHARS & set(c) else exact.add(c))
    target = target_symbol(patch.target)
    exact.add(target)
    module = target if patch.kind == "provide-module" and not target.startswith("env:") else None
    return _Entry(patch, frozenset(exact), tuple(globs), module)


class CoverageIndex:
    """Answers ``verdict(keys)`` for a fixed list of patches."""

    def __init__(self, patches: Iterable[Patch], rewrite: bool = True):
        self.patches = list(patches)
        self._entries = [_entry(p) for p in self.patches]
        self._order = {p.id: i for i, p in enumerate(self.patches)}  # declaration order: core sets first
        self.rewrite = rewrite  # ASCEND_SHIM_REWRITE: does the user-code rewrite run at all?

    def _matches(self, key: str) -> list[Patch]:
        """The patches matching ``key``: the exact matches if any, else the broad ones (glob / provided module)."""
        exact = [e.patch for e in self._entries if key in e.exact]
        if exact:
            return exact
        return [e.patch for e in self._entries
                if any(fnmatch.fnmatchcase(key, g) for g in e.globs)
                or (e.module is not None and (key == e.module or key.startswith(e.module + ".")))]

    def verdict(self, keys: Iterable[str]) -> Verdict:
        keys = tuple(keys)
        for key in keys:
            patches = self._matches(key)
            if patches:
                one = min(patches, key=lambda p: (fidelity.RANK[p.fidelity], target_symbol(p.target) != key,
                                                  self._order[p.id]))
                return Verdict(fidelity.VERDICT[one.fidelity], (one.id,), key)
        reason = known_unsupported(keys)
        if reason:
            return Verdict("unsupported", (), "", f"no patch covers it; {reason}")
        return Verdict("not covered")

    def verdict_of(self, raw) -> Verdict:
        """The verdict of a scanned finding: device comparisons follow what the user-code rewrite does with
        them at run time (in every process of a job: the main script, imported modules, launcher workers)."""
        decision = getattr(raw, "rewrite", None)
        if decision is None:
            return self.verdict(raw.keys)
        if decision != "rewritten":
            from ..rewrite.transform import NPU_AWARE_REASON

            if decision.startswith(NPU_AWARE_REASON):  # the code's own NPU branch runs: nothing to do
                return Verdict("covered", (), "", decision)
            return Verdict("not covered", (), "", decision)
        if not self.rewrite:
            return Verdict("not covered", (), "", "ASCEND_SHIM_REWRITE=0: the comparison stays as written")
        return self.verdict(raw.keys)

    def covering(self, symbol: str) -> list[Patch]:
        """Patches matching one symbol (exact or broad) -- used by ``doctor`` for env vars and modules."""
        return self._matches(symbol)


def index_for(sets: Iterable[PatchSet] | None = None, config=None, backend: str | None = None) -> CoverageIndex:
    """A :class:`CoverageIndex` over ``sets`` (default: every registered patch set, per ``config``)."""
    from ..config import Config
    from ..registry import all_patch_sets
    from ..selection import selected_patches, validate_ids

    config = config or Config.from_env()
    if sets is None:
        sets, _errors = all_patch_sets(config.patch_modules)
        validate_ids(config, sets)
    return CoverageIndex(selected_patches(sets, config, backend or config.backend), rewrite=config.rewrite)


__all__ = ["CoverageIndex", "Verdict", "VERDICTS", "index_for"]
