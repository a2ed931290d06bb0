"""TF32 switches drive the NPU's HF32 switch (reported); torch._scaled_mm follows the torch_npu release."""
import pytest
import torch

from ascend_shim import patching
from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.report import REPORT


@pytest.fixture(autouse=True)
def restore_precision():
    saved = (torch.get_float32_matmul_precision(), torch.npu.matmul.allow_hf32)
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.npu.matmul.allow_hf32 = saved[1]


@pytest.mark.parametrize("precision, hf32", [("high", True), ("medium", True), ("highest", False)])
def test_float32_matmul_precision_drives_hf32(clean_shim, precision, hf32):
    clean_shim.activate("sim")
    torch.npu.matmul.allow_hf32 = not hf32
    torch.set_float32_matmul_precision(precision)
    assert torch.get_float32_matmul_precision() == precision  # torch's own setting is made too
    assert torch.npu.matmul.allow_hf32 is hf32
    api = f"torch.set_float32_matmul_precision({precision!r})"
    assert any(e["api"] == api and e["detail"] == f"torch.npu.matmul.allow_hf32 = {hf32}"
               and e["file"].endswith("test_matmul_precision.py") for e in REPORT.events())


def test_without_the_shim_the_precision_leaves_hf32_alone():
    torch.npu.matmul.allow_hf32 = False
    torch.set_float32_matmul_precision("high")
    assert torch.npu.matmul.allow_hf32 is False


def test_fp32_precision_attribute_drives_hf32(clean_shim):
    clean_shim.activate("sim")
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert torch.npu.matmul.allow_hf32 is True
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert torch.npu.matmul.allow_hf32 is False


def test_scaled_mm_passes_through_where_torch_npu_registers_it(clean_shim):
    original = torch._scaled_mm
    clean_shim.activate("sim")
    import torch_npu  # the emulated release is paired with torch: 2.13 registers torch._scaled_mm

    assert torch_npu.__version__.startswith("2.13")
    assert torch._scaled_mm is original and not patching.is_patched("torch._scaled_mm")
    assert REPORT.patches["torch_features.torch._scaled_mm"]["status"] == "not-needed"
    assert "registers torch._scaled_mm" in REPORT.patches["torch_features.torch._scaled_mm"]["reason"]


@pytest.mark.parametrize("release, blocked", [("2.10.0", True), ("2.5.1", True), ("2.14.0", False)])
def test_scaled_mm_per_release(clean_shim, monkeypatch, release, blocked):
    import ascend_shim.versions as versions

    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda d: release if d == "torch_npu" else real(d))
    clean_shim.activate("sim")
    assert patching.is_patched("torch._scaled_mm") is blocked
    if blocked:
        x = torch.ones(16, 16, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        with pytest.raises(UnsupportedOnNPUError, match=rf"fp8 matmul.*torch_npu {release}"):
            torch._scaled_mm(x, x.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
