"""A 2-process torchrun job written for NCCL runs over hccl on the emulated NPUs; the ranks agree."""
import json
import os
import socket
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_ddp_nccl_script_runs_on_hccl(tmp_path):
    out, report = tmp_path / "out.json", tmp_path / "report.json"
    env = shim_free_env()
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
    # torch_npu of the torch 2.13 line accepts ReduceOp.AVG on HCCL: the SUM/size fallback is not applied
    assert rank0["patches"]["torch_distributed.torch.distributed.all_reduce"]["status"] == "not-needed"
    # the launcher prints no summary; rank 0 prints exactly one
    assert proc.stderr.count("ascend_shim migration report") == 1, proc.stderr[-3000:]


AVG_SCRIPT = '''
import os, sys, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
r = dist.get_rank()
f = torch.tensor([float(r + 1), 3.0], device="cuda")
dist.all_reduce(f, op=dist.ReduceOp.AVG)
i = torch.tensor([r * 3 + 1], device="cuda", dtype=torch.int64)
dist.all_reduce(i, op=dist.ReduceOp.AVG)
out = torch.empty(1, device="cuda")
dist.reduce_scatter_tensor(out, torch.tensor([1.0, 2.0], device="cuda") * (r + 1), op=dist.ReduceOp.AVG)
assert f.tolist() == [1.5, 3.0], f
assert i.tolist() == [2], i   # (1 + 4) // 2: floor division, as torch_npu does for integers
assert abs(out.item() - 1.5 * (r + 1)) < 1e-6, out
print("OK avg", r)
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_avg_fallback_where_hccl_rejects_avg(tmp_path):
    """Against a torch_npu line that rejects AVG (< 2.6), AVG becomes SUM / world size, exactly."""
    script = tmp_path / "avg.py"
    script.write_text(AVG_SCRIPT)
    # make the emulator and the patch see an old torch_npu: hccl rejects AVG, the fallback applies
    site = tmp_path / "site"
    site.mkdir()
    (site / "old_torch_npu_dist.py").write_text(
        "from ascend_shim import versions\n_real = versions.installed_version\n"
        "versions.installed_version = lambda d: '2.5.1' if d.replace('-', '_') == 'torch_npu' else _real(d)\n")
    report = tmp_path / "r.json"
    env = shim_free_env()
    env.update(ASCEND_SHIM_SIM_HCCL_AVG="reject", PYTHONPATH=str(site),
               ASCEND_SHIM_PATCH_MODULES="old_torch_npu_dist_sets")
    (site / "old_torch_npu_dist_sets.py").write_text("import old_torch_npu_dist\nPATCH_SETS = []\n")
    cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
           "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.stdout.count("OK avg") == 2
    rank0 = json.loads((tmp_path / "r.rank0.json").read_text())
    fallbacks = {e["api"] for e in rank0["events"] if e["category"] == "fallback"}
    assert {"torch.distributed.all_reduce", "torch.distributed.reduce_scatter_tensor"} <= fallbacks
