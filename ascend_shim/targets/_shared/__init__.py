"""Code several targets share: :mod:`.device_wrappers` (device arguments translated and recorded),
:mod:`.npu_checks` (is the NPU the accelerator), :mod:`.fused_adamw` (torch_npu's fused AdamW where CUDA code
asks for a fused optimizer)."""
