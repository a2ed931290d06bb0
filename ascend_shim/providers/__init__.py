"""The code behind the patch sets of ``ascend_shim.patches``, which only declare and bind it.

A patch set's module here bears its name (``patches/torch_cuda.py`` -> :mod:`.torch_cuda`); shared by several sets:
:mod:`.device_wrappers` (device arguments translated and recorded), :mod:`.npu_checks` (is the NPU the accelerator),
:mod:`.environment` (CUDA/NCCL variables). The modules the shim provides in place of CUDA-only packages live here
too: :mod:`.flash_attn`, :mod:`.pynvml`, :mod:`.fused_adamw`. Each is imported when its first patch applies.
"""
