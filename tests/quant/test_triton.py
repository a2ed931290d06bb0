"""Triton on the emulated NPU (real packages: liger-kernel and the CUDA/ROCm Triton from PyPI). liger-kernel sees
the NPU and takes its own NPU path, which needs triton-ascend: without it the user gets one line naming liger-kernel,
the Triton found and what to do, recorded in the report, where liger-kernel's import failed with
``ImportError: cannot import name 'tanh' from 'triton.language.math'``. A user's ``@triton.jit`` kernel launched on
the NPU is one line too."""
import pytest
import torch

from ascend_shim.errors import UnsupportedOnNPUError

triton = pytest.importorskip("triton")
pytest.importorskip("liger_kernel")
tl = pytest.importorskip("triton.language")


def _unsupported(prefix: str) -> list[dict]:
    from ascend_shim.report import REPORT

    return [e for e in REPORT.events() if e["category"] == "unsupported" and e["api"].startswith(prefix)]


def test_liger_without_triton_ascend_is_one_line_in_the_report(clean_shim):
    from ascend_shim.versions import installed_version

    clean_shim.activate(backend="sim")
    with pytest.raises(UnsupportedOnNPUError) as info:
        import liger_kernel.transformers  # noqa: F401
    message = str(info.value)
    assert isinstance(info.value, ImportError)  # optional imports of Liger (except ImportError) still go on
    assert "\n" not in message
    assert message.startswith(f"liger-kernel {installed_version('liger-kernel')} with triton "
                              f"{installed_version('triton')} (the CUDA/ROCm Triton) is not supported on Ascend NPU")
    for part in ("pip install triton-ascend", "use_liger_kernel=False"):
        assert part in message, part
    assert _unsupported("liger-kernel ")


def test_with_triton_ascend_liger_takes_its_own_npu_path(clean_shim, monkeypatch):
    """liger-kernel is NPU-native: it sees the NPU (its infer_device() says npu, not the cuda that CUDA code is
    told) and, with triton-ascend installed, imports its NPU kernels untouched -- here, with the CUDA Triton
    standing in for triton-ascend, that import fails in liger-kernel's own way."""
    from ascend_shim.targets.triton import impl as provider

    monkeypatch.setattr(provider, "triton_ascend_version", lambda: "3.2.0")
    clean_shim.activate(backend="sim")
    from liger_kernel.utils import infer_device, is_npu_available

    assert infer_device() == "npu" and is_npu_available() is True
    with pytest.raises(ImportError, match="triton.language.math") as info:
        import liger_kernel.transformers  # noqa: F401
    assert not isinstance(info.value, UnsupportedOnNPUError)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def test_a_user_triton_kernel_on_the_npu_is_one_line_in_the_report(clean_shim):
    clean_shim.activate(backend="sim")
    x = torch.ones(8, device="cuda")
    out = torch.empty_like(x)
    with pytest.raises(UnsupportedOnNPUError) as info:
        _add_kernel[(1,)](x, x, out, 8, BLOCK=8)
    message = str(info.value)
    assert "\n" not in message and "_add_kernel" in message and "triton-ascend" in message
    assert _unsupported("triton kernel launch")
