"""xFormers on the NPU: it picks its attention operator from the tensors' device, so it sees the real device.

xFormers' operators are CUDA (CUTLASS, FlashAttention, CK) or Triton kernels; on NPU tensors its dispatcher finds
none and raises a page-long "No operator found". ``memory_efficient_attention`` for the arguments most callers
pass (diffusers' attention processors, causal LMs) becomes torch's scaled_dot_product_attention, which torch_npu
runs with its fused attention, with xFormers' semantics; other biases raise one line saying what to use.
``import xformers.ops`` itself needs the provided ``flash_attn``'s compiled-module API (the flash_attn set).
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = ("https://github.com/facebookresearch/xformers/issues/1237: every xFormers attention operator supports "
          "CUDA devices only")

xformers = PatchSet(
    native=("xformers",),
    native_why="xFormers chooses operators from each tensor's device and checks CUDA at import; told that CUDA "
               "is available it would try to load its CUDA extensions on the NPU.",
    id="xformers", title="xFormers: memory_efficient_attention on NPU fused attention (common arguments)",
    requires={"xformers": ">=0.0.28"},
    checked_against="xformers 0.0.35 (torch 2.13.0 CPU + sim backend, both layers)", implementation=f"{__name__}.impl"
)

WHAT = ("on NPU tensors: 3-D (B, M, K), 4-D (B, M, H, K) and 5-D (B, M, G, H, K) inputs with attn_bias None, "
        "LowerTriangularMask, LowerTriangularFromBottomRightMask, LowerTriangularMaskWithTensorBias or an additive "
        "tensor, p (dropout), scale and output_dtype run torch.nn.functional.scaled_dot_product_attention (same "
        "semantics, autograd through it; op= is ignored, reported); other biases raise UnsupportedOnNPUError "
        "naming the bias and what to use. CPU and CUDA tensors: unchanged.")


xformers.patch("xformers.ops.fmha:memory_efficient_attention", covers=("xformers.ops.memory_efficient_attention",),
               why="no xFormers operator runs on an NPU: its dispatcher raises 'No operator found for "
                   "memory_efficient_attention_forward' with a page of reasons.",
               what=WHAT, remove_when=REMOVE, factory="memory_efficient_attention")


xformers.patch("xformers.ops.fmha:memory_efficient_attention_forward",
               covers=("xformers.ops.memory_efficient_attention_forward",),
               why="no xFormers operator runs on an NPU (the inference-only entry point, as above).",
               what=WHAT, remove_when=REMOVE, factory="memory_efficient_attention_forward")


PATCH_SETS = [xformers]
