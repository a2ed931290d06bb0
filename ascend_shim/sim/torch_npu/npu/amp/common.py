"""Availability check used by amp code paths (name kept from torch_npu)."""
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import torch.npu  # registered into torch at run time

__all__ = ["amp_definitely_not_available"]


def amp_definitely_not_available() -> bool:
    return not torch.npu.is_available()
