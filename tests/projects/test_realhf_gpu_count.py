"""realhf counts a node's GPUs by listing /dev/nvidia<N>; under the shim its local scheduler must hand its workers
the node's NPUs, or they build their models on the CPU without a word."""
import json
import os
import subprocess
import sys

import pytest

from .test_realhf import FIXTURE
from tests.subprocess_env import shim_free_env


def run_scheduler(*extra):
    env = shim_free_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [FIXTURE, os.environ.get("PYTHONPATH")])),
               ASCEND_SHIM_SIM_DEVICES="4")
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *extra,
                           os.path.join(FIXTURE, "run_local_scheduler.py")],
                          capture_output=True, text=True, env=env, timeout=600, cwd=FIXTURE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), proc


@pytest.mark.slow
def test_local_scheduler_gives_workers_the_nodes_npus():
    out, proc = run_scheduler()
    assert out["gpu_count"] == 4 and out["visible"] == "0,1,2,3", out
    assert out["use_cuda"] is True and out["param_device"] == "npu:0", out
    assert "realhf gpu_count (/dev/nvidia*) -> 4 NPUs of this node" in proc.stderr


@pytest.mark.slow
def test_without_the_patch_the_worker_silently_runs_on_the_cpu():
    out, _ = run_scheduler("--disable", "realhf.gpu_count")
    assert out["visible"] == "" and out["param_device"] == "cpu", out  # what the patch is for
