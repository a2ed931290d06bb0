"""What public CUDA repositories found on Huawei's torch_npu Python, each as a small program on both layers:
DataLoader workers (minGPT's adder: torch_npu binds worker threads), ``copy.deepcopy`` of npu tensors and state
dicts (pytorch/examples minGPT-ddp's snapshot), and a failing ``-m pkg.mod`` (torch_npu wraps sys.excepthook)."""
import pytest

from .conftest import run_shim

pytestmark = pytest.mark.slow

_PROGRAM = """
import copy
import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.arange(8.0).reshape(4, 2))
    batches = [b[0].cuda().sum().item() for b in DataLoader(data, batch_size=2, num_workers=2)]
    print("workers", batches)
    x = torch.arange(6, dtype=torch.bfloat16, device="cuda").reshape(2, 3).t()
    y = copy.deepcopy(x)
    print("deepcopy", y.dtype, y.device.type, y.stride(), y.float().cpu().tolist() == x.float().cpu().tolist())
    state = copy.deepcopy(torch.nn.Linear(2, 2).cuda().state_dict())
    print("state_dict", sorted(state), state["weight"].dtype)
"""


@pytest.mark.parametrize("layer", ["real", "builtin"])
def test_dataloader_workers_and_deepcopy(prepared, tmp_path, layer):
    script = tmp_path / "prog.py"
    script.write_text(_PROGRAM)
    done = run_shim(layer, "--log-level", "off", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "workers [6.0, 22.0]" in done.stdout
    assert "deepcopy torch.bfloat16 npu (1, 3) True" in done.stdout
    assert "state_dict ['bias', 'weight'] torch.float32" in done.stdout


@pytest.mark.parametrize("layer", ["real", "builtin"])
def test_a_failing_module_prints_its_traceback_once(prepared, tmp_path, layer):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import torch\n")
    (pkg / "boom.py").write_text("raise ValueError('boom from the user')\n")
    done = run_shim(layer, "--log-level", "off", "-m", "pkg.boom", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("ValueError: boom from the user") == 1, done.stderr[-3000:]
    assert "RecursionError" not in done.stderr and "maximum recursion" not in done.stderr
