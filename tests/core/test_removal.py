"""Removal conditions: ``remove_when`` is a condition a program checks (an upstream version, a link, ``never``) and a
reason; a malformed one is a declaration error, and ``list`` shows and judges every patch's condition."""
from __future__ import annotations

import json
import re

import pytest

from ascend_shim.config import Config
from ascend_shim.listing import collect, render
from ascend_shim.registry import Patch, PatchSet, builtin_patch_sets
from ascend_shim.removal import KINDS, LINKS, Removal, evaluate, parse_removal


@pytest.mark.parametrize("text, kind, condition, distribution, specifier", [
    ("torch_npu>=2.6: HCCL accepts AVG", "version", "torch_npu>=2.6", "torch_npu", ">=2.6"),
    ("megatron-core>=0.17: load() is gone", "version", "megatron-core>=0.17", "megatron-core", ">=0.17"),
    ("transformers>=5.30,<6: x", "version", "transformers>=5.30,<6", "transformers", ">=5.30,<6"),
    ("torch-npu==2.7.1.*: x", "version", "torch-npu==2.7.1.*", "torch-npu", "==2.7.1.*"),
    ("vllm-ascend>=0.11.0rc1: x", "version", "vllm-ascend>=0.11.0rc1", "vllm-ascend", ">=0.11.0rc1"),
    ("pkg~=1.4.post2: x", "version", "pkg~=1.4.post2", "pkg", "~=1.4.post2"),
    ("https://github.com/huggingface/trl/issues/4790: trl uses NCCL", "link",
     "https://github.com/huggingface/trl/issues/4790", "", ""),
    ("https://huggingface.co/kernels-community/flash-attn3: no CANN build", "link",
     "https://huggingface.co/kernels-community/flash-attn3", "", ""),
    ("never: CUDA names always need translating", "never", "never", "", ""),
])
def test_good_forms_parse_to_their_condition_and_keep_the_reason(text, kind, condition, distribution, specifier):
    removal = parse_removal(text)
    assert (removal.kind, removal.condition, removal.distribution, removal.specifier) == \
        (kind, condition, distribution, specifier)
    assert removal.reason == text.partition(": ")[2]
    data = removal.as_dict()
    assert data["kind"] == kind and data["reason"] == removal.reason
    assert data.get("url") == (condition if kind == "link" else None)


SHA = "92d63d4e8bb4df75c3b71618f31ddde2378b2bcd"


@pytest.mark.parametrize("url, link", [
    ("https://github.com/huggingface/trl/issues/4790", "issue"),
    ("https://github.com/huggingface/trl/issues/4790#issuecomment-1", "issue"),
    ("https://github.com/pytorch/pytorch/pull/191916", "pull"),
    ("https://github.com/pytorch/pytorch/pull/191916/files", "pull"),
    (f"https://github.com/karpathy/nanochat/blob/{SHA}/nanochat/engine.py", "file"),
    (f"https://github.com/karpathy/nanochat/blob/{SHA}/nanochat/engine.py#L111", "file"),
    (f"https://github.com/Ascend/pytorch/tree/{SHA}/torch_npu/_inductor", "file"),
    ("https://huggingface.co/kernels-community/flash-attn3", "page"),
    ("https://github.com/triton-lang/triton-ascend", "page"),
    ("https://github.com/triton-lang/triton-ascend/releases", "page"),
    ("https://github.com/a/b/issues", "page"),  # the list, not one issue
])
def test_a_link_says_what_it_points_at(url, link):
    removal = parse_removal(f"{url}: the reason")
    assert (removal.kind, removal.condition, removal.link) == ("link", url, link)
    assert removal.as_dict() == {"kind": "link", "condition": url, "reason": "the reason", "url": url, "link": link}
    assert evaluate(removal).detail == f"tracked upstream ({LINKS[link]})"
    assert parse_removal("never: x").link == parse_removal("torch_npu>=2.6: x").link == ""


@pytest.mark.parametrize("url, ref", [
    ("https://github.com/karpathy/nanochat/blob/master/nanochat/engine.py", "master"),
    ("https://github.com/huggingface/transformers/blob/main/src/transformers/", "main"),
    ("https://github.com/Ascend/pytorch/tree/master/torch_npu/_inductor", "master"),
    ("https://github.com/vllm-project/vllm-ascend/blob/v0.11.0/vllm_ascend/platform.py", "v0.11.0"),
    (f"https://github.com/a/b/blob/{SHA[:12]}/f.py", SHA[:12]),  # a short sha: not one fixed commit
    (f"https://github.com/a/b/blob/{SHA.upper()}/f.py", SHA.upper()),
])
def test_a_file_on_a_branch_is_rejected(url, ref):
    with pytest.raises(ValueError, match="remove_when link") as info:
        parse_removal(f"{url}: the reason")
    message = str(info.value)
    assert repr(ref) in message and "link an issue, a pull request or the file at a commit" in message


@pytest.mark.parametrize("text, says", [
    ("", "no reason"),
    ("never", "no reason"),
    ("never:", "no reason"),
    ("torch_npu>=2.6", "no reason"),
    ("torch_npu>=2.6:   ", "no reason"),
    ("upstream fixes it", "no reason"),  # the free text of old declarations
    ("transformers maps tf32 to HF32: itself", "not a requirement"),
    ("torch_npu >= 2.6: spaces", "not a requirement"),
    ("torch_npu>=two: x", "not a requirement"),
    ("torch_npu: no specifier", "not a requirement"),
    (">=2.6: no name", "not a requirement"),
    ("torch_npu>=2.6,: trailing comma", "not a requirement"),
    ("torch_npu<=2.6.*: wildcard only with == or !=", "not a requirement"),
    ("Never: the keyword is lower case", "not a requirement"),
    ("http://github.com/a/b: not https", "not a requirement"),
    ("https://github.com: no path", "https://<host>/<path>"),
    ("https://github.com/: empty path", "https://<host>/<path>"),
    ("https://localhost/x: no domain", "https://<host>/<path>"),
    ("never: two\nlines", "one line"),
])
def test_bad_forms_are_errors_naming_the_grammar(text, says):
    with pytest.raises(ValueError, match="remove_when") as info:
        parse_removal(text)
    assert says in str(info.value)


def _patch(remove_when: str) -> Patch:
    return Patch(id="t.p", target="json:dumps", kind="wrap", why="w", what="w", remove_when=remove_when,
                 factory=lambda ctx: None)


def test_a_malformed_condition_is_a_declaration_error():
    with pytest.raises(ValueError, match=r"patch t\.p: remove_when .*'upstream fixes it'"):
        _patch("upstream fixes it")
    s = PatchSet(id="t", title="t")
    with pytest.raises(ValueError, match=r"patch t\.json\.dumps: remove_when"):
        s.patch("json:dumps", why="w", what="w", remove_when="torch_npu 2.6: a space")(lambda ctx: None)
    assert s.patches == []
    assert _patch("never: kept").removal == Removal("never", "never", "kept")


def test_every_builtin_patch_has_a_checkable_condition():
    patches = [p for s in builtin_patch_sets() for p in s.patches]
    kinds = {kind: [p for p in patches if p.removal.kind == kind] for kind in KINDS}
    assert sum(map(len, kinds.values())) == len(patches) > 200
    assert kinds["version"] and kinds["link"] and kinds["never"]
    for p in kinds["link"]:  # the upstream projects' own pages, not made-up places
        assert p.removal.condition.startswith(("https://github.com/", "https://huggingface.co/")), p.id
    for p in kinds["version"]:  # a lower bound: the first upstream release that has the change
        assert p.removal.specifier.startswith(">="), p.id
    for p in patches:
        assert len(p.removal.reason) > 15, p.id  # the reason says what upstream lacks or added


def test_every_builtin_link_is_of_an_accepted_kind():
    """An issue, a pull request, a file at a commit or another page: never a file on a branch, which rots."""
    links = [p for s in builtin_patch_sets() for p in s.patches if p.removal.kind == "link"]
    assert links
    for p in links:
        removal = parse_removal(p.remove_when)
        assert removal.link in LINKS, p.id
        assert removal == p.removal, p.id
        if removal.link == "file":  # https://github.com/<owner>/<repo>/blob/<sha>/<path>
            parts = removal.condition.split("/")
            assert parts[5] in ("blob", "tree") and re.fullmatch("[0-9a-f]{40}", parts[6]), p.id
    kinds = {p.removal.link for p in links}
    assert {"issue", "pull", "file"} <= kinds, kinds


def test_evaluate_judges_a_version_condition_against_the_installed_version():
    avg = parse_removal("torch_npu>=2.6: HCCL accepts AVG")
    versions = {"torch_npu": "2.13.0+cpu"}
    here = evaluate(avg, versions.get)
    assert (here.state, here.detail) == ("removable", "removable here: torch_npu 2.13.0+cpu satisfies >=2.6")
    old = evaluate(avg, {"torch_npu": "2.5.1.post1"}.get)
    assert (old.state, old.detail) == ("holds", "holds until torch_npu>=2.6 (installed: torch_npu 2.5.1.post1)")
    absent = evaluate(avg, {}.get)
    assert (absent.state, absent.detail) == ("holds", "holds until torch_npu>=2.6 (torch_npu is not installed here)")
    assert evaluate(parse_removal("https://github.com/a/b/issues/1: x")).state == "tracked"
    assert evaluate(parse_removal("never: x")).state == "permanent"


CONDITIONS = """
from ascend_shim.registry import PatchSet

s = PatchSet(id="{p}conds", title="removal conditions")
for name, remove_when in [("met", "pytest>=1: pytest 1 has it"), ("unmet", "pytest>=999: not yet released"),
                          ("absent", "no-such-distribution-xyz>=1: not installed"),
                          ("link", "https://github.com/pytest-dev/pytest/issues/1: tracked there"),
                          ("never", "never: always needed")]:
    s.patch("json:dumps", id="{p}conds." + name, why="w", what="w", remove_when=remove_when)(lambda ctx: None)
PATCH_SETS = [s]
"""


def test_list_shows_and_judges_each_condition(make_modules):
    import pytest as installed

    p = make_modules({"conds": CONDITIONS})
    config = Config.from_env({"ASCEND_SHIM_PATCH_MODULES": f"{p}conds"})
    text = render(config)
    assert f"remove when: pytest>=1: pytest 1 has it\n                   removable here: pytest " \
           f"{installed.__version__} satisfies >=1\n" in text
    assert f"holds until pytest>=999 (installed: pytest {installed.__version__})" in text
    assert "holds until no-such-distribution-xyz>=1 (no-such-distribution-xyz is not installed here)" in text
    assert "remove when: https://github.com/pytest-dev/pytest/issues/1: tracked there\n" \
           "                   tracked upstream (issue)\n  - " in text  # a link is named, not checked here
    assert "remove when: never: always needed\n\n" in text  # never is not judged
    assert re.fullmatch(r"removal conditions: \d+ version \(\d+ removable here\), \d+ link \((\d+ (issue|pull request|"
                        r"file at a pinned commit|page)(, |\)))+, \d+ never", text.splitlines()[-1])

    listed = {q["id"]: q["removal"] for s in json.loads(render(config, "json")) for q in s["patches"]}
    assert listed[f"{p}conds.met"] == {"kind": "version", "condition": "pytest>=1", "reason": "pytest 1 has it",
                                       "distribution": "pytest", "specifier": ">=1", "state": "removable",
                                       "detail": f"removable here: pytest {installed.__version__} satisfies >=1"}
    assert listed[f"{p}conds.link"] == {"kind": "link", "condition": "https://github.com/pytest-dev/pytest/issues/1",
                                        "reason": "tracked there", "url": "https://github.com/pytest-dev/pytest/issues/1",
                                        "link": "issue", "state": "tracked", "detail": "tracked upstream (issue)"}
    assert [listed[f"{p}conds.{n}"]["state"] for n in ("unmet", "absent", "link", "never")] == \
        ["holds", "holds", "tracked", "permanent"]

    removable = collect(config, removable=True)
    assert [q["id"] for s in removable for q in s["patches"] if q["id"].startswith(p)] == [f"{p}conds.met"]
    assert all(q["removal"]["state"] == "removable" for s in removable for q in s["patches"])
    only = render(config, removable=True)
    assert f"{p}conds.met" in only and f"{p}conds.unmet" not in only and f"{p}conds.never" not in only


def test_the_coverage_table_shows_the_condition_then_the_reason(make_modules):
    p = make_modules({"conds": CONDITIONS})
    table = render(Config.from_env({"ASCEND_SHIM_PATCH_MODULES": f"{p}conds"}), "markdown")
    assert "| `pytest>=1`: pytest 1 has it |" in table
    assert "| <https://github.com/pytest-dev/pytest/issues/1>: tracked there |" in table
    assert "| never: always needed |" in table
