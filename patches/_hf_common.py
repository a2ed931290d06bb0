"""Helpers shared by the Hugging Face stack's patch sets (transformers, accelerate, peft, trl, deepspeed, vllm)
and the project sets: native registration and the real device answers.

Those libraries support the NPU natively; what they need from the shim is the *real* device answers
(``torch.cuda.is_available()`` is False on an NPU machine), so their own ``is_torch_npu_available()`` branch
runs instead of a CUDA branch (accelerate#3020). :func:`declare_native` adds that patch to a set.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet

REMOVE = "never while CUDA-targeted code must run unmodified on Ascend"


def declare_native(pset: PatchSet, *packages: str) -> None:
    """Declare the patch that makes ``packages`` see the real device answers (undone on deactivate)."""
    names = ", ".join(packages)

    @pset.patch(f"process:native-{packages[0]}", kind="call", id=f"{pset.id}.native",
                covers=("torch.cuda.is_available", "torch.cuda.device_count"),
                why=f"{names} test CUDA before the NPU in places; told that CUDA is available (as user code is) "
                    "they would take CUDA-only paths on the NPU (accelerate#3020, targets.md section 1.2).",
                what=f"registers {names} as NPU-native: calls made from their modules get the real "
                     "torch.cuda.is_available()/device_count()/is_nccl_available()/get_backend() answers, so their "
                     "own NPU branches (is_torch_npu_available) run.",
                remove_when="never: user code must keep seeing CUDA as available")
    def native(ctx):
        from ascend_shim.callers import register_native, unregister_native

        added = register_native(*packages)
        return lambda: unregister_native(*added)


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
