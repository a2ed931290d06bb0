"""transformers on the NPU: TrainingArguments' tf32 as the NPU's HF32 switches, CUDA/Triton-only options (Liger;
bitsandbytes optimizers where bitsandbytes has no NPU kernels) stopped with a clear error, and
optim="adamw_torch_fused" as the NPU's fused AdamW."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ascend_shim.targets._shared.npu_checks import on_npu, unsupported

if TYPE_CHECKING:
    from typing import Any

    from ascend_shim.context import PatchContext


#: optim names that need bitsandbytes
_BNB_HINTS = ("bnb", "8bit", "paged_", "4bit")


def bnb_npu_path() -> bool:
    """Does the installed bitsandbytes have kernels that run on the NPU (its portable ones)?"""
    from ascend_shim.targets.bitsandbytes.impl import has_npu_path

    return has_npu_path()


def bnb_advice() -> str:
    """What to do where bitsandbytes has no NPU path: which version there is, which one runs."""
    from ascend_shim.targets.bitsandbytes import NPU_PATH_SINCE
    from ascend_shim.targets.bitsandbytes.impl import installed_version

    have = installed_version()
    have = f"bitsandbytes {have} has" if have else "bitsandbytes is not installed and has"
    return (f"{have} no kernels for the NPU; install bitsandbytes>={NPU_PATH_SINCE} (its portable kernels run on "
            "the NPU), or use optim='adamw_torch' / a bf16 model with plain LoRA.")


def training_args_post_init(ctx: PatchContext) -> Callable:
    """TrainingArguments.__post_init__ with tf32 on the NPU's HF32 switches and CUDA-only options stopped."""
    import torch

    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def __post_init__(self, *args, **kwargs):
        if not on_npu():
            return orig(self, *args, **kwargs)
        if getattr(self, "use_liger_kernel", False):
            raise unsupported(report, pid, "TrainingArguments(use_liger_kernel=True)",
                              "Liger kernels are Triton kernels for CUDA GPUs; set use_liger_kernel=False (the "
                              "model's own PyTorch modules run on the NPU; ASCEND_SHIM_ENABLE=fast_ops swaps in "
                              "NPU fused RMSNorm/rotary/SwiGLU).")
        optim = str(getattr(getattr(self, "optim", ""), "value", getattr(self, "optim", "")))
        if any(h in optim for h in _BNB_HINTS) and not bnb_npu_path():
            raise unsupported(report, pid, f"TrainingArguments(optim={optim!r}) (bitsandbytes)", bnb_advice())
        tf32 = self.tf32
        if tf32 is None:
            return orig(self, *args, **kwargs)
        torch.npu.matmul.allow_hf32 = bool(tf32)
        torch.npu.conv.allow_hf32 = bool(tf32)
        report.translated("TrainingArguments(tf32=...)",
                          f"tf32={tf32} -> torch.npu.matmul.allow_hf32 = torch.npu.conv.allow_hf32 = {bool(tf32)}")
        self.tf32 = None  # transformers' own check needs CUDA >= Ampere and would raise
        try:
            return orig(self, *args, **kwargs)
        finally:
            self.tf32 = tf32

    return __post_init__


def optimizer_choice(ctx: PatchContext) -> staticmethod:
    """Trainer.get_optimizer_cls_and_kwargs giving NpuFusedAdamW for the fused AdamW where it computes the same."""
    from ascend_shim.targets._shared.fused_adamw import fused_adamw_class, why_not_fused

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def get_optimizer_cls_and_kwargs(args, model=None):
        cls, kwargs = orig(args, model)
        optim = str(getattr(args.optim, "value", args.optim))
        if optim not in ("adamw_torch_fused", "adamw_torch_npu_fused") or not on_npu():
            return cls, kwargs
        params = [p for p in model.parameters() if p.requires_grad] if model is not None else []
        reason = why_not_fused(params) if model is not None else ""
        kwargs = {k: v for k, v in kwargs.items() if k != "fused"}
        if reason:
            import torch

            report.fallback(f"optim={optim!r}", f"kept torch.optim.AdamW (unfused): {reason}")
            return torch.optim.AdamW, kwargs
        report.translated(f"optim={optim!r}", "torch_npu.optim.NpuFusedAdamW")
        return fused_adamw_class(), kwargs

    return staticmethod(get_optimizer_cls_and_kwargs)


def bnb_config(ctx: PatchContext) -> Callable[..., Any]:
    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        quantized = getattr(self, "load_in_4bit", False) or getattr(self, "load_in_8bit", False)
        if quantized and on_npu() and not bnb_npu_path():
            bits = "load_in_4bit" if getattr(self, "load_in_4bit", False) else "load_in_8bit"
            raise unsupported(report, pid, f"BitsAndBytesConfig({bits}=True) (bitsandbytes / QLoRA)", bnb_advice())

    return __init__
