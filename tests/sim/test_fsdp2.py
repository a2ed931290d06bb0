"""FSDP2 on the emulated NPU, as a user runs it: a CUDA training script under torchrun x2.

The same script (tests/sim/scripts/fsdp2_tied_gpt.py) runs plainly (cpu + gloo) and through
``ascend_shim run --simulate`` (npu + hccl); every device check passes and the losses agree. On the device FSDP1
trains the same model too (torch's FSDP1 refuses cpu-only runs) and matches FSDP2.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from tests.subprocess_env import run_plain_torch, shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "fsdp2_tied_gpt.py")
REPO = os.path.dirname(os.path.dirname(HERE))
TIMEOUT = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(simulate: bool) -> str:
    env = shim_free_env()
    env.update(PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""), GLOO_SOCKET_IFNAME="lo",
               OMP_NUM_THREADS="1")
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                "--master_port", str(_free_port()), SCRIPT]
    if simulate:
        proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *torchrun],
                              capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=REPO)
    else:
        proc = run_plain_torch([sys.executable, *torchrun], env=env, timeout=TIMEOUT, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert "ALL_DONE" in proc.stdout, proc.stdout[-4000:]
    failed = re.findall(r"^CHECK (\S+) FAIL.*$", proc.stdout, flags=re.M)
    assert not failed, proc.stdout
    return proc.stdout


def _losses(stdout: str) -> list[tuple[float, ...]]:
    return [tuple(float(v) for v in line.split()) for line in re.findall(r"^LOSS \d+ (.+)$", stdout, flags=re.M)]


@pytest.mark.slow
def test_fsdp2_mixed_precision_tied_gpt_matches_cpu_gloo():
    cpu = _run(simulate=False)
    npu = _run(simulate=True)
    checks = set(re.findall(r"^CHECK (\S+) ok", npu, flags=re.M))
    assert {"tied_after_fully_shard", "param_count", "params_on_device", "reset_parameters_reproducible",
            "shards_differ", "rng_state_is_philox", "state_dict_loaded", "tied_after_load",
            "both_models_identical", "dcp_round_trip",
            "fsdp1_tied", "fsdp1_on_device", "fsdp1_matches_fsdp2"} <= checks, npu
    assert "CHECK params_on_device ok npu:0" in npu and "CHECK params_on_device ok cpu" in cpu
    cpu_losses, npu_losses = _losses(cpu), _losses(npu)
    assert len(npu_losses) == len(cpu_losses) == 6
    for c, n in zip(cpu_losses, npu_losses, strict=True):
        assert n[0] == pytest.approx(c[0], abs=5e-3)  # bf16 all-gathers, reductions in another order
