"""Like nanochat/common.py: an import-time capability check, device setup, nccl, a peak-flops table."""
import os

import torch
import torch.distributed as dist

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _pick_compute_dtype():
    if "NANOCHAT_DTYPE" in os.environ:
        return _DTYPES[os.environ["NANOCHAT_DTYPE"]]
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()  # None on torch_npu: `None >= (8, 0)` is a TypeError
        return torch.bfloat16 if cap >= (8, 0) else torch.float32
    return torch.float32


COMPUTE_DTYPE = _pick_compute_dtype()  # runs at import time


def autodetect_device_type():
    return "cuda" if torch.cuda.is_available() else "cpu"


def compute_init(device_type="cuda"):
    assert device_type in ["cuda", "mps", "cpu"], "Invalid device type atm"
    torch.manual_seed(42)
    if device_type == "cuda":
        torch.cuda.manual_seed(42)
    ddp = all(k in os.environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    rank, local_rank, world = (int(os.environ.get(k, d)) for k, d in (("RANK", 0), ("LOCAL_RANK", 0),
                                                                         ("WORLD_SIZE", 1)))
    if ddp and device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl", device_id=device)
        dist.barrier()
    else:
        device = torch.device(device_type)
    return ddp, rank, local_rank, world, device


def get_peak_flops(device_name: str) -> float:
    name = device_name.lower()
    for key, flops in (("h100", 989e12), ("a100", 312e12)):
        if key in name:
            return flops
    return float("inf")  # unknown part: MFU shows 0%
