"""A 2-process torchrun job written for NCCL runs over hccl on the emulated NPUs; the ranks agree."""
import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_ddp_nccl_script_runs_on_hccl(tmp_path):
    out, report = tmp_path / "out.json", tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
           "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), os.path.join(HERE, "cuda_scripts", "ddp_nccl.py"), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    result = json.loads(out.read_text())
    assert result["same"], result
    assert result["devices"] == ["npu:0"], result
    assert result["losses"][-1] < result["losses"][0]
    rank0 = json.loads((tmp_path / "report.rank0.json").read_text())
    rank1 = json.loads((tmp_path / "report.rank1.json").read_text())
    for rep in (rank0, rank1):
        apis = {e["api"] for e in rep["events"]}
        assert {"torch.distributed.init_process_group", "init_device_mesh", "Tensor.cuda"} <= apis, apis
        assert any(e["api"] == "torch.distributed.all_reduce" and e["category"] == "fallback"
                   for e in rep["events"])
    # the launcher prints no summary; rank 0 prints exactly one
    assert proc.stderr.count("ascend_shim migration report") == 1, proc.stderr[-3000:]
