"""Availability and version gates of training code: cuDNN before its switches, NCCL's version before bf16."""
import torch
import torch.distributed as dist

from ascend_shim.errors import UnsupportedOnNPUError

if torch.backends.cudnn.is_available():
    torch.backends.cudnn.benchmark = True
    assert torch.backends.cudnn.version() >= 8000, torch.backends.cudnn.version()
else:
    raise AssertionError("cuDNN must be reported available where CUDA is")

# torchtune's bf16 check
assert dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10), torch.cuda.nccl.version()
assert dist.get_default_backend_for_device("cuda") == "nccl"
assert dist.get_default_backend_for_device(torch.device("cuda", 0)) == "nccl"
assert dist.get_default_backend_for_device("cpu") == "gloo"
assert torch.cuda.nccl.is_available([torch.zeros(2, device="cuda")]) is False
try:
    torch.cuda.nccl.all_reduce([torch.zeros(2, device="cuda")])
except UnsupportedOnNPUError as exc:
    assert "nccl.all_reduce" in str(exc), exc
else:
    raise AssertionError("direct NCCL calls must be refused")
print("OK backend_versions")
