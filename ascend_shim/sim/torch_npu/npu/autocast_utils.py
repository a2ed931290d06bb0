"""Autocast settings of torch.npu, thin views of torch's per-device autocast state for "npu"."""
from __future__ import annotations

import torch

__all__ = ["get_amp_supported_dtype", "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype",
           "set_autocast_dtype"]


def get_amp_supported_dtype() -> list[torch.dtype]:
    """As torch_npu with bf16 support: float16, bfloat16 and float32."""
    return [torch.float16, torch.bfloat16, torch.float32]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enable: bool) -> None:
    torch.set_autocast_enabled("npu", enable)


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("npu", dtype)
