"""Is the NPU this process's accelerator, and the error for a CUDA-only option: shared by the patch sets of the
Hugging Face stack (transformers, accelerate, trl) and of the projects (Twinkle).

Those libraries support the NPU natively; their sets declare them ``native`` (see ``PatchSet.native``) so their own
``is_torch_npu_available()`` branches run instead of CUDA branches. These checks ask the real questions whoever
calls them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_shim.errors import UnsupportedOnNPUError
    from ascend_shim.report import Report


def real_cuda_available() -> bool:
    """The real ``torch.cuda.is_available()`` (False on an NPU machine), whoever asks."""
    import torch

    from ascend_shim.callers import native_scope

    with native_scope():
        return bool(torch.cuda.is_available())


def npu_available() -> bool:
    import torch

    npu = getattr(torch, "npu", None)
    try:
        return bool(npu is not None and npu.is_available())
    except Exception:
        return False


def on_npu() -> bool:
    """The NPU is this process's accelerator: an NPU is up and real CUDA is not."""
    return npu_available() and not real_cuda_available()


def unsupported(report: Report, patch_id: str, feature: str, advice: str) -> UnsupportedOnNPUError:
    """Record and build the error for a CUDA-only option (the caller raises it)."""
    from ascend_shim.errors import UnsupportedOnNPUError

    report.unsupported(feature, advice)
    return UnsupportedOnNPUError(feature, patch_id, advice)
