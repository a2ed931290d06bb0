"""Deterministic-algorithm switches tied to autograd (``enable_deterministic_with_backward`` ...), as torch_npu:
torch's deterministic mode is on from this point of the forward until the matching point of the backward."""
from __future__ import annotations

import torch
from torch.autograd.function import Function

__all__ = ["enable_deterministic_with_backward", "disable_deterministic_with_backward"]


class _DeterministicAlgorithmsBeginOp(Function):
    @staticmethod
    def forward(ctx, tensor):
        torch.use_deterministic_algorithms(True)
        return tensor

    @staticmethod
    def backward(ctx, grad_outputs):
        torch.use_deterministic_algorithms(False)
        return grad_outputs


class _DeterministicAlgorithmsEndOp(Function):
    @staticmethod
    def forward(ctx, tensor):
        torch.use_deterministic_algorithms(False)
        return tensor

    @staticmethod
    def backward(ctx, grad_outputs):
        torch.use_deterministic_algorithms(True)
        return grad_outputs


def enable_deterministic_with_backward(tensor: torch.Tensor) -> torch.Tensor:
    return _DeterministicAlgorithmsBeginOp.apply(tensor)


def disable_deterministic_with_backward(tensor: torch.Tensor) -> torch.Tensor:
    return _DeterministicAlgorithmsEndOp.apply(tensor)
