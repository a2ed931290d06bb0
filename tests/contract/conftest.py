"""The real torch_npu contract: the manifest extracted from Huawei's wheels by tools/torch_npu_contract.py."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import ascend_shim.sim as _sim

_sim.install()

MANIFEST = Path(__file__).with_name("torch_npu_manifest.json")

#: tests of the emulator's own torch_npu layer (under the real layer torch.npu is Huawei's)
builtin_layer_only = pytest.mark.skipif(_sim.layer() == "real", reason="the emulator's own torch_npu layer")


def line(version: str) -> tuple[int, int]:
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return major, minor


@pytest.fixture(scope="session")
def releases() -> dict:
    return json.loads(MANIFEST.read_text())["releases"]


@pytest.fixture(scope="session")
def paired(releases) -> dict:
    """The release paired with the installed torch (same major.minor line)."""
    wanted = line(_sim.torch_base_version())
    found = [rel for version, rel in releases.items() if line(version) == wanted]
    if not found:
        pytest.skip(f"no torch_npu release of the {wanted} line in the manifest")
    return found[0]
