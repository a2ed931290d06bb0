"""Each rewritten pattern evaluated with a CUDA value, its NPU counterpart and unrelated values."""
import textwrap
import types
import warnings

import pytest
import torch

from ascend_shim.rewrite import rewrite_source
from ascend_shim.rewrite import runtime


def run(source: str, rewritten: bool = True, **values):
    source = textwrap.dedent(source)
    g = dict(values, torch=torch)
    if rewritten:
        code, sites = rewrite_source(source, "<rules>")
        assert any(s.rewritten for s in sites), f"nothing rewritten in {source!r}"
    else:
        code = compile(source, "<rules>", "exec", dont_inherit=True)
    exec(code, g)
    return g["r"]


def expr(e: str, v, rewritten: bool = True):
    return run(f"r = {e}", rewritten, v=v)


def dev(spec):
    return torch.device(spec)


NS = types.SimpleNamespace
# (expression over v, value factory, expected) -- value factories so the npu device exists only with the fixture
CASES = [
    # x.device.type == "cuda"
    ('v.type == "cuda"', lambda: dev("cuda:0"), True),
    ('v.type == "cuda"', lambda: dev("npu:0"), True),
    ('v.type == "cuda"', lambda: dev("cpu"), False),
    ('v.type == "cuda"', lambda: NS(type="mps"), False),
    # device == "cuda" (str values; a torch.device never equals a str, on CUDA either)
    ('v == "cuda"', lambda: "cuda", True),
    ('v == "cuda"', lambda: "npu", True),
    ('v == "cuda"', lambda: "npu:0", False),  # as "cuda:0" == "cuda"
    ('v == "cuda"', lambda: "cpu", False),
    ('v == "cuda"', lambda: "npux", False),
    ('v == "cuda"', lambda: "NPU", False),
    ('v == "cuda"', lambda: 0, False),
    ('v == "cuda"', lambda: None, False),
    ('v == "cuda"', lambda: dev("cuda"), False),
    ('v == "cuda"', lambda: dev("npu"), False),
    ('"cuda" == v', lambda: "npu", True),
    ('v == "cuda:1"', lambda: "npu:1", True),
    ('v == "cuda:1"', lambda: "npu:0", False),
    ('v == "cuda:1"', lambda: "npu:١", False),  # non-ASCII digit: not a device string
    # dev.type != "cuda"
    ('v.type != "cuda"', lambda: dev("cuda:0"), False),
    ('v.type != "cuda"', lambda: dev("npu:0"), False),
    ('v.type != "cuda"', lambda: dev("cpu"), True),
    ('v != "cuda"', lambda: "npu", False),
    ('v != "cuda"', lambda: "npu:0", True),
    ('v != "cuda"', lambda: "gpu", True),
    ('"cuda" != v', lambda: "npu", False),
    ('"cuda:1" != v', lambda: "npu:0", True),
    # str(dev).startswith("cuda")
    ('str(v).startswith("cuda")', lambda: dev("cuda:0"), True),
    ('str(v).startswith("cuda")', lambda: dev("npu:0"), True),
    ('str(v).startswith("cuda")', lambda: dev("npu"), True),
    ('str(v).startswith("cuda")', lambda: dev("cpu"), False),
    ('v.startswith("cuda")', lambda: "npu_fused_attention", False),  # not a device string
    ('v.startswith("cuda:1")', lambda: "npu:1", True),
    ('v.startswith("cuda:1")', lambda: "npu:0", False),
    ('v.startswith(("cuda", "mps"))', lambda: "npu:3", True),
    ('v.startswith(("cuda", "mps"))', lambda: "xla:0", False),
    ('v.startswith("cuda", 1)', lambda: "npu", False),  # start index: compared on "cuda"[1:], as on CUDA
    # "cuda" in str(device)
    ('"cuda" in str(v)', lambda: dev("cuda:1"), True),
    ('"cuda" in str(v)', lambda: dev("npu:1"), True),
    ('"cuda" in str(v)', lambda: dev("cpu"), False),
    ('"cuda" in v', lambda: "npu", True),
    ('"cuda" in v', lambda: "running on npu:0", False),  # not a device string: unchanged
    ('"cuda" in v', lambda: "npuish", False),
    ('"cuda" in v', lambda: ["npu:0", "cpu"], False),  # "cuda" not in ["cuda:0", "cpu"] on CUDA either
    ('"cuda" in v', lambda: ["npu", "cpu"], True),
    ('"cuda" in v', lambda: {"npu": 1}, False),  # a mapping answers by its own lookup: v["cuda"] fails
    ('"cuda" not in v', lambda: "npu:0", False),
    ('"cuda" not in v', lambda: "cpu", True),
    # dist.get_backend() == "nccl"
    ('v == "nccl"', lambda: "nccl", True),
    ('v == "nccl"', lambda: "hccl", True),
    ('v == "nccl"', lambda: type("Backend", (str,), {})("hccl"), True),
    ('v == "nccl"', lambda: "gloo", False),
    ('v == "nccl"', lambda: "npu", False),
    ('v != "nccl"', lambda: "hccl", False),
    ('"nccl" in v', lambda: "cpu:gloo,npu:hccl", True),
    ('"nccl" in v', lambda: "cpu:gloo", False),
    # backend in ("nccl", "gloo")
    ('v in ("nccl", "gloo")', lambda: "hccl", True),
    ('v in ("nccl", "gloo")', lambda: "gloo", True),
    ('v in ("nccl", "gloo")', lambda: "mpi", False),
    ('v not in ("nccl", "gloo")', lambda: "hccl", False),
    ('v not in ("nccl", "gloo")', lambda: "mpi", True),
    ('v in {"nccl"}', lambda: "hccl", True),
    # x.device.type in ["cuda", "mps"]
    ('v.type in ["cuda", "mps"]', lambda: dev("cuda:0"), True),
    ('v.type in ["cuda", "mps"]', lambda: dev("npu:0"), True),
    ('v.type in ["cuda", "mps"]', lambda: NS(type="mps"), True),
    ('v.type in ["cuda", "mps"]', lambda: dev("cpu"), False),
    ('v.type not in ["cuda", "mps"]', lambda: dev("npu:0"), False),
    ('v in ("cuda:0", "cuda:1")', lambda: "npu:1", True),
    ('v in ("cuda:0", "cuda:1")', lambda: "npu:2", False),
    # torch.device("cuda") == x.device  (index rule as torch's: cuda != cuda:0)
    ('torch.device("cuda") == v', lambda: dev("cuda"), True),
    ('torch.device("cuda") == v', lambda: dev("npu"), True),
    ('torch.device("cuda") == v', lambda: dev("npu:0"), False),
    ('torch.device("cuda:1") == v', lambda: dev("npu:1"), True),
    ('torch.device("cuda:1") == v', lambda: dev("npu:0"), False),
    ('torch.device("cuda", 1) == v', lambda: dev("npu:1"), True),
    ('v == torch.device(type="cuda", index=0)', lambda: dev("npu:0"), True),
    ('torch.device("cuda") == v', lambda: dev("cpu"), False),
    ('torch.device("cuda") == v', lambda: "npu", False),  # a device never equals a str
    ('torch.device("cuda") != v', lambda: dev("npu"), False),
    ('v in [torch.device("cuda", 0)]', lambda: dev("npu:0"), True),
]


@pytest.mark.parametrize("source, make, expected", CASES, ids=[f"{c[0]}|{i}" for i, c in enumerate(CASES)])
def test_pattern(npu, source, make, expected):
    value = make()
    assert expr(source, value) is expected
    # the same expression with the CUDA-side value is unchanged by the rewrite wherever it is not an NPU value
    if runtime.counterpart(value) is None and not isinstance(value, (list, dict)):
        assert expr(source, value, rewritten=False) is expected


def test_npu_values_really_need_the_rewrite(npu):
    """Control: without the rewrite these comparisons are false for the NPU (so the cases above can fail)."""
    for source, value in [('v.type == "cuda"', npu), ('str(v).startswith("cuda")', npu), ('"cuda" in str(v)', npu),
                          ('v == "nccl"', "hccl"), ('v in ("nccl", "gloo")', "hccl"),
                          ('v.type in ["cuda", "mps"]', npu), ('torch.device("cuda:0") == v', npu)]:
        assert expr(source, value, rewritten=False) is False, source
        assert expr(source, value) is True, source


MATCH = '''
match v:
    case "cuda":
        r = "gpu"
    case "nccl" | "gloo":
        r = "collective"
    case ("cuda:1" as d):
        r = "gpu1"
    case _:
        r = "other"
'''


@pytest.mark.parametrize("value, expected", [("cuda", "gpu"), ("npu", "gpu"), ("hccl", "collective"),
                                             ("npu:1", "gpu1"), ("npu:0", "other"), ("cpu", "other"),
                                             ("gloo", "collective"), ("npuish", "other")])
def test_match_case(value, expected):
    assert run(MATCH, v=value) == expected


def test_match_on_device_type(npu):
    src = 'match v.type:\n    case "cuda":\n        r = 1\n    case _:\n        r = 0\n'
    assert run(src, v=npu) == 1
    assert run(src, rewritten=False, v=npu) == 0
    assert run(src, v=torch.device("cpu")) == 0


class _WeirdEq:
    """``==`` / ``!=`` return a non-bool (like numpy arrays and tensors)."""
    token = object()

    def __eq__(self, other):
        return self.token

    __ne__ = __eq__

    def startswith(self, *args):
        return self.token


@pytest.mark.parametrize("source", ['v == "cuda"', 'v != "cuda"', '"nccl" == v', 'v.startswith("cuda")'])
def test_non_bool_results_pass_through(source):
    v = _WeirdEq()
    assert expr(source, v) is _WeirdEq.token


def test_errors_are_the_original_ones():
    with pytest.raises(TypeError):
        expr('"cuda" in v', 5)  # 'in <int>' requires ... : TypeError as before
    with pytest.raises(AttributeError):
        expr('v.startswith("cuda")', 5)


def test_is_and_chains_and_names_are_not_rewritten():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        _, sites = rewrite_source('r = v is "cuda"\ns = v is not "nccl"\n', "<x>")
    assert sites == []
    _, sites = rewrite_source('CUDA = "cuda"\nr = v == CUDA\nq = v < "cuda"\n', "<x>")
    assert sites == []
    _, sites = rewrite_source('r = a == "cuda" == b\n', "<x>")
    assert [(s.pattern, s.rewritten) for s in sites] == [("chain", False)]
    _, sites = rewrite_source('r = v == "cudax"\ns = v == "Cuda"\nt = v == "cuda:x"\nu = v in "cuda"\n', "<x>")
    assert sites == []


def test_operands_evaluated_once_left_to_right():
    src = '''
    seen = []
    def L(x):
        seen.append(x)
        return x
    r = (L("npu") == "cuda", L("hccl") in (L("x"), "nccl"), L("npu:0").startswith("cuda", L(0)),
         "cuda" not in L("npu:1"))
    r = (r, seen)
    '''
    assert run(src) == ((True, True, True, False), ["npu", "hccl", "x", "npu:0", 0, "npu:1"])


AWARE = '''
def kind(d):
    if d.type == "cuda":
        return "cuda-branch"
    elif d.type == "npu":
        return "npu-branch"
    return "cpu-branch"

def naive(d):
    if d.type == "cuda":
        return "cuda-branch"
    return "cpu-branch"

def backend_aware(b):
    return "nccl" if b == "nccl" else ("hccl" if b == "hccl" else "other")

if v.type == "cuda":
    top = "cuda-branch"
elif v.type.startswith("npu"):
    top = "npu-branch"
else:
    top = "cpu-branch"
r = (kind(v), naive(v), backend_aware("hccl"), top)
'''


def test_npu_aware_code_is_left_alone(npu):
    assert run(AWARE, v=npu) == ("npu-branch", "cuda-branch", "hccl", "npu-branch")
    _, sites = rewrite_source(AWARE, "<aware>")
    skipped = sorted(s.line for s in sites if not s.rewritten)
    assert skipped == [3, 15, 17]
    assert [s.line for s in sites if s.rewritten] == [10]


def test_sites_and_helper_import_keep_lines():
    src = '''"""Docstring."""
from __future__ import annotations

import os
x = (1 if
     os.sep == "cuda" else 2)
'''
    code, sites = rewrite_source(src, "<lines>")
    (site,) = sites
    assert (site.line, site.col, site.end_line, site.snippet, site.pattern, site.kind) == \
        (6, 5, 6, 'os.sep == "cuda"', "==", "device")
    assert site.detail == "compares as CUDA for npu"
    lines = {ln for _, _, ln in code.co_lines() if ln}
    assert max(lines) == 6
    g = {}
    exec(code, g)
    assert g["__doc__"] == "Docstring." and g["x"] == 2
    assert g["__ascend_shim_eq__"] is runtime.eq
    assert "annotations" in g  # the __future__ import stayed first (else compile would have failed)


LINES = '''\
"""Doc."""
from __future__ import annotations

import torch


class Model:
    def forward(self, x, backend):
        if x.device.type == "cuda" and backend in (
                "nccl", "gloo"):
            return str(x.device).startswith(
                "cuda")
        return [d for d in (x.device,) if d != torch.device("cuda", 0)]


def pick(dev):
    match dev:
        case "cuda":
            return 1
    return "cuda" not in dev


f = lambda v: v == "nccl"
'''


def _line_table(code):
    """Every (code object name, line) pair an instruction of ``code`` or a nested code object carries."""
    out = {(code.co_name, ln) for _, _, ln in code.co_lines() if ln is not None}
    for const in code.co_consts:
        if hasattr(const, "co_lines"):
            out |= _line_table(const)
    return out


@pytest.mark.parametrize("source", [LINES, "#!/usr/bin/env python\n# header comment\n" + LINES.split("\n", 1)[1]],
                         ids=["docstring", "comments"])
def test_line_tables_identical_to_the_original(source):
    """No instruction of the rewritten code (helper loads and calls, the inserted import) carries a line the
    original code did not have, in any function: tracebacks, debuggers and coverage see the user's lines."""
    code, sites = rewrite_source(source, "<lines>")
    assert len([s for s in sites if s.rewritten]) == 7
    original = compile(source, "<lines>", "exec", dont_inherit=True)
    assert _line_table(code) == _line_table(original)


MODULE_LEVEL = '''\
import sys
if True:                                  # a big top-level block (like `if __name__ == "__main__":`)
    if sys.argv[-1] == "npu":             # NPU-aware setup in one statement ...
        setup = "npu"
    if v.type == "cuda":                  # ... does not switch off the rewrite of another statement
        a = "cuda-branch"
    else:
        a = "cpu-branch"
    match v.type:
        case "cuda":
            b = "cuda-branch"
        case "npu":
            b = "npu-branch"
    c = "cuda-branch" if v.type == "cuda" else ("npu-branch" if v.type == "npu" else "cpu-branch")


class Config:
    on_gpu = v.type == "cuda"
    backend = "hccl" if BACKEND == "hccl" else "other"
    uses_nccl = BACKEND == "nccl"
r = (a, b, c, Config.on_gpu, Config.uses_nccl)
'''


def test_npu_awareness_outside_functions_is_per_statement(npu):
    assert run(MODULE_LEVEL, v=npu, BACKEND="hccl") == ("cuda-branch", "npu-branch", "npu-branch", True, True)
    _, sites = rewrite_source(MODULE_LEVEL, "<module>")
    assert sorted((s.line, s.rewritten) for s in sites) == [
        (5, True), (10, False), (14, False), (18, True), (20, True)]


def test_elif_chain_counts_as_one_unit():
    """An NPU test anywhere in an if/elif chain leaves all its CUDA tests alone, also those after it."""
    src = '''\
if v == "npu:0":
    r = "npu0"
elif v == "cuda":
    r = "cuda"
else:
    r = "other"
'''
    assert run(src, rewritten=False, v="npu") == "other"
    code, sites = rewrite_source(src, "<chain>")
    assert [(s.line, s.rewritten) for s in sites] == [(3, False)]
    g = {"v": "npu"}
    exec(code, g)
    assert g["r"] == "other"


def test_compound_statement_unit_is_its_header_only(npu):
    """Outside functions a for/with/while header is its own unit: an NPU test in its body does not count."""
    src = '''\
for flag in [v.type == "cuda"]:
    if flag is False and v.type == "npu":
        fallback = True
r = flag
'''
    assert run(src, v=npu) is True
    _, sites = rewrite_source(src, "<for>")
    assert [(s.line, s.rewritten) for s in sites] == [(1, True)]


def test_runtime_hits_counted_per_helper(npu):
    from ascend_shim.report import REPORT

    src = '''\
a = v.type == "cuda"
b = v.type != "cuda"
c = v.type in ("cuda", "mps")
d = str(v).startswith("cuda")
e = "cuda" in str(v)
f = v.type == "cuda" if False else None
g = "cpu" == "cuda"
h = "cuda" != v.type
'''
    filename = f"<hits-{id(src)}>"
    code, _ = rewrite_source(src, filename)
    exec(code, {"v": npu})
    hits = {e["line"]: e["count"] for e in REPORT.events()
            if e["category"] == "translated" and e["file"] == filename and e["detail"] == runtime.HIT_DETAIL}
    assert hits == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 8: 1}
