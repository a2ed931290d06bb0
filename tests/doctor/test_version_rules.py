"""One answer for every version pairing: ``doctor`` and the vllm set both read ``ascend_shim.versions``."""
import pytest

from ascend_shim import versions
from ascend_shim.patches.vllm import check_pairing
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
