"""Availability check used by amp code paths (name kept from torch_npu)."""
import torch

__all__ = ["amp_definitely_not_available"]


def amp_definitely_not_available() -> bool:
    return not torch.npu.is_available()
