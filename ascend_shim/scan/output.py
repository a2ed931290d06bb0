"""Rendering a scan: the human table, JSON and CSV. The table and the CSV escape the control characters of what
they print from the repository (its file names, the source text): :func:`ascend_shim.terminal.printable`."""
from __future__ import annotations

import csv
import io
import json

from ..terminal import printable
from .rule import RULE, explain
from .symbols import CATEGORIES, VERDICTS

CSV_FIELDS = ("path", "line", "col", "category", "symbol", "verdict", "patches", "text", "reason")


def summary(findings) -> dict:
    by_category: dict[str, int] = {}
    by_verdict = {v: 0 for v in VERDICTS}
    matrix: dict[str, dict[str, int]] = {}
    for f in findings:
        by_category[f.category] = by_category.get(f.category, 0) + 1
        by_verdict[f.verdict] += 1
        row = matrix.setdefault(f.category, {})
        row[f.verdict] = row.get(f.verdict, 0) + 1
    order = list(CATEGORIES) + sorted(set(by_category) - set(CATEGORIES))
    return {
        "findings": len(findings),
        "files_with_findings": len({f.path for f in findings}),
        "by_category": {c: by_category[c] for c in order if c in by_category},
        "by_verdict": by_verdict,
        "by_category_verdict": {c: matrix[c] for c in order if c in matrix},
    }


def to_json(result, findings) -> str:
    data = {
        "root": result.root,
        "files_scanned": result.files_scanned,
        "patch_sets": result.patch_sets,
        "findings": [f.as_dict() for f in findings],
        "errors": [{"path": p, "error": e} for p, e in result.errors],
        "skipped": [{"path": p, "reason": r} for p, r in result.skipped],
        "summary": summary(findings),
        "unsupported": sum(f.verdict == "unsupported" for f in result.findings),
        "rule": {"text": RULE, **result.rule},
    }
    return json.dumps(data, indent=1)


def to_csv(findings) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for f in findings:
        row = f.as_dict()
        row["patches"] = ";".join(row["patches"])
        w.writerow({k: printable(row[k]) for k in CSV_FIELDS})
    return buf.getvalue()


def to_text(result, findings) -> str:
    lines = []
    if findings:
        where = [f"{printable(f.path)}:{f.line}:{f.col}" for f in findings]
        symbols = [printable(f.symbol) for f in findings]
        w_where = min(max(len(x) for x in where), 60)
        w_cat = max(len(f.category) for f in findings)
        w_sym = min(max(len(s) for s in symbols), 48)
        for loc, symbol, f in zip(where, symbols, findings, strict=True):
            extra = f"  [{', '.join(f.patches)}]" if f.patches else (f"  ({f.reason})" if f.reason else "")
            lines.append(f"{loc:<{w_where}}  {f.category:<{w_cat}}  {symbol:<{w_sym}}  {f.verdict}{printable(extra)}")
        lines.append("")
    s = summary(findings)
    lines.append(f"{s['findings']} finding(s) in {s['files_with_findings']} file(s); {result.files_scanned} "
                 f".py file(s) scanned" + (f", {len(result.errors)} could not be parsed" if result.errors else "")
                 + (f", {len(result.skipped)} skipped (not regular files)" if result.skipped else ""))
    if s["by_category_verdict"]:
        verdicts = [v for v in VERDICTS if s["by_verdict"][v]]
        w = max(len(c) for c in s["by_category_verdict"])
        lines.append(f"  {'category':<{w}}  {'total':>5}  " + "  ".join(f"{v:>11}" for v in verdicts))
        for cat, row in s["by_category_verdict"].items():
            lines.append(f"  {cat:<{w}}  {s['by_category'][cat]:>5}  "
                         + "  ".join(f"{row.get(v, 0):>11}" for v in verdicts))
    lines.append("verdicts: " + ", ".join(f"{v} {n}" for v, n in s["by_verdict"].items()))
    lines += explain(result.rule)
    if not result.patch_sets:
        lines.append("note: no patch set is selected, so nothing counts as covered "
                     "(see `python -m ascend_shim list`)")
    lines += problem_lines(result)
    return "\n".join(lines) + "\n"


def problem_lines(result) -> list[str]:
    """One line per file that could not be read or parsed, and per name skipped as not a regular file."""
    return ([f"could not parse {printable(path)}: {printable(err)}" for path, err in result.errors]
            + [f"skipped {printable(path)}: {printable(why)}" for path, why in result.skipped])
