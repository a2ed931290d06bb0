"""The deepspeed set against the real deepspeed (PyPI sdist, DS_BUILD_OPS=0) on the emulated NPU.

Exercised: accelerator selection (``get_accelerator()`` -> ``NPU_Accelerator``, which needs ``torch_npu``: the
emulator provides it), and a CUDA user's ``deepspeed.init_distributed(dist_backend="nccl")`` ending on hccl
(single process, world size 1). The NPU op builders without CANN and ZeRO-Offload training: test_deepspeed_offload.py.
CI installs it with the README test command:
DS_BUILD_OPS=0 pip install --no-deps --no-build-isolation -r tests/requirements-nodeps.txt
"""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from ascend_shim import callers, versions
from ascend_shim.report import REPORT

from tests.subprocess_env import shim_free_env

PIP = "DS_BUILD_OPS=0 pip install --no-deps --no-build-isolation -r tests/requirements-nodeps.txt"


def _require_deepspeed():
    if importlib.util.find_spec("deepspeed") is None:
        pytest.fail(f"deepspeed is not installed: these tests pin the set against the real package ({PIP})")


def test_deepspeed_is_installed_and_in_the_declared_range():
    _require_deepspeed()
    from ascend_shim.targets.deepspeed import ds

    version = versions.installed_version("deepspeed")
    assert versions.satisfies(version, ds.requires["deepspeed"]), version


def test_set_pins_ds_accelerator_and_undoes_it(clean_shim, monkeypatch):
    _require_deepspeed()
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    clean_shim.activate("sim")
    assert REPORT.sets["deepspeed"]["status"] == "active", REPORT.sets["deepspeed"]
    assert os.environ["DS_ACCELERATOR"] == "npu"
    assert "deepspeed" in callers._native
    clean_shim.deactivate()
    assert "DS_ACCELERATOR" not in os.environ and "deepspeed" not in callers._native


def test_the_translation_is_reported_once_deepspeed_reads_it(clean_shim, monkeypatch):
    """A program that never imports deepspeed has no DS_ACCELERATOR line in its report."""
    _require_deepspeed()
    import sys

    def reported() -> bool:
        return any(e["category"] == "env" and e["api"] == "DS_ACCELERATOR" for e in REPORT.events())

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    imported = "deepspeed.accelerator" in sys.modules
    clean_shim.activate("sim")
    assert os.environ["DS_ACCELERATOR"] == "npu"
    if not imported:
        assert not reported()
        import deepspeed.accelerator  # noqa: F401
    assert reported()


def test_set_keeps_a_user_choice(clean_shim, monkeypatch):
    _require_deepspeed()
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    clean_shim.activate("sim")
    assert os.environ["DS_ACCELERATOR"] == "cpu"
    assert any("DS_ACCELERATOR='cpu'" in n for n in REPORT.notes)


def test_a_deepspeed_version_outside_the_range_skips_the_set(clean_shim, monkeypatch):
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda d: "0.99.0" if d == "deepspeed" else real(d))
    clean_shim.activate("sim")
    info = REPORT.sets["deepspeed"]
    assert info["status"] == "skipped" and "outside the supported range" in info["reason"]


# deepspeed picks its accelerator once per process: run the user's script in a fresh interpreter
USER_SCRIPT = textwrap.dedent("""
    import os
    import ascend_shim
    ascend_shim.activate("sim")
    import deepspeed, torch
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["TEST_PORT"], RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="nccl")  # a CUDA user's line
    t = torch.ones(2, device=acc.device_name(0))
    dist.all_reduce(t)
    from ascend_shim.callers import native_scope
    with native_scope():  # the real backend (user code is told "nccl", as on CUDA)
        real_backend = dist.get_backend()
    print("RESULT", type(acc).__name__, acc.device_name(), acc.communication_backend_name(), real_backend,
          dist.get_backend(), t.device.type, t.tolist())
""")


def test_cuda_user_gets_the_npu_accelerator_and_hccl(tmp_path):
    _require_deepspeed()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "ds_user.py"
    script.write_text(USER_SCRIPT)
    env = shim_free_env("DS_ACCELERATOR")
    env.pop("ASCEND_HOME_PATH", None)  # no CANN here: deepspeed's NPU op builder must not KeyError on it
    env["TEST_PORT"] = str(port)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")][-1]
    assert line.split()[1:] == ["NPU_Accelerator", "npu", "hccl", "hccl", "nccl", "npu", "[1.0,", "1.0]"], line
