"""``list`` says what activation does: every patch's listed status agrees with the one activation records."""
from __future__ import annotations

import pytest

import ascend_shim
from ascend_shim.config import Config
from ascend_shim.listing import collect
from ascend_shim.report import REPORT


def _as_activation_records(listed: str) -> set[str]:
    """The statuses activation may record for a patch that ``list`` shows as ``listed``."""
    if listed == "active":
        return {"applied", "pending", "not-needed", "skipped", "failed"}
    if listed.startswith("disabled"):
        return {"disabled"}
    return {"inactive"}  # the set is inactive here, or outside its version range


#: two sets whose distributions are absent or outside the range here, beside the built-in ones
ABSENT = """
from ascend_shim.registry import Patch, PatchSet

def _never(ctx):
    raise AssertionError("a set that is not active applied a patch")

PATCH_SETS = [PatchSet(id="{p}absent", title="absent", requires={"no-such-distribution-xyz": ">=1"}),
              PatchSet(id="{p}outside", title="outside", requires={"torch": "<1"})]
for s in PATCH_SETS:
    s.add(Patch(id=s.id + ".one", target="{p}nowhere:thing", kind="replace", why="a test", what="nothing",
                remove_when="never: a test", factory=_never))
"""


@pytest.mark.parametrize("toggles", [
    {"ASCEND_SHIM_DISABLE": "{p}absent.one,{p}outside.one"},  # disabled patches of sets that are not active
    {"ASCEND_SHIM_ONLY": "{p}absent.one,torch_cuda.*"},  # ONLY naming a patch of a set that is not active
    {"ASCEND_SHIM_ONLY": "torch_cuda", "ASCEND_SHIM_DISABLE": "torch_cuda.torch.cuda.is_available"},
    {},
])
def test_list_and_activation_agree_on_every_patch(toggles, make_modules, clean_shim):
    p = make_modules({"absent": ABSENT})
    settings = {"ASCEND_SHIM_BACKEND": "sim", "ASCEND_SHIM_PATCH_MODULES": f"{p}absent",
                **{k: v.replace("{p}", p) for k, v in toggles.items()}}
    listed = {p["id"]: p["status"] for s in collect(Config.from_env(settings)) for p in s["patches"]}
    ascend_shim.activate(backend="sim", inherit=False, disable=settings.get("ASCEND_SHIM_DISABLE", ""),
                         only=settings.get("ASCEND_SHIM_ONLY", ""), patch_modules=f"{p}absent")
    recorded = {pid: info["status"] for pid, info in REPORT.patches.items()}
    assert set(recorded) == set(listed)
    disagree = {pid: (listed[pid], recorded[pid]) for pid in listed
                if recorded[pid] not in _as_activation_records(listed[pid])}
    assert not disagree
    assert {listed[f"{p}absent.one"], listed[f"{p}outside.one"]} <= {"inactive", "skipped", "disabled"}
