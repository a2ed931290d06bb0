"""The exit summary lists each rewritten comparison once: its line says how often an NPU value decided it (the
run-time hits were listed a second time, as translated calls); and each hit is counted for the comparison that
made it, also with two comparisons on one line or one that walks a generator."""
import re

from ascend_shim.report import REPORT, format_summary
from ascend_shim.rewrite import report_sites, rewrite_source

SOURCE = '''\
v = "npu"
w = "npu"
for _ in range(3):
    if v == "cuda":
        pass
    both = v == "cuda" and w == "cuda"
found = "cuda" in (d for d in ["cpu", "npu"])
'''


def _run(tmp_path) -> tuple[str, list[dict]]:
    filename = str(tmp_path / "loop.py")
    code, sites = rewrite_source(SOURCE, filename)
    report_sites(sites)
    g: dict = {}
    exec(code, g)
    assert g["both"] is True and g["found"] is True
    events = [e for e in REPORT.events() if e["file"] == filename]
    return filename, events


def test_each_rewritten_comparison_is_one_line_of_the_summary(tmp_path):
    filename, events = _run(tmp_path)
    summary = format_summary({"patch_sets": {}, "patches": {}, "events": events})
    lines = [ln.strip() for ln in summary.splitlines() if filename in ln]
    assert sorted(lines) == sorted([
        f'{filename}:4  v == "cuda" -> compares as CUDA for npu  x3',
        f'{filename}:6  v == "cuda" -> compares as CUDA for npu  x3',
        f'{filename}:6  w == "cuda" -> compares as CUDA for npu  x3',
        f'{filename}:7  "cuda" in (d for d in ["cpu", "npu"]) -> compares as CUDA for npu  x1',
    ]), summary
    assert "translated CUDA calls" not in summary, summary
    assert re.search(r"rewritten comparisons in CUDA code: 4 sites, 10 decided by an NPU value", summary), summary


def test_each_hit_is_counted_for_its_own_comparison(tmp_path):
    filename, events = _run(tmp_path)
    hits = {(e["line"], e["api"]): e["count"] for e in events if e["category"] == "translated"}
    assert hits == {(4, 'v == "cuda"'): 3, (6, 'v == "cuda"'): 3, (6, 'w == "cuda"'): 3,
                    (7, '"cuda" in (d for d in ["cpu", "npu"])'): 1}
    assert not [e for e in REPORT.events() if e["file"].endswith("runtime.py")]


def test_a_comparison_no_npu_value_reached_is_left_out_of_the_summary(tmp_path):
    """It did nothing; the JSON report still lists it (with count 0)."""
    filename = str(tmp_path / "unreached.py")
    code, sites = rewrite_source('def f(v):\n    return v == "cuda"\n', filename)
    report_sites(sites)
    exec(code, {})  # defined, never called
    events = [e for e in REPORT.events() if e["file"] == filename]
    assert [e["category"] for e in events] == ["rewritten"], events
    summary = format_summary({"patch_sets": {}, "patches": {}, "events": events})
    assert filename not in summary and "rewritten comparisons" not in summary, summary
