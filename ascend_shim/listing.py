"""``ascend-shim list``: every patch set and patch, with metadata and status in this environment.

Generated from the declarations alone, like the coverage table of docs/coverage.md (``--format markdown``), so the
documentation cannot drift from the code. Each patch's removal condition is judged here: a version condition
against the installed packages (``--removable`` keeps only the patches whose condition holds); a link is named by
what it points at upstream (an issue, a pull request, a file at a pinned commit, another page).
"""
from __future__ import annotations

import json
from typing import Any

from .selection import judged_backend, patch_disabled, set_status, validate_ids
from .config import Config
from .registry import Patch, all_patch_sets
from .removal import KINDS, LINKS, evaluate


def collect(config: Config, removable: bool = False) -> list[dict]:
    """Every set and patch as data; ``removable``: only the patches whose removal condition holds here (and their
    sets)."""
    sets, _ = all_patch_sets(config.patch_modules)
    validate_ids(config, sets)
    out: list[dict[str, Any]] = []
    for s in sets:
        status, reason, found = set_status(s, config, judged_backend(config.backend))
        out.append({
            "id": s.id, "title": s.title, "requires": s.requires, "installed": found, "status": status,
            "reason": reason, "backends": list(s.backends), "default_enabled": s.default_enabled,
            "checked_against": s.checked_against, "source": s.source,
            "project": s.project.describe() if s.project else None, "native": list(s.native),
            "patches": [{
                "id": p.id, "target": p.target, "kind": p.kind, "fidelity": p.fidelity, "why": p.why,
                "what": p.what, "remove_when": p.remove_when, "removal": _removal(p), "covers": list(p.covers),
                "status": _patch_status(p, s, config, status),
            } for p in s.patches],
        })
    if removable:
        for listed in out:
            listed["patches"] = [p for p in listed["patches"] if p["removal"]["state"] == "removable"]
        out = [listed for listed in out if listed["patches"]]
    return out


def _removal(p: Patch) -> dict[str, str]:
    """The parsed removal condition of a patch and what it says here."""
    verdict = evaluate(p.removal)
    return {**p.removal.as_dict(), "state": verdict.state, "detail": verdict.detail}


def _patch_status(p, s, config: Config, set_state: str) -> str:
    """As activation records it: a patch of a set that is not active has the set's status."""
    if set_state != "active":
        return set_state
    why = patch_disabled(p, s, config)
    return f"disabled: {why}" if why else "active"


def render(config: Config, fmt: str = "text", removable: bool = False) -> str:
    data = collect(config, removable)
    if fmt == "json":
        return json.dumps(data, indent=1)
    if fmt == "markdown":
        return coverage_table(data)
    if fmt == "env-markdown":
        return env_table()
    lines = []
    for s in data:
        req = _gates(s) or "-"
        have = ", ".join(f"{d} {v or 'absent'}" for d, v in s["installed"].items()) or "-"
        lines.append(f"[{s['status']}] {s['id']}: {s['title']}")
        lines.append(f"    requires {req}; installed {have}" + (f"; {s['reason']}" if s["reason"] else ""))
        if s["native"]:
            lines.append(f"    NPU-native (see the real device): {', '.join(s['native'])}")
        if s["checked_against"]:
            lines.append(f"    checked against {s['checked_against']}")
        for p in s["patches"]:
            lines.append(f"  - {p['id']} ({p['kind']}, {p['fidelity']}) -> {p['target']}")
            lines.append(f"      why:  {p['why']}")
            lines.append(f"      what: {p['what']}")
            lines.append(f"      remove when: {p['remove_when']}")
            if p["removal"]["kind"] != "never":  # a version is judged here; a link says what it points at
                lines.append(f"                   {p['removal']['detail']}")
        lines.append("")
    if removable and not data:
        lines.append("no patch is removable here: no version condition is satisfied by the installed packages")
    lines.append(_removal_summary(data))
    return "\n".join(lines).rstrip() + "\n"


def _removal_summary(data: list[dict[str, Any]]) -> str:
    """One line: how many patches have each kind of removal condition, how many are removable here, and what the
    links point at."""
    removals = [p["removal"] for s in data for p in s["patches"]]
    count = {kind: sum(r["kind"] == kind for r in removals) for kind in KINDS}
    here = sum(r["state"] == "removable" for r in removals)
    links = ", ".join(f"{n} {LINKS[link]}" for link in LINKS
                      if (n := sum(r.get("link") == link for r in removals)))
    return (f"removal conditions: {count['version']} version ({here} removable here), {count['link']} link"
            + (f" ({links})" if links else "") + f", {count['never']} never")


def env_table() -> str:
    """The table of settings (docs/configuration.md), from :data:`ascend_shim.config.ENV_VARS`."""
    from .config import ENV_VARS

    rows = ["| variable | option | values | default | what it does |", "|---|---|---|---|---|"]
    for v in ENV_VARS:
        cells = [f"`{v.name}`", f"`{v.flag}`" if v.flag else "", v.values,
                 f"`{v.default}`" if v.default else "(empty)", v.doc]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _gates(s: dict) -> str:
    """The version gates of a listed set: required distributions, then its project gate."""
    return ", ".join([f"{d} {spec}" for d, spec in s["requires"].items()] + ([s["project"]] if s["project"] else []))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def coverage_table(data: list[dict]) -> str:
    """The coverage table (docs/coverage.md): per patch set, one row per patch (sets folded with <details>)."""
    out = []
    for s in data:
        req = _gates(s) or "no version gate"
        n = len(s["patches"])
        out.append(f"<details><summary><b>{s['id']}</b>: {_cell(s['title'])} ({n} patch{'es' * (n != 1)}; "
                   f"{_cell(req)})</summary>\n")
        out.append("| patch | target | kind | fidelity | what it does | remove when |")
        out.append("|---|---|---|---|---|---|")
        for p in s["patches"]:
            cells = [p["id"], f"`{p['target']}`", p["kind"], p["fidelity"], p["what"], _removal_cell(p["removal"])]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("\n</details>\n")
    return "\n".join(out)


def _removal_cell(removal: dict[str, str]) -> str:
    """A removal condition in the coverage table: a requirement as code, a link as a link, then the reason."""
    condition = removal["condition"]
    if removal["kind"] == "version":
        condition = f"`{condition}`"
    elif removal["kind"] == "link":
        condition = f"<{condition}>"
    return f"{condition}: {removal['reason']}"
