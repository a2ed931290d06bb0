"""The rewrite's cost grows linearly with the size of a module (it was quadratic in its number of sites).

Timed as a ratio (the same work at N and 4N sites, best of a few CPU-time samples), never against a clock, so a
loaded machine slows both sides alike."""
import ast
import time

from ascend_shim.rewrite import rewrite_source
from ascend_shim.rewrite.transform import _Lines


def _module(n: int) -> str:
    return "\n".join(f'def f{i}(x):\n    return x.device.type == "cuda"\n' for i in range(n))


def _cost(source: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        _, sites = rewrite_source(source, "<scale>")
        best = min(best, time.process_time() - start)
    assert sum(s.rewritten for s in sites) == source.count('"cuda"')
    return best


def test_four_times_the_sites_cost_about_four_times_as_much():
    n = 400
    small, large = _cost(_module(n)), _cost(_module(4 * n))
    assert large / small < 8, f"{n} sites: {small:.3f}s, {4 * n} sites: {large:.3f}s (quadratic: ~16x)"


def test_snippets_are_the_source_segments():
    text = 'x = 1\r\ny = "\u00e9" == "cuda"\rz = (a ==\n   "cuda")\n\f\nw = ("\u00fc\u2028" ==\r\n "nccl")'
    lines = _Lines(text)
    for node in ast.walk(ast.parse(text)):
        if hasattr(node, "end_lineno"):
            assert lines.segment(node) == ast.get_source_segment(text, node), ast.dump(node)
