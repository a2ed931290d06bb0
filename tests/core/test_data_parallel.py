"""nn.DataParallel, data_parallel and torch.cuda.comm over emulated NPUs: torch's own code on device copies that do
what CUDA's kernels do. Several devices compute exactly what the same chunks compute on the CPU (bit for bit), and
match a one-device run to rounding; the report says how many devices took part."""
import copy
import os
import subprocess
import sys
import textwrap

import warnings

import pytest
import torch
import torch.nn as nn

from ascend_shim.report import REPORT

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Scaled(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, scale):
        assert scale["k"].device == x.device  # kwargs are scattered like the inputs
        return self.inner(x) * scale["k"]


def _model():
    torch.manual_seed(0)
    return Scaled(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(12, 8, generator=g), torch.randn(12, 1, generator=g)


def _train(model, forward, device, steps=3):
    x, y = _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        loss = ((forward(model, x.to(device)) - y.to(device)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def _on_cpu_in_chunks(chunks):
    """What DataParallel computes, done on the CPU: the batch cut as torch.chunk cuts it, the module applied to each
    chunk, the outputs concatenated (gradients of the chunks summed)."""
    def forward(model, x):
        scale = torch.linspace(0.5, 1.5, x.shape[0]).unsqueeze(1)
        return torch.cat([model(c, scale={"k": k}) for c, k in zip(x.chunk(chunks), scale.chunk(chunks), strict=True)])

    return forward


def _whole(model, x):
    return model(x, scale={"k": torch.linspace(0.5, 1.5, x.shape[0]).unsqueeze(1).to(x.device)})


@pytest.mark.parametrize("devices", [2, 3])
def test_several_npus_compute_exactly_what_the_chunks_compute_on_the_cpu(clean_shim, devices):
    clean_shim.activate("sim")
    dp = nn.DataParallel(_model(), device_ids=list(range(devices))).cuda()
    assert dp.src_device_obj == torch.device("npu", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's reduce_add asks NCCL quietly, then adds the copies itself
        npu = _train(dp, _whole, "cuda")
    clean_shim.deactivate()
    cpu = _train(_model(), _on_cpu_in_chunks(devices), "cpu")
    if devices == 2:  # two gradient parts add up the same in any order: bit for bit
        assert npu[0] == cpu[0]
        assert all(torch.equal(a, b) for a, b in zip(npu[1], cpu[1], strict=True))
    whole = _train(_model(), _whole, "cpu")  # a one-device run: the same up to rounding
    assert npu[0] == pytest.approx(whole[0], rel=1e-6, abs=1e-7)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(npu[1], whole[1], strict=True))
    detail = f"{devices} devices: scatter, replicate, parallel_apply, gather on npu:0 (device copies)"
    assert any(e["api"] == "nn.DataParallel" and e["detail"] == detail for e in REPORT.events())


def test_one_npu_runs_the_module_and_matches_cpu(clean_shim):
    clean_shim.activate("sim")
    npu = _train(nn.DataParallel(_model(), device_ids=[0]).cuda(), _whole, "cuda")
    clean_shim.deactivate()
    assert npu[0] == pytest.approx(_train(_model(), _whole, "cpu")[0], rel=1e-6)
    assert any(e["api"] == "nn.DataParallel" and e["detail"] == "1 device: the module runs on it"
               for e in REPORT.events())


def test_functional_data_parallel_over_several_npus(clean_shim):
    clean_shim.activate("sim")
    module = nn.Linear(4, 3)
    x = torch.randn(5, 4)
    want = module(x)
    out = nn.parallel.data_parallel(copy.deepcopy(module).cuda(), x.cuda(), device_ids=[0, 1, 2], output_device=1)
    assert out.device == torch.device("npu", 1)
    assert torch.allclose(out.cpu(), want, atol=1e-6)
    assert any(e["api"] == "torch.nn.parallel.data_parallel" and e["detail"].startswith("3 devices")
               for e in REPORT.events())


def test_the_batch_decides_how_many_devices_take_part(clean_shim):
    clean_shim.activate("sim")
    dp = nn.DataParallel(nn.Linear(2, 2), device_ids=[0, 1, 2, 3]).cuda()
    assert dp(torch.ones(3, 2, device="cuda")).shape == (3, 2)  # 3 rows: 3 chunks, 3 replicas (as torch.chunk)
    assert any(e["api"] == "nn.DataParallel" and e["detail"].startswith("3 devices") for e in REPORT.events())


def test_replicas_run_under_the_npus_autocast(clean_shim):
    clean_shim.activate("sim")
    dp = nn.DataParallel(nn.Linear(8, 4), device_ids=[0, 1]).cuda()
    x = torch.randn(6, 8, device="cuda")
    with torch.autocast("cuda"):
        assert dp(x).dtype == torch.float16  # as on CUDA: replicas run under the device's autocast
    assert dp(x).dtype == torch.float32


def test_autocast_patch_applies_where_the_build_has_the_comm_kernels(clean_shim, monkeypatch):
    """torch_npu registers torch._C._scatter & co: the kernels' patches stand down, the autocast one must not."""
    monkeypatch.setattr(torch._C, "_scatter", lambda *a, **k: None, raising=False)
    clean_shim.activate("sim")
    assert REPORT.patches["torch_data_parallel.parallel_apply_autocast"]["status"] == "applied"
    assert REPORT.patches["torch_data_parallel.comm.scatter"]["status"] == "not-needed"


def test_comm_does_what_the_cuda_kernels_do(clean_shim):
    import torch.cuda.comm as comm

    clean_shim.activate("sim")
    t = torch.arange(12.0).reshape(6, 2)
    src = t.to("cuda:0")
    copies = comm.broadcast(src, [0, 1])
    assert copies[0] is src and copies[1].device == torch.device("npu", 1) and torch.equal(copies[1].cpu(), t)
    out = [torch.empty(6, 2, device="cuda:1"), torch.empty(6, 2, device="cuda:2")]
    assert all(torch.equal(o.cpu(), t) for o in comm.broadcast(src, out=out))
    (a, b), (c, d) = comm.broadcast_coalesced([src, src[0]], [0, 2])
    assert a is src and c.device == torch.device("npu", 2) and torch.equal(d.cpu(), t[0])
    with pytest.raises(RuntimeError, match="first on devices list"):
        comm.broadcast_coalesced([src], [1, 0])
    parts = comm.scatter(src, [0, 1, 2])
    assert [p.device.index for p in parts] == [0, 1, 2] and parts[0].data_ptr() == src.data_ptr()  # a view
    assert [p.shape[0] for p in comm.scatter(src, [0, 1], chunk_sizes=[4, 2])] == [4, 2]
    assert [p.shape[1] for p in comm.scatter(src, [0, 1], dim=1)] == [1, 1]
    assert torch.equal(comm.gather(parts, destination=1).cpu(), t)
    assert comm.gather(parts, destination=1).device == torch.device("npu", 1)
    assert comm.gather(parts, destination="cpu").device.type == "cpu"
    host = torch.empty(6, 2)
    assert comm.gather(parts, out=host) is host and torch.equal(host, t)
    outs = [torch.empty(2, 2, device="cuda:1"), torch.empty(4, 2, device="cuda:2")]
    assert torch.equal(torch.cat([o.cpu() for o in comm.scatter(src, out=outs)]), t)
    with pytest.raises(RuntimeError, match="Exactly one of 'devices' and 'out'"):
        comm.broadcast(src)


def test_the_issue_snippet_over_several_npus(tmp_path):
    script = tmp_path / "dp.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        model = nn.DataParallel(nn.Linear(4, 2)).cuda()
        print(model(torch.randn(3, 4).cuda()).device, torch.cuda.device_count())
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    env.update(ASCEND_SHIM_SIM_DEVICES="2", PYTHONPATH=os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--backend", "sim", str(script)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "npu:0 2"
    assert "nn.DataParallel -> 2 devices: scatter, replicate, parallel_apply, gather on npu:0" in proc.stderr


def test_reduce_add_needs_no_cuda_kernel_and_asks_nccl_quietly(clean_shim):
    import torch.cuda.comm as comm

    clean_shim.activate("sim")
    a, b = torch.ones(2, device="cuda:0"), torch.full((2,), 2.0, device="cuda:1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not "PyTorch is not compiled with NCCL support" on every backward
        out = comm.reduce_add([a, b], destination=0)
    assert out.device == torch.device("npu", 0) and out.tolist() == [3.0, 3.0]
    clean_shim.deactivate()
    assert sys.modules["torch.nn.parallel.comm"].nccl is sys.modules["torch.cuda.nccl"]  # torch's own copy is back


def test_without_the_set_comm_needs_the_cuda_kernels(clean_shim):
    import torch.cuda.comm as comm

    clean_shim.activate("sim", disable=["torch_data_parallel"])
    with pytest.raises(AttributeError, match="_scatter"):  # what the set exists for
        comm.scatter(torch.ones(2, device="cuda"), [0, 1])
