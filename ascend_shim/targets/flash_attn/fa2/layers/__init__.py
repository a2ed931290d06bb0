"""``flash_attn.layers``: only ``rotary`` is provided on the NPU."""
