"""torchrun x2 DDP over hccl on Huawei's torch_npu Python: torch_npu registers the backend and builds its
``ProcessGroupHCCL`` from the stand-in native layer; the results equal the builtin layer's."""
import re

import pytest

from .conftest import free_port, run_shim

pytestmark = pytest.mark.slow

_SCRIPT = """
import torch, torch.distributed as dist, torch.nn as nn
dist.init_process_group("nccl")
rank = dist.get_rank(); torch.cuda.set_device(rank)
torch.manual_seed(0)
m = nn.Linear(8, 4).cuda()
ddp = nn.parallel.DistributedDataParallel(m, device_ids=[rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(3):
    loss = ddp(torch.randn(16, 8, generator=g).cuda()).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
t = torch.tensor([float(rank + 1)], device="cuda"); dist.all_reduce(t)
out = [torch.zeros(1, device="cuda") for _ in range(2)]; dist.all_gather(out, t)
backend = type(dist.distributed_c10d._get_default_group()._get_backend(torch.device("npu"))).__name__
print(f"rank {rank} {backend} allreduce {t.item()} gather {[o.item() for o in out]} "
      f"weights {m.weight.detach().cpu().sum().item():.6f} loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
"""


def _ranks(stdout: str) -> list[str]:
    """Each rank's line (two ranks may print into one line of the launcher's output)."""
    return sorted(re.findall(r"rank \d \w+ allreduce .*? loss -?\d+\.\d{6}", stdout))


def test_torchrun_ddp_over_hccl_equals_builtin_layer(prepared, tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(_SCRIPT)
    def args():
        return ("-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), str(script))

    real = run_shim("real", *args(), cwd=tmp_path, timeout=300)
    assert real.returncode == 0, real.stderr[-3000:]
    builtin = run_shim("builtin", *args(), cwd=tmp_path, timeout=300)
    assert builtin.returncode == 0, builtin.stderr[-3000:]
    lines = _ranks(real.stdout)
    assert len(lines) == 2 and all("ProcessGroupHCCL allreduce 3.0 gather [3.0, 3.0]" in line for line in lines)
    assert lines == _ranks(builtin.stdout)
