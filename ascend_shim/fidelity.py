"""The fidelity vocabulary: what a patch delivers for its CUDA feature, and the scan verdict that follows.

Declared on every patch (``Patch.fidelity``), shown by ``list`` and the coverage table, and turned into a
verdict by ``scan``: one definition for all three.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Fidelity:
    name: str
    verdict: str  # what scan says of a finding this patch covers
    meaning: str


#: best first: when several patches cover one finding, the best fidelity is the one named
FIDELITIES = (
    Fidelity("exact", "covered", "translated to the NPU equivalent with the same result"),
    Fidelity("fallback", "fallback", "an exact fallback that is slower or coarser (recorded in the report)"),
    Fidelity("neutral", "neutral", "a documented neutral value (e.g. a profiler range that does nothing), "
                                   "recorded in the report"),
    Fidelity("unsupported", "unsupported", "no NPU equivalent: a clear error naming the feature, the patch and "
                                           "what to do"),
)
NAMES = tuple(f.name for f in FIDELITIES)
VERDICT = {f.name: f.verdict for f in FIDELITIES}
RANK = {f.name: i for i, f in enumerate(FIDELITIES)}


def markdown() -> str:
    """The fidelity table of the documentation."""
    rows = ["| fidelity | scan verdict | meaning |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {f.verdict} | {f.meaning} |" for f in FIDELITIES]
    return "\n".join(rows) + "\n"
