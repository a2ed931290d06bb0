"""nn.DataParallel and torch.cuda.comm on the NPU: one device runs the module directly (exact, reported), more
devices stop with UnsupportedOnNPUError pointing to DDP under torchrun."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.report import REPORT

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _losses(wrap, device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 1))
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    model = wrap(model.to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for _ in range(3):
        loss = ((model(x.to(device), scale={"k": torch.ones(1)}) - y.to(device)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


class Scaled(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, scale):
        assert scale["k"].device == x.device  # kwargs are moved like the inputs
        return self.inner(x) * scale["k"]


def test_one_npu_runs_the_module_directly_and_matches_cpu(clean_shim):
    clean_shim.activate("sim")
    npu = _losses(lambda m: nn.DataParallel(Scaled(m), device_ids=[0]), "cuda")
    clean_shim.deactivate()
    assert npu == pytest.approx(_losses(Scaled, "cpu"), rel=1e-6)
    assert any(e["api"] == "nn.DataParallel" and "npu:0" in e["detail"] for e in REPORT.events())


def test_several_npus_stop_with_advice_to_use_ddp(clean_shim):
    clean_shim.activate("sim")
    assert torch.cuda.device_count() > 1
    with pytest.raises(UnsupportedOnNPUError, match="DistributedDataParallel.*torch.distributed.run") as info:
        nn.DataParallel(nn.Linear(2, 2)).cuda()
    assert info.value.patch_id == "torch_data_parallel.DataParallel"
    assert any(e["category"] == "unsupported" and e["api"] == "nn.DataParallel" for e in REPORT.events())
    with pytest.raises(UnsupportedOnNPUError, match="data_parallel"):
        nn.parallel.data_parallel(nn.Linear(2, 2).cuda(), torch.ones(1, 2).cuda(), device_ids=[0, 1])
    out = nn.parallel.data_parallel(nn.Linear(2, 2).cuda(), torch.ones(1, 2), device_ids=[0])
    assert out.device == torch.device("npu", 0)


@pytest.mark.parametrize("call", ["broadcast(t, [0, 1])", "broadcast_coalesced([t], [0, 1])", "scatter(t, [0, 1])",
                                  "gather([t, t], destination=0)"])
def test_cuda_comm_names_itself_instead_of_an_attribute_error(clean_shim, call):
    import torch.cuda.comm as comm

    clean_shim.activate("sim")
    t = torch.ones(2, device="cuda")
    with pytest.raises(UnsupportedOnNPUError, match=r"torch\.cuda\.comm\." + call.split("(")[0]):
        eval(call, {"t": t, **vars(comm)})
    clean_shim.deactivate()
    with pytest.raises(AttributeError, match="_"):  # what the unpatched call does here
        eval(call, {"t": t, **vars(comm)})


def test_the_issue_snippet_on_a_one_npu_machine(tmp_path):
    script = tmp_path / "dp.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        model = nn.DataParallel(nn.Linear(4, 2)).cuda()
        print(model(torch.randn(3, 4).cuda()).device)
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    env.update(ASCEND_SHIM_SIM_DEVICES="1", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--backend", "sim", str(script)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "npu:0"
    assert "nn.DataParallel -> 1 device: module runs directly on npu:0" in proc.stderr


def test_reduce_add_needs_no_cuda_kernel_and_is_left_alone(clean_shim):
    import torch.cuda.comm as comm

    clean_shim.activate("sim")
    a, b = torch.ones(2, device="cuda:0"), torch.full((2,), 2.0, device="cuda:1")
    with pytest.warns(UserWarning, match="NCCL"):
        out = comm.reduce_add([a, b], destination=0)
    assert out.device == torch.device("npu", 0) and out.tolist() == [3.0, 3.0]
