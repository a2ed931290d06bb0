"""Modules the shim provides in place of CUDA-only packages or classes (``flash_attn``, ``pynvml``, a fused AdamW).

Patches in ``ascend_shim.patches`` only declare when these are used; the code lives here, imported on first use.
"""
