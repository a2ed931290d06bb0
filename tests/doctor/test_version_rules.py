"""One answer for every version pairing: ``doctor`` and the vllm set both read ``ascend_shim.versions``."""
import pytest

from ascend_shim import versions
from ascend_shim.targets.vllm.impl import check_pairing
from ascend_shim.registry import PatchSet
from ascend_shim.versions import Project

# (torch, torch_npu, verdict): the base version X.Y.Z must be equal; .postN and +cpu are allowed
TORCH_PAIRS = [
    ("2.13.0", "2.13.0", True), ("2.13.0+cpu", "2.13.0.post3", True), ("2.7.1+cpu", "2.7.1.post11", True),
    ("2.13.1", "2.13.0", False), ("2.12.0", "2.13.0", False), ("2.13.0", "2.14.0", False),
    ("nightly", "2.13.0", None),
]
VLLM_PAIRS = [("0.13.0", "0.13.0rc1", True), ("0.14.1", "0.14.0rc1", True), ("0.15.1", "0.13.0", False),
              ("0.23.0", None, False), ("0.14.0", "0.14.0rc1", False)]  # the same line is not the released pair


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


# -- vllm-ascend's release compatibility matrix ------------------------------------------------------------------
def _checks(make, **kw):
    from ascend_shim import doctor

    _, checks = doctor.run_checks(make(**kw))
    return {c.name: c for c in checks}


def _pins(text):
    """``(name, version)`` of every ``name==version`` and torch_npu wheel URL in a suggestion."""
    import re

    pins = [(n.lower(), v) for n, v in re.findall(r"([A-Za-z][\w.-]*)==([^\s'\");,]+)", text)]
    pins += [("torch-npu", v.replace("%2B", "+")) for v in re.findall(r"/torch_npu-([^-]+)-", text)]
    return pins


def _known(name, version):
    from ascend_shim.vllm_ascend_matrix import RELEASES

    return version in {"vllm": {v for r in RELEASES for v in r.vllm}, "vllm-ascend": {r.ascend for r in RELEASES},
                       "torch": {r.torch for r in RELEASES}, "torch-npu": {r.torch_npu for r in RELEASES}}[name]


def test_vllm_alone_beyond_the_matrix_names_the_newest_real_pair(make):
    vllm = _checks(make, versions={"vllm": "0.33.0"})["vllm"]
    newest = versions.newest_release()
    assert vllm.verdict == "warn"
    assert "no vllm-ascend release for vllm 0.33.0 is known" in vllm.message
    assert f"end at {newest.ascend} for vllm {newest.vllm[0]}" in vllm.message
    assert "0.33" not in vllm.fix
    assert _pins(vllm.fix) == [("vllm", newest.vllm[0]), ("vllm-ascend", newest.ascend)]
    assert all(_known(*pin) for pin in _pins(vllm.fix))


def test_vllm_alone_names_the_releases_made_for_it(make):
    vllm = _checks(make, versions={"vllm": "0.14.1"})["vllm"]
    assert vllm.fix == "pip install vllm-ascend==0.14.0rc1"
    assert "torch 2.9.0 / torch_npu 2.9.0, CANN 8.5.0" in vllm.message
    vllm = _checks(make, versions={"vllm": "0.15.1"})["vllm"]  # inside the matrix, but no release for it
    assert "vllm-ascend has no release for vllm 0.15.1" in vllm.message and "0.15.0rc1 for vllm 0.15.0" in vllm.message
    assert "vllm-ascend==0.15.1" not in vllm.fix and all(_known(*pin) for pin in _pins(vllm.fix))
    # a torch_npu build PyPI lacks comes from where vllm-ascend's release notes put it
    vllm = _checks(make, versions={"vllm": "0.18.0"}, python=(3, 11, 2), machine="aarch64")["vllm"]
    assert vllm.fix == ("pip install vllm-ascend==0.18.0 && pip install https://vllm-ascend.obs.cn-north-4."
                        "myhuaweicloud.com/vllm-ascend/torch_npu-2.9.0.post1%2Bgit4c901a4-cp311-cp311-manylinux_2_28_"
                        "aarch64.whl")


def test_vllm_ascend_alone_names_the_exact_vllm(make):
    assert _checks(make, versions={"vllm-ascend": "0.14.0rc1"})["vllm"].fix == "pip install vllm==0.14.1"
    assert _checks(make, versions={"vllm-ascend": "0.10.1rc1"})["vllm"].fix == "pip install vllm==0.10.1.1"
    beyond = _checks(make, versions={"vllm-ascend": "0.30.0rc2"})["vllm"]
    assert beyond.verdict == "FAIL" and "not known to ascend-shim" in beyond.message and _pins(beyond.fix) == []


GOOD_023 = {"vllm": "0.23.0", "vllm-ascend": "0.23.0", "torch": "2.10.0+cpu", "torch_npu": "2.10.0.post4",
            "numpy": "2.2.0"}


def test_a_released_pair_is_ok(make):
    checks = _checks(make, versions=GOOD_023, cann_version="9.1.0", python=(3, 11, 7))
    assert {n: c.verdict for n, c in checks.items() if n.startswith(("vllm", "numpy"))} == {
        "vllm": "ok", "vllm-stack": "ok", "numpy": "ok"}
    assert "a released pair" in checks["vllm"].message
    assert checks["vllm-stack"].message == ("torch 2.10.0+cpu, torch_npu 2.10.0.post4, Python 3.11.7, CANN 9.1.0: as "
                                            "vllm-ascend 0.23.0 is released")
    assert checks["numpy"].message == "numpy 2.2.0: vllm-ascend 0.23.0 does not pin numpy"
    assert _checks(make, versions=dict(GOOD_023, vllm="0.23.0+empty"), cann_version="9.1.0")["vllm"].verdict == "ok"


def test_each_part_differing_from_the_release_is_one_line(make):
    checks = _checks(make, versions=dict(GOOD_023, torch_npu="2.10.0.post2"), cann_version="9.1.0")
    npu = checks["vllm-torch-npu"]
    assert npu.verdict == "warn"  # the same base version: another build
    assert npu.message == "torch_npu 2.10.0.post2: vllm-ascend 0.23.0 is released with torch_npu 2.10.0.post4"
    assert npu.fix == "pip install torch-npu==2.10.0.post4"
    assert "vllm-stack" not in checks and "vllm-torch" not in checks
    checks = _checks(make, versions=dict(GOOD_023, torch="2.9.0", torch_npu="2.9.0"), cann_version="8.5.1",
                     python=(3, 13, 1))
    assert checks["vllm-torch"].verdict == "FAIL" and checks["vllm-torch-npu"].verdict == "FAIL"
    assert checks["vllm-torch"].fix == "pip install torch==2.10.0 --index-url https://download.pytorch.org/whl/cpu"
    assert checks["vllm-cann"].verdict == "warn"
    assert checks["vllm-cann"].message == "CANN 8.5.1: vllm-ascend 0.23.0 is released with CANN 9.1.0"
    assert checks["vllm-python"].message == "Python 3.13.1: vllm-ascend 0.23.0 is released for Python >=3.10,<3.13"
    # a torch_npu build PyPI lacks: its index
    checks = _checks(make, versions={"vllm": "0.11.0", "vllm-ascend": "0.11.0", "torch": "2.7.1", "torch_npu": "2.7.1",
                                     "numpy": "1.26.4"}, cann_version="8.3.RC2")
    assert checks["vllm-torch-npu"].fix == ("pip install torch-npu==2.7.1.post1 --extra-index-url "
                                            "https://mirrors.huaweicloud.com/ascend/repos/pypi")
    # the emulator needs no torch_npu: no line for its absence
    checks = _checks(make, versions=dict(GOOD_023, torch_npu=None), simulate=True)
    assert "vllm-torch-npu" not in checks and checks["vllm-stack"].verdict == "ok"


def test_numpy_follows_the_release(make):
    old = {"vllm": "0.19.1", "vllm-ascend": "0.19.1rc1", "torch": "2.9.0", "torch_npu": "2.9.0", "numpy": "2.1.0"}
    numpy = _checks(make, versions=old)["numpy"]
    assert numpy.verdict == "FAIL" and numpy.fix == "pip install 'numpy<2'"
    assert versions.numpy_requirement("0.20.2rc1") == ("", "vllm-ascend 0.20.2rc1 does not pin numpy")
    assert versions.numpy_requirement("0.33.0rc1") == (">=1", "vllm-ascend >= 0.20 has no numpy pin")  # unknown
    assert versions.numpy_requirement("0.19.1rc1", ["numpy<1.27"])[0] == "<1.27"  # the metadata wins


def test_a_vllm_ascend_the_matrix_lacks_is_not_guessed(make):
    beyond = versions.vllm_pairing("0.30.0", "0.30.0rc2")
    assert beyond.ok is None and "not known to ascend-shim" in beyond.message and _pins(beyond.fix) == []
    checks = _checks(make, versions={"vllm": "0.30.0", "vllm-ascend": "0.30.0rc2", "numpy": "2.1.0"})
    assert checks["vllm"].verdict == "warn" and "vllm-stack" not in checks
    assert versions.vllm_pairing("0.30.0", "0.25.1rc1").ok is False  # different lines still fail
    unlisted = versions.vllm_pairing("0.23.0", "0.23.0.post1")
    assert unlisted.ok is None and _pins(unlisted.fix) == [("vllm-ascend", "0.23.0")]


def test_the_matrix_is_consistent():
    from ascend_shim.vllm_ascend_matrix import RELEASES, TORCH_NPU_OFF_PYPI

    assert len({r.ascend for r in RELEASES}) == len(RELEASES) > 30
    for r in RELEASES:
        assert versions.torch_npu_pairing(r.torch, r.torch_npu).ok is True, r
        assert versions.ascend_release(r.ascend) == r and r in versions.releases_for_vllm(r.vllm[0])
        assert versions.satisfies("3.10.0", r.python) or versions.satisfies("3.9.0", r.python), r
    assert set(TORCH_NPU_OFF_PYPI) <= {r.torch_npu for r in RELEASES}


def test_every_suggested_version_is_in_the_matrix():
    """Every pin any vllm / vllm-ascend suggestion makes names a version of the matrix, and every pair it suggests
    is a released pair: over every recorded version and versions around and beyond them."""
    import itertools

    from ascend_shim.vllm_ascend_matrix import RELEASES

    vllms = sorted({v for r in RELEASES for v in r.vllm}) + ["0.33.0", "0.15.1", "0.12.1", "0.22.0", "0.7.2",
                                                             "0.13.0+empty", "0.14.1.dev3+gabc", "nightly", None]
    ascends = [r.ascend for r in RELEASES] + ["0.30.0rc2", "0.25.1rc1", "0.23.0.post1", "0.7.1rc1", "0.12.0", None]
    texts = []
    for vllm, ascend in itertools.product(vllms, ascends):
        if vllm is None and ascend is None:
            continue
        p = versions.vllm_pairing(vllm, ascend, (3, 11), "x86_64")
        texts.append(p.fix)
    for r in RELEASES:
        for torch, npu, py, cann in [("2.4.0", "2.4.0", (3, 8), "7.0.0"), ("2.9.0", "2.9.0.post9", (3, 14), "9.1.0"),
                                     (r.torch, None, (3, 10), r.cann)]:
            texts += [p.fix for p in versions.stack_pairings(r, torch, npu, py, cann, "aarch64").values()]
    pins = [pin for text in texts for pin in _pins(text)]
    assert len(pins) > 500
    unknown = sorted({pin for pin in pins if not _known(*pin)})
    assert unknown == []
    import re

    for text in texts:  # a suggested pair is a released pair
        for v, a in re.findall(r"vllm==(\S+) && pip install vllm-ascend==(\S+)", text):
            assert v in versions.ascend_release(a).vllm, text
        for a, v in re.findall(r"vllm-ascend==(\S+)(?: && \S+ \S+ \S+)? \(released for vllm (\S+)\)", text):
            assert versions.ascend_release(a) in versions.releases_for_vllm(v), text
