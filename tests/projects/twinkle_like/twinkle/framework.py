"""Torch.is_gpu_available() checked before the NPU; device strings built from the answer (framework.py)."""
import torch


def is_gpu_available():
    return torch.cuda.is_available()


def is_npu_available():
    return hasattr(torch, "npu") and torch.npu.is_available()


def get_device(local_rank=0):
    if is_gpu_available():
        return f"cuda:{local_rank}"
    if is_npu_available():
        return f"npu:{local_rank}"
    return "cpu"


def zero_loss():
    """utils/nccl_safe.py's fallback: a leftover device='cuda'."""
    return torch.zeros((), device="cuda", requires_grad=True)
