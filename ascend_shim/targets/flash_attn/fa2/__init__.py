"""``flash_attn`` (FA2 API, 2.8.4) on the Ascend NPU: what ``import flash_attn`` gives while the shim is active.

Same names, signatures, defaults and return conventions as flash-attention 2.8.4; see
``ascend_shim.targets.flash_attn._npu`` for how each argument maps onto the NPU fused ops.
"""
__version__ = "2.8.4"

from .flash_attn_interface import (  # noqa: E402
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache"]
