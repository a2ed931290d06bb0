"""transformers on the NPU: its own NPU paths, plus the CUDA-only TrainingArguments options it leaves behind.

transformers already runs on Ascend (``is_torch_npu_available()`` branches, an NPU flash-attention
integration, ``optim="adamw_torch_npu_fused"``). What breaks an unmodified CUDA job is: CUDA reported as
available (it would take CUDA branches), ``TrainingArguments(tf32=True)`` (raises "--tf32 requires Ampere ..."
on an NPU), ``optim="adamw_torch_fused"`` (torch's fused CUDA kernel), and bitsandbytes / Liger options, which
are CUDA/Triton-only (bitsandbytes only in versions without its portable kernels).
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet
from ascend_shim.targets.bitsandbytes import NPU_PATH_SINCE


hf_transformers = PatchSet(
    native=("transformers",),
    id="hf_transformers", title="transformers: its native NPU paths; tf32, fused AdamW, bitsandbytes/Liger options",
    requires={"transformers": ">=4.50,<5.24"},
    checked_against="transformers 5.23.0 (torch 2.13.0 CPU + sim backend)", implementation=f"{__name__}.impl"
)

hf_transformers.patch(
    "transformers.training_args:TrainingArguments.__post_init__",
    covers=("bitsandbytes",),
    why="TrainingArguments(tf32=True) raises 'requires Ampere or a newer GPU arch' without CUDA; "
        "use_liger_kernel needs Triton kernels for CUDA, and bitsandbytes optimizers need kernels that older "
        "bitsandbytes versions have for CUDA only; both fail deep inside training.",
    what="tf32=True/False drives the NPU's HF32 matmul and conv switches (torch.npu.matmul/conv.allow_hf32, "
         "reported) and is hidden from transformers' CUDA check (args.tf32 keeps the user's value); "
         "use_liger_kernel=True, and optim=*bnb*/*8bit*/paged_* where the installed bitsandbytes has no NPU "
         "kernels (absent, or older than its portable kernels), raise UnsupportedOnNPUError naming the option.",
    remove_when="https://github.com/huggingface/transformers/blob/fd798335c275520af034c678b35e8167820c7c80/src/"
                "transformers/training_args.py: tf32 is CUDA-only there (no HF32 on the NPU), and liger and "
                "bitsandbytes options are not checked",
    factory="training_args_post_init")


hf_transformers.patch(
    "transformers.trainer:Trainer.get_optimizer_cls_and_kwargs", kind="replace",
    why="optim='adamw_torch_fused' asks for torch's fused CUDA AdamW kernel; the NPU's fused AdamW is "
        "torch_npu.optim.NpuFusedAdamW (transformers' 'adamw_torch_npu_fused'), which takes fp32/fp16 params only.",
    what="with fp32/fp16 trainable parameters on the NPU, adamw_torch_fused (and adamw_torch_npu_fused) give "
         "NpuFusedAdamW, made safe for the Trainer's Module.zero_grad(set_to_none=True) (reported as translated); "
         "otherwise (e.g. bf16 params) torch.optim.AdamW without fused=True (reported as a fallback).",
    remove_when="https://github.com/huggingface/transformers/blob/fe2596e9668d07650dbb1c66903e9e8de41eee92/src/"
                "transformers/trainer_optimizer.py: adamw_torch_fused asks torch for its fused AdamW whatever the "
                "device", factory="optimizer_choice")


hf_transformers.patch(
    "transformers.utils.quantization_config:BitsAndBytesConfig.__init__", fidelity="unsupported",
    covers=("bitsandbytes",),
    why="QLoRA / 4-bit and 8-bit loading go through bitsandbytes' kernels; a bitsandbytes without kernels "
        "for the NPU (absent, or older than its portable kernels) fails at load or first forward with an "
        "unrelated error.",
    what="BitsAndBytesConfig(load_in_4bit=True or load_in_8bit=True) raises UnsupportedOnNPUError naming the "
         "option and the bitsandbytes version to install where the installed one has no NPU kernels; with "
         "bitsandbytes >= " + NPU_PATH_SINCE + " (its portable kernels run on the NPU: see the bitsandbytes "
         "set) and for a config with both off it is left alone.",
    remove_when="bitsandbytes>=" + NPU_PATH_SINCE + ": from this version its portable kernels run on the NPU "
                "(older versions have 4-bit kernels for CPU and CUDA only)", factory="bnb_config")


PATCH_SETS = [hf_transformers]
