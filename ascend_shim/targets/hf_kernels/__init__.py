"""The Hugging Face ``kernels`` hub: FA3 repositories answered by the NPU FA3 provider, kernels' own NPU path else.

``kernels.get_kernel("<repo>")`` downloads a compiled extension from the hub and imports it, choosing the build
variant for the machine itself: on an NPU, a CANN build (``torch-npu``, ``torch<XY>-cxx11-cann<XY>-...``), from the
CANN version torch_npu reports. The FlashAttention-3 repositories that CUDA projects load this way (nanochat:
``get_kernel("varunneal/flash-attention-3").flash_attn_interface``, ``has_kernel("kernels-community/flash-attn3")``)
have no CANN build; they are answered here, without any download, by ``ascend_shim.targets.flash_attn.fa3``: the
FA3 ``flash_attn_interface`` API on NPU fused attention. Other repositories go to the real ``kernels`` functions;
where one has no NPU build, the page kernels raises (every variant it rejected) becomes one line.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


#: hub repositories whose kernel is the FA3 ``flash_attn_interface`` API (what nanochat and others load)
FA3_REPOS = ("varunneal/flash-attention-3", "kernels-community/flash-attn3")
hf_kernels = PatchSet(
    id="hf_kernels", title="kernels hub: FlashAttention-3 repositories answered by the NPU FA3 provider; one line "
                           "for a repository without an NPU build",
    requires={"kernels": ">=0.4"},
    checked_against="kernels 0.17.2 (get_kernel / has_kernel signatures); nanochat @ 92d63d4 as the caller",
    implementation=f"{__name__}.impl"
)


hf_kernels.patch("kernels:get_kernel", covers=("kernels.get_kernel",),
                 why="get_kernel downloads the hub's build of the kernel for this machine's backend: the "
                     "FlashAttention-3 repositories have no CANN (NPU) build (and offline machines fail at the "
                     "download); for a repository without one, kernels raises a page listing every variant it "
                     "rejected.",
                 what="for the FlashAttention-3 repositories (" + ", ".join(FA3_REPOS) + ") returns the NPU FA3 "
                      "provider (bare-tensor returns, window_size=(left, right), in-place kvcache) without "
                      "touching the network; ImportError if the provider is absent. Other repositories: kernels' "
                      "own resolution (its CANN build variants on the NPU); where a repository has none, on the NPU, "
                      "UnsupportedOnNPUError (still kernels' FileNotFoundError) naming the repository, the builds it "
                      "has and what to do, instead of kernels' page of rejected variants.",
                 remove_when="https://huggingface.co/kernels-community/flash-attn3: the hub's FlashAttention-3 "
                             "repositories have no CANN (NPU) build, which kernels could load", factory="get_kernel")


hf_kernels.patch("kernels:has_kernel", covers=("kernels.has_kernel",),
                 why="has_kernel asks the hub whether a build for this machine exists (network; a CUDA answer).",
                 what="for the FlashAttention-3 repositories answers whether the NPU FA3 provider is importable, "
                      "without touching the network. Other repositories: unchanged.",
                 remove_when="https://huggingface.co/kernels-community/flash-attn3: the hub's FlashAttention-3 "
                             "repositories have no CANN (NPU) build, which kernels could load", factory="has_kernel")


PATCH_SETS = [hf_kernels]
