"""scan against the built-in patch sets: every ``covers`` entry is something scan can report, one patch is
named per finding, a clean CUDA script has nothing "not covered", and the named patches are the ones the
runtime applies to the same script."""
import json
import subprocess
import sys

from ascend_shim import scan
from ascend_shim.config import Config
from ascend_shim.registry import all_patch_sets
from ascend_shim.scan.symbols import is_symbol

CLEAN = '''import os
import torch
import torch.distributed as dist

print("CUDA_BASIC_OK")                      # a message, not an environment read
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.zeros(4, device=device)
y = torch.ones(4).cuda()
model = torch.nn.Linear(4, 4).to(device)
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    z = model(x + y)
scaler = torch.amp.GradScaler()
if x.is_cuda:
    torch.cuda.synchronize()
print(torch.cuda.memory_allocated(), dist.is_nccl_available(), z.float().sum().item())
'''


def test_every_covers_entry_is_a_scan_symbol():
    sets, _ = all_patch_sets(())
    bad = [(p.id, c) for s in sets for p in s.patches for c in p.covers if not is_symbol(c)]
    assert bad == []
    assert not is_symbol("torch.zeros") and not is_symbol("ddp_backend") and is_symbol("env:NCCL_*")


def test_a_clean_cuda_script_scans_clean_with_one_patch_per_finding(tmp_path):
    script = tmp_path / "clean.py"
    script.write_text(CLEAN)
    result = scan.scan_paths([str(script)], config=Config())
    assert result.findings and {f.verdict for f in result.findings} <= {"covered", "fallback", "neutral"}
    assert all(len(f.patches) == 1 for f in result.findings)
    by_symbol = {f.symbol: f.patches[0] for f in result.findings}
    assert by_symbol["torch.cuda.is_available"] == "torch_cuda.torch.cuda.is_available"
    assert by_symbol["env:CUDA_VISIBLE_DEVICES"] == "environment.CUDA_VISIBLE_DEVICES"
    assert not any("CUDA_BASIC_OK" in f.symbol for f in result.findings)
    assert scan.main([str(script)]) == 0

    report = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
                          str(script)], capture_output=True, text=True, timeout=300, env=None)
    assert run.returncode == 0, run.stderr[-3000:]
    statuses = json.loads(report.read_text())["patches"]
    named = {f.patches[0] for f in result.findings}
    assert {pid: statuses[pid]["status"] for pid in named} == {pid: "applied" for pid in named}
