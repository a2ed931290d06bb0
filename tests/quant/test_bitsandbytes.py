"""bitsandbytes (real package) on the NPU: it sees the real device and runs its portable kernels, exactly as on the
CPU; the transformers options that need it are refused only where the installed version has no NPU kernels."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.report import REPORT
from tests.subprocess_env import run_plain_torch, shim_free_env

bnb = pytest.importorskip("bitsandbytes")
SCRIPT = Path(__file__).with_name("bnb_script.py")


@pytest.mark.slow
def test_imports_8bit_adam_and_4bit_int8_layers_match_the_cpu_exactly(tmp_path):
    env = shim_free_env()
    npu = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", str(SCRIPT),
                          str(tmp_path / "npu.pt")], capture_output=True, text=True, env=env, timeout=300)
    assert npu.returncode == 0, npu.stderr[-3000:]
    assert "bnb done cuda" in npu.stdout
    assert "bitsandbytes Adam8bit -> bitsandbytes' portable kernels" in npu.stderr
    assert "bitsandbytes PagedAdamW8bit (paged)" in npu.stderr
    cpu = run_plain_torch([sys.executable, str(SCRIPT), str(tmp_path / "cpu.pt")], env=env, timeout=300)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    got, want = torch.load(tmp_path / "npu.pt"), torch.load(tmp_path / "cpu.pt")
    for key in want:
        assert torch.equal(got[key], want[key]), key


def test_transformers_bnb_options_are_allowed_with_a_version_that_runs(clean_shim, tmp_path):
    clean_shim.activate("sim")
    from transformers import BitsAndBytesConfig, TrainingArguments

    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    TrainingArguments(output_dir=str(tmp_path), report_to=[], optim="adamw_bnb_8bit")


@pytest.mark.parametrize("version, said", [("0.46.0", "bitsandbytes 0.46.0 has no kernels for the NPU"),
                                           (None, "bitsandbytes is not installed")])
def test_a_version_without_npu_kernels_is_refused_in_one_line(clean_shim, monkeypatch, tmp_path, version, said):
    from ascend_shim.targets.bitsandbytes import impl as provider

    monkeypatch.setattr(provider, "installed_version", lambda: version)
    clean_shim.activate("sim")
    from transformers import BitsAndBytesConfig, TrainingArguments

    with pytest.raises(UnsupportedOnNPUError, match="load_in_8bit") as info:
        BitsAndBytesConfig(load_in_8bit=True)
    assert said in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(UnsupportedOnNPUError, match="paged_adamw_32bit"):
        TrainingArguments(output_dir=str(tmp_path), report_to=[], optim="paged_adamw_32bit")


def test_an_optimizer_op_without_an_npu_kernel_is_one_line(clean_shim, monkeypatch):
    from ascend_shim.targets.bitsandbytes import impl as provider

    clean_shim.activate("sim")
    monkeypatch.setattr(provider, "runs_on_npu", lambda op: op != "optimizer_update_8bit_blockwise")
    model = torch.nn.Linear(8, 8).to("npu")
    opt = bnb.optim.Adam8bit(model.parameters(), min_8bit_size=0)
    model(torch.ones(2, 8, device="npu")).sum().backward()
    with pytest.raises(UnsupportedOnNPUError, match=r"Adam8bit \(optimizer_update_8bit_blockwise\)"):
        opt.step()
    assert any(e["category"] == "unsupported" for e in REPORT.events())
