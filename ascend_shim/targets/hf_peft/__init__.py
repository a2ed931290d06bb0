"""peft on the NPU: ``peft.utils.infer_device()`` and its other device checks see the real answers.

peft is NPU-aware (``infer_device`` returns "npu" when torch_npu is present); it only needs CUDA not to be
reported as available to it. QLoRA (4/8-bit base models) needs bitsandbytes and is stopped with a clear
error by the transformers set (``BitsAndBytesConfig``).
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet

hf_peft = PatchSet(
    native=("peft",),
    id="hf_peft", title="peft: its native NPU paths (infer_device)",
    requires={"peft": ">=0.13,<0.22"},
    checked_against="peft 0.21.2 (torch 2.13.0 CPU + sim backend)"
)

PATCH_SETS = [hf_peft]
