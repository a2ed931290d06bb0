"""The differential test: the same probe scripts on both emulator layers (Huawei's torch_npu Python, and the
emulator's own) must observe the same facts, except the differences listed here with their reason (and in
docs/emulator.md). A listed difference that no longer shows fails too, so the list stays true."""
import os
import re

import pytest

from .conftest import run_shim

pytestmark = pytest.mark.slow

PROBES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probes")

#: (probe, fact) -> why the layers differ there
KNOWN = {
    ("device_contract", "an op the emulator does not implement"):
        "the real layer defines every npu:: schema of the wheel (the ones not emulated raise NotEmulatedError when "
        "called); the builtin layer defines the schemas of the ops it implements only",
}


def _facts(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^(.+?) = (.*)$", stdout, re.M))


@pytest.mark.parametrize("probe", ["device_contract", "cuda_view", "device_runtime"])
def test_both_layers_observe_the_same(prepared, probe):
    script = os.path.join(PROBES, f"{probe}.py")
    real = run_shim("real", "--log-level", "off", script)
    builtin = run_shim("builtin", "--log-level", "off", script)
    assert real.returncode == 0, real.stderr[-3000:]
    assert builtin.returncode == 0, builtin.stderr[-3000:]
    on_real, on_builtin = _facts(real.stdout), _facts(builtin.stdout)
    assert on_real.keys() == on_builtin.keys() and len(on_real) > 30
    differ = {key for key in on_real if on_real[key] != on_builtin[key]}
    unexplained = {key: (on_real[key], on_builtin[key]) for key in differ if (probe, key) not in KNOWN}
    assert not unexplained, f"real vs builtin: {unexplained}"
    stale = [key for (p, key) in KNOWN if p == probe and key not in differ]
    assert not stale, f"listed as known differences but the layers now agree: {stale}"
