"""The README's main job on Huawei's torch_npu Python: the same losses as on the builtin layer, every patch of the
npu backend applied, and user code sees the prepared torch_npu 2.13.0 with its fused ops as ``torch.ops.npu``."""
import json
import re

import pytest

from .conftest import run_shim

pytestmark = pytest.mark.slow

_PROBE = """
import torch, torch_npu, sys
print("version", torch_npu.__version__)
print("file", torch_npu.__file__)
print("op packet", torch_npu.npu_rms_norm is torch.ops.npu.npu_rms_norm)
print("cuda", torch.cuda.is_available(), torch.device("cuda").type, torch.ones(1, device="cuda").device.type)
"""


def _losses(stdout: str) -> list[str]:
    return re.findall(r"^step\s+\d+\s+loss \S+", stdout, re.M)


def test_train_cuda_same_losses_no_skips(prepared, tmp_path):
    report = tmp_path / "r.json"
    real = run_shim("real", "--report", str(report), "examples/train_cuda.py")
    assert real.returncode == 0, real.stderr[-3000:]
    builtin = run_shim("builtin", "examples/train_cuda.py")
    assert builtin.returncode == 0, builtin.stderr[-3000:]
    assert _losses(real.stdout) and _losses(real.stdout) == _losses(builtin.stdout)

    rep = json.loads(report.read_text())
    assert rep["process"]["backend"] == "npu" and rep["process"]["sim_layer"] == "real"
    bad = {pid: p for pid, p in rep["patches"].items() if p["status"] in ("skipped", "failed")}
    assert not bad, bad
    assert "Huawei's torch_npu Python (real layer)" in real.stderr


def test_user_code_sees_the_prepared_torch_npu(prepared, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    done = run_shim("real", "--log-level", "off", str(probe))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "version 2.13.0" in done.stdout
    assert f"file {prepared}/site/torch_npu/__init__.py" in done.stdout
    assert "op packet True" in done.stdout
    assert "cuda True npu npu" in done.stdout  # CUDA available; a translated device is what it is (README)
