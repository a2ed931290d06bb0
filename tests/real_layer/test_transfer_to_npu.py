"""Huawei's own ``torch_npu.contrib.transfer_to_npu``, unmodified, over the emulated device with none of the shim's
CUDA patches (the peer the shim is measured against), and Huawei's ``NpuFusedAdamW`` against ``torch.optim.AdamW``."""
import pytest

from .conftest import run_shim

pytestmark = pytest.mark.slow

_SCRIPT = """
import torch, torch_npu
import torch_npu.contrib.transfer_to_npu  # Huawei's own CUDA-to-NPU translation
import torch.nn as nn, torch.nn.functional as F

print("cuda", torch.cuda.is_available(), torch.ones(2, device="cuda").device, torch.ones(2).cuda().device)
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2, fused=True)
scaler = torch.amp.GradScaler("cuda")
x, y = torch.randn(8, 16, device="cuda"), torch.randint(0, 4, (8,), device="cuda")
for _ in range(3):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(m(x), y)
    scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); opt.zero_grad()
print("amp loss finite", bool(torch.isfinite(loss).item()))

torch.manual_seed(0)
a, b = nn.Linear(8, 8), nn.Linear(8, 8)
b.load_state_dict(a.state_dict())
a = a.cuda()
fused = torch_npu.optim.NpuFusedAdamW(a.parameters(), lr=1e-2, weight_decay=0.01)
plain = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.01)
x = torch.randn(4, 8)
for _ in range(5):
    a(x.cuda()).pow(2).sum().backward(); fused.step(); fused.zero_grad()
    b(x).pow(2).sum().backward(); plain.step(); plain.zero_grad()
print("adamw max diff", max((p.cpu() - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters())))
"""


def test_transfer_to_npu_and_npu_fused_adamw(prepared, tmp_path):
    script = tmp_path / "peer.py"
    script.write_text(_SCRIPT)
    done = run_shim("real", "--disable", "*", "--log-level", "off", str(script))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cuda True npu:0 npu:0" in done.stdout
    assert "amp loss finite True" in done.stdout
    diff = float(done.stdout.split("adamw max diff ")[1].split()[0])
    assert diff < 1e-6
