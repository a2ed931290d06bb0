"""A Ray node started under the shim whose backend cannot come up says so at ``ray start`` (it used to start
silently with no NPU resource, and a job asking for NPUs waited on its placement group forever)."""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

from ascend_shim.activation import BOOTSTRAP_DIR

from .conftest import REPO, _stop, clean_env, free_port

COUNT = ("from ray._private.accelerators.npu import NPUAcceleratorManager as M\n"
         "print(M.get_current_node_num_accelerators())\n")


def _activated(backend: str, **extra) -> dict:
    """A node set up by hand as the README says: ASCEND_SHIM=1, the backend, the bootstrap on PYTHONPATH."""
    return clean_env(ASCEND_SHIM="1", ASCEND_SHIM_BACKEND=backend,
                     PYTHONPATH=os.pathsep.join([BOOTSTRAP_DIR, REPO]), **extra)


def _evaluated(*options: str) -> dict:
    """A node set up by evaluating what ``ascend-shim env`` prints, as a shell that runs ``ray start`` would."""
    line = f'eval "$({shlex.quote(sys.executable)} -m ascend_shim env {shlex.join(options)})" && env -0'
    proc = subprocess.run(["bash", "-c", line], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(item.split("=", 1) for item in proc.stdout.split("\0") if item)


def test_npu_backend_without_torch_npu_says_the_node_has_no_npu(tmp_path):
    proc = subprocess.run([sys.executable, "-c", COUNT], env=_activated("npu"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ascend_shim: ERROR")]
    assert len(errors) == 1, proc.stderr
    assert "offers no NPU" in errors[0] and "torch_npu is not installed" in errors[0]
    assert "ASCEND_SHIM_BACKEND=sim" in errors[0]


def test_the_emulator_failing_to_come_up_is_said_not_a_traceback(clean_shim, monkeypatch):
    import torch
    from ray._private.accelerators.npu import NPUAcceleratorManager

    clean_shim.activate("sim", inherit=False)

    def broken():
        raise RuntimeError("the emulator's extension did not build")

    monkeypatch.setattr(torch.npu, "device_count", broken)
    from ascend_shim.report import REPORT

    assert NPUAcceleratorManager.get_current_node_num_accelerators() == 0
    said = "offers no NPU: the emulated NPU could not come up (RuntimeError: the emulator's extension did not build)"
    assert any(said in note for note in REPORT.notes), REPORT.notes  # and logged as an error line


def test_sim_backend_counts_the_emulated_npus_without_a_word(tmp_path):
    proc = subprocess.run([sys.executable, "-c", COUNT], env=_activated("sim", ASCEND_SHIM_LOG="warning"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "8", proc.stderr
    assert "offers no NPU" not in proc.stderr


def test_a_node_set_up_by_the_env_command_counts_the_emulated_npus(tmp_path):
    env = _evaluated("--simulate", "--log-level", "warning")
    assert env["PYTHONPATH"] == os.pathsep.join([BOOTSTRAP_DIR, REPO])
    proc = subprocess.run([sys.executable, "-c", COUNT], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "8", proc.stderr


@pytest.mark.slow
def test_ray_start_with_a_backend_that_cannot_come_up_says_so():
    temp_dir = tempfile.mkdtemp(prefix="rayt", dir="/tmp")
    try:
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--port", str(free_port()),
               "--node-ip-address", "127.0.0.1", "--temp-dir", temp_dir, "--num-cpus", "1",
               "--include-dashboard", "false", "--disable-usage-stats"]
        proc = subprocess.run(cmd, env=_activated("npu"), capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr  # the node starts (CPU work can still run)
        assert "this Ray node offers no NPU" in proc.stderr and "torch_npu is not installed" in proc.stderr, \
            proc.stdout + proc.stderr
    finally:
        _stop(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
