"""Helpers shared by the Hugging Face stack's patch sets (transformers, accelerate, peft, trl, deepspeed, vllm)
and the project sets: the real device answers, and errors for CUDA-only options.

Those libraries support the NPU natively; their sets declare them ``native`` (see ``PatchSet.native``) so
their own ``is_torch_npu_available()`` branches run instead of CUDA branches.
"""
from __future__ import annotations

REMOVE = "never while CUDA-targeted code must run unmodified on Ascend"


def real_cuda_available() -> bool:
    """The real ``torch.cuda.is_available()`` (False on an NPU machine), whoever asks."""
    from ascend_shim.callers import native_scope

    import torch

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


def unsupported(report, patch_id: str, feature: str, advice: str):
    """Record and build the error for a CUDA-only option (the caller raises it)."""
    from ascend_shim.errors import UnsupportedOnNPUError

    report.unsupported(feature, advice)
    return UnsupportedOnNPUError(feature, patch_id, advice)
