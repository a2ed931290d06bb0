"""transformers on the NPU: its own NPU paths, plus the CUDA-only TrainingArguments options it leaves behind.

transformers already runs on Ascend (``is_torch_npu_available()`` branches, an NPU flash-attention
integration, ``optim="adamw_torch_npu_fused"``). What breaks an unmodified CUDA job is: CUDA reported as
available (it would take CUDA branches), ``TrainingArguments(tf32=True)`` (raises "--tf32 requires Ampere ..."
on an NPU), ``optim="adamw_torch_fused"`` (torch's fused CUDA kernel), and bitsandbytes / Liger options, which
are CUDA/Triton-only.
"""
from __future__ import annotations

import functools

from ascend_shim.registry import PatchSet

from ._hf_common import on_npu, unsupported

hf_transformers = PatchSet(
    native=("transformers",),
    id="hf_transformers", title="transformers: its native NPU paths; tf32, fused AdamW, bitsandbytes/Liger options",
    requires={"transformers": ">=4.50,<5.24"},
    checked_against="transformers 5.23.0 (torch 2.13.0 CPU + sim backend)",
)

#: optim names that need bitsandbytes (CUDA-only kernels)
_BNB_HINTS = ("bnb", "8bit", "paged_", "4bit")


@hf_transformers.patch(
    "transformers.training_args:TrainingArguments.__post_init__",
    covers=("bitsandbytes",),
    why="TrainingArguments(tf32=True) raises 'requires Ampere or a newer GPU arch' without CUDA; "
        "use_liger_kernel and bitsandbytes optimizers need CUDA/Triton kernels and fail deep inside training.",
    what="tf32=True/False drives the NPU's HF32 matmul and conv switches (torch.npu.matmul/conv.allow_hf32, "
         "reported) and is hidden from transformers' CUDA check (args.tf32 keeps the user's value); "
         "use_liger_kernel=True and optim=*bnb*/*8bit*/paged_* raise UnsupportedOnNPUError naming the option.",
    remove_when="transformers maps tf32 to HF32 on NPU itself")
def training_args_post_init(ctx):
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
        if any(h in optim for h in _BNB_HINTS):
            raise unsupported(report, pid, f"TrainingArguments(optim={optim!r}) (bitsandbytes)",
                              "bitsandbytes optimizers are CUDA kernels; use optim='adamw_torch' or "
                              "'adamw_torch_npu_fused'.")
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


@hf_transformers.patch(
    "transformers.trainer:Trainer.get_optimizer_cls_and_kwargs", kind="replace",
    why="optim='adamw_torch_fused' asks for torch's fused CUDA AdamW kernel; the NPU's fused AdamW is "
        "torch_npu.optim.NpuFusedAdamW (transformers' 'adamw_torch_npu_fused'), which takes fp32/fp16 params only.",
    what="with fp32/fp16 trainable parameters on the NPU, adamw_torch_fused (and adamw_torch_npu_fused) give "
         "NpuFusedAdamW, made safe for the Trainer's Module.zero_grad(set_to_none=True) (reported as translated); "
         "otherwise (e.g. bf16 params) torch.optim.AdamW without fused=True (reported as a fallback).",
    remove_when="transformers picks the NPU fused AdamW for adamw_torch_fused itself")
def get_optimizer_cls_and_kwargs(ctx):
    from ascend_shim.providers.fused_adamw import fused_adamw_class, why_not_fused

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


@hf_transformers.patch(
    "transformers.utils.quantization_config:BitsAndBytesConfig.__init__", fidelity="unsupported",
    covers=("bitsandbytes",),
    why="QLoRA / 4-bit and 8-bit loading go through bitsandbytes' CUDA kernels; on an NPU they fail at load "
        "or first forward with an unrelated error.",
    what="BitsAndBytesConfig(load_in_4bit=True or load_in_8bit=True) raises UnsupportedOnNPUError naming the "
         "option; a config with both off is left alone.",
    remove_when="bitsandbytes ships an Ascend backend that transformers uses")
def bnb_config(ctx):
    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        if on_npu() and (getattr(self, "load_in_4bit", False) or getattr(self, "load_in_8bit", False)):
            bits = "load_in_4bit" if getattr(self, "load_in_4bit", False) else "load_in_8bit"
            raise unsupported(report, pid, f"BitsAndBytesConfig({bits}=True) (bitsandbytes / QLoRA)",
                              "Load the model in bf16 (torch_dtype=torch.bfloat16) and train plain LoRA.")

    return __init__


PATCH_SETS = [hf_transformers]
