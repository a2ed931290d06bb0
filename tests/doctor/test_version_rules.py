"""One answer for every version pairing: ``doctor`` and the vllm set both read ``ascend_shim.versions``."""
import pytest

from ascend_shim import versions
from ascend_shim.providers.vllm import check_pairing
from ascend_shim.registry import PatchSet
from ascend_shim.versions import Project

# (torch, torch_npu, verdict): the base version X.Y.Z must be equal; .postN and +cpu are allowed
TORCH_PAIRS = [
    ("2.13.0", "2.13.0", True), ("2.13.0+cpu", "2.13.0.post3", True), ("2.7.1+cpu", "2.7.1.post11", True),
    ("2.13.1", "2.13.0", False), ("2.12.0", "2.13.0", False), ("2.13.0", "2.14.0", False),
    ("nightly", "2.13.0", None),
]
VLLM_PAIRS = [("0.13.0", "0.13.0rc1", True), ("0.14.1", "0.14.0rc1", True), ("0.15.1", "0.13.0", False),
              ("0.23.0", None, False)]


def _verdict(checks, name):
    return {c.name: c.verdict for c in checks}[name]


@pytest.mark.parametrize("torch_v,npu_v,ok", TORCH_PAIRS)
def test_doctor_and_the_vllm_set_agree_on_torch_and_torch_npu(make, torch_v, npu_v, ok):
    assert versions.torch_npu_pairing(torch_v, npu_v).ok is ok
    from ascend_shim import doctor

    _, checks = doctor.run_checks(make(versions={"torch": torch_v, "torch_npu": npu_v}))
    assert _verdict(checks, "torch-npu") == {True: "ok", False: "FAIL", None: "warn"}[ok]
    errors, warnings = check_pairing({"vllm": "0.13.0", "vllm-ascend": "0.13.0", "torch": torch_v,
                                      "torch-npu": npu_v, "numpy": "1.26.4"})
    assert (bool(errors), bool(warnings)) == {True: (False, False), False: (True, False), None: (False, True)}[ok]


@pytest.mark.parametrize("vllm_v,ascend_v,ok", VLLM_PAIRS)
def test_doctor_and_the_vllm_set_agree_on_vllm_and_vllm_ascend(make, vllm_v, ascend_v, ok):
    from ascend_shim import doctor

    found = {"vllm": vllm_v, "vllm-ascend": ascend_v, "numpy": "1.26.4"}
    _, checks = doctor.run_checks(make(versions={"torch": "2.7.1", "torch_npu": "2.7.1", **found}))
    assert _verdict(checks, "vllm") == ("ok" if ok else "FAIL" if ascend_v else "warn")
    assert (check_pairing(found)[0] == []) is ok


def test_a_project_gate_is_data_that_list_and_doctor_show(make, tmp_path, monkeypatch):
    checkout = tmp_path / "src" / "demo_project"
    checkout.mkdir(parents=True)
    (checkout / "__init__.py").write_text("")
    (checkout / "version.py").write_text('__version__ = "0.3.0"\n')
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    gated = PatchSet(id="demo", title="demo", project=Project("demo_project", ">=0.2,<0.4"), native=("demo_project",))
    assert versions.check_project(gated.project) == ("ok", "demo_project/version.py of a source checkout")
    assert [p.id for p in gated.patches] == ["demo.native"]
    from ascend_shim import doctor, listing
    from ascend_shim.config import Config

    _, checks = doctor.run_checks(make(patch_sets=[gated]))
    assert _verdict(checks, "project:demo_project") == "ok"
    outside = PatchSet(id="old", title="old", project=Project("demo_project", ">=1"))
    _, checks = doctor.run_checks(make(patch_sets=[outside]))
    assert _verdict(checks, "project:demo_project") == "warn"
    row = next(s for s in listing.collect(Config()) if s["id"] == "areal")
    assert row["project"] == "areal >=0.5,<1.1 (the areal distribution, or areal/version.py of a checkout)"
    assert row["native"] == ["areal"]


def test_the_plain_release_shortcut_agrees_with_packaging_everywhere():
    """Start-up decides final releases against plain comparisons without packaging: on every combination of
    versions (padding, local labels, pre/post/dev releases handed to packaging) the answer is packaging's."""
    import itertools

    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    from ascend_shim import versions

    candidates = ["2.4", "2.4.0", "2.13.0+cpu", "2.14", "2.15.0", "3", "0.9.1", "5.23.0", "5.24", "1.16.0", "0.3",
                  "0.3.9", "0.4", "0.5.2", "0.6", "4.99",
                  "2.13.0.post3", "5.0.0.dev0", "2.14.0rc1", "0.4.0.dev0+abc", "1.0.post1+x.y"]
    specs = ["", ">=2.4,<2.15", ">2.13", "<=2.13.0", "==2.13", "!=2.13.0", "<3", ">=4.50,<5.24", "==2.13.*",
             "~=2.13", ">=0.4.0.dev0,<0.6", ">=1.0,<1.16", ">2.13.0", " >= 2.4 , < 2.15 ", ">=0.3.0.dev0,<0.4",
             ">2.14rc1", "<=2.15.0a1", "==5.0.0.dev0", "!=2.14.0rc1", "<5.0.0b2.dev1", ">=2.13.0.post3",
             ">=2.13.0+cpu"]
    shortcut = 0
    for version, spec in itertools.product(candidates, specs):
        try:
            expected = SpecifierSet(spec).contains(Version(version), prereleases=True)
        except InvalidSpecifier:  # a local label in an ordered comparison: refused, never satisfied
            expected = False
        assert versions.satisfies(version, spec) is expected, (version, spec)
        shortcut += versions._plain_satisfies(version, spec) is not None
    assert shortcut > 50  # the shortcut decides most of them


def test_activation_does_not_import_packaging():
    import subprocess
    import sys

    code = ("import sys, ascend_shim; ascend_shim.activate(backend='sim', inherit=False, log_level='off'); "
            "print(sorted(m for m in sys.modules if m.startswith('packaging')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
