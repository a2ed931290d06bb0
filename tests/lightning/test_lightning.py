"""Lightning, a CUDA-first library, run unmodified under ``python -m ascend_shim run --simulate``: it builds
cuda:0, gets npu:0, and accepts it (its own ``device.type != "cuda"`` checks are CUDA code by the shim's rule);
the losses equal a CPU run's, one device and two (DDP over hccl), Trainer and Fabric.

The pinned test dependency lightning==2.6.6 is what these pin.
"""
import json
import os
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

pytest.importorskip("lightning")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "boring.py")


def _env():
    env = shim_free_env()
    env.update(PL_DISABLE_FORK="1", PYTHONWARNINGS="ignore")
    return env


def run(tmp_path, runs, devices, *, shim=True):
    """The script's per-rank results, and the shim's reports (one per process)."""
    out = tmp_path / ("shim" if shim else "cpu")
    report = tmp_path / "report.json"
    prefix = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report)] if shim \
        else [sys.executable]
    proc = subprocess.run([*prefix, SCRIPT, str(out), runs, str(devices)], capture_output=True, text=True,
                          env=_env(), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = [json.loads((tmp_path / f"{out.name}.rank{r}.json").read_text()) for r in range(devices)]
    reports = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("report*.json"))]
    return results, reports


@pytest.mark.slow
def test_trainer_gpu_cuda_auto_and_fabric_on_one_npu_equal_the_cpu(tmp_path):
    (cpu,), _ = run(tmp_path, "trainer:cpu,fabric:cpu", 1, shim=False)
    (npu,), (report,) = run(tmp_path, "trainer:gpu,trainer:cuda,trainer:auto,fabric:cuda", 1)
    for accelerator in ("gpu", "cuda", "auto"):
        assert npu[f"trainer:{accelerator}"] == {"devices": ["npu:0"], "losses": cpu["trainer:cpu"]["losses"]}
    assert npu["fabric:cuda"] == {"devices": ["npu:0"], "losses": cpu["fabric:cpu"]["losses"]}
    notes = [n for n in report["notes"] if n.startswith("libraries treated as CUDA code")]
    assert notes and "lightning (" in notes[0], report["notes"]
    rewritten = {e["file"] for e in report["events"] if e["category"] == "rewritten"}
    assert any(f.endswith(os.path.join("lightning", "pytorch", "accelerators", "cuda.py")) for f in rewritten)


@pytest.mark.slow
@pytest.mark.parametrize("kind, accelerator", [("trainer", "gpu"), ("fabric", "cuda")])
def test_ddp_on_two_npus_equals_two_cpu_processes(tmp_path, kind, accelerator):
    cpu, _ = run(tmp_path, f"{kind}:cpu", 2, shim=False)
    npu, reports = run(tmp_path, f"{kind}:{accelerator}", 2)
    for rank in (0, 1):
        expected = {"devices": [f"npu:{rank}"], "losses": cpu[rank][f"{kind}:cpu"]["losses"]}
        assert npu[rank][f"{kind}:{accelerator}"] == expected, rank
    assert cpu[0][f"{kind}:cpu"]["losses"] != cpu[1][f"{kind}:cpu"]["losses"]  # each rank its own data
    assert len(reports) == 2  # both ranks ran activated
