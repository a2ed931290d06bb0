"""Attention kernels: flash_attn (FA2), FA3, the kernels hub and triton."""
import triton
import triton.language as tl
from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache
from flash_attn.bert_padding import pad_input

try:
    import flash_attn_interface
except ImportError:
    flash_attn_interface = None

from kernels import get_kernel

from .local import cuda  # a relative import of the repository's own module: not a finding


@triton.jit
def add_kernel(x_ptr, n):
    offs = tl.arange(0, 16)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)


fa3 = get_kernel("kernels-community/flash-attn3")
