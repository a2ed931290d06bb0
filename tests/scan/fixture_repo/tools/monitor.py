"""GPU monitoring and launch helpers."""
import os

import pynvml
from apex.optimizers import FusedAdam

pynvml.nvmlInit()
os.getenv("NCCL_DEBUG")
launch = f"CUDA_VISIBLE_DEVICES={os.getpid()} torchrun train.py"
alloc = os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
optimizer_cls = FusedAdam
