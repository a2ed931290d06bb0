"""The real layer's tests: Huawei's torch_npu Python (prepared by ``fetch-torch-npu``, as the README's test command
does) over the emulated device, each run in a process of its own beside the same run on the builtin layer."""
import os
import socket
import subprocess
import sys

import pytest

from ascend_shim.sim.real_layer import find_prepared

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def prepared():
    where = find_prepared()
    assert where is not None, ("Huawei's torch_npu is not prepared for the installed torch: run "
                               "`python -m ascend_shim fetch-torch-npu` (the README's test command does)")
    return where


def run_shim(layer: str, *args: str, cwd=None, timeout: int = 600, env=None) -> subprocess.CompletedProcess:
    """``python -m ascend_shim run --simulate`` on ``layer`` (``real`` or ``builtin``) in a clean environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    base.update(env or {})
    base["ASCEND_SHIM_SIM_LAYER"] = layer
    base["PYTHONPATH"] = REPO + os.pathsep + base.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *args], cwd=cwd or REPO,
                          env=base, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
