"""``torch.npu.amp.autocast``: torch.amp.autocast with device_type fixed to "npu".

Under it, matmul-like ops produce the low dtype and numerically sensitive ops (softmax, norms, losses) float32,
following the CUDA policy that the emulator registers for AutocastPrivateUse1.
"""
from __future__ import annotations

import functools

import torch

__all__ = ["autocast", "custom_fwd", "custom_bwd"]


class autocast(torch.amp.autocast_mode.autocast):
    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    if fwd is None:
        return functools.partial(custom_fwd, cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="npu", cast_inputs=cast_inputs)


def custom_bwd(bwd):
    return torch.amp.custom_bwd(bwd, device_type="npu")
