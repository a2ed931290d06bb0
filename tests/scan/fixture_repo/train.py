"""A CUDA training script: one example of each category (the docstring says cuda, nccl and nvidia-smi: ignored)."""
import os
import subprocess

import torch
import torch.cuda as tc
import torch.distributed as dist
from torch.cuda import memory_allocated

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
device = torch.device("cuda", local_rank)
other = f"cuda:{local_rank}"
dist.init_process_group(backend="nccl")
if not dist.is_nccl_available():
    raise SystemExit("no nccl")
model = torch.nn.Linear(4, 4).cuda()
x = torch.zeros(4).to("cuda:0")
if x.device.type == "cuda":
    torch.cuda.synchronize()
if str(device).startswith("cuda") or "cuda" in str(device):
    tc.empty_cache()
if dist.get_backend() == "nccl":
    pass
if x.is_cuda:
    print(memory_allocated(), torch.cuda.get_device_capability())
torch.backends.cudnn.benchmark = True
compiled = torch.compile(model)
w8 = x.to(torch.float8_e4m3fn)
y = torch._scaled_mm(w8, w8.t(), scale_a=x, scale_b=x)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    pass
step = torch.cuda.make_graphed_callables(model, (x,))
torch.cuda.nvtx.range_push("step")
scaler = torch.amp.GradScaler()
dist.all_reduce(x, op=dist.ReduceOp.AVG)
subprocess.run(["nvidia-smi", "-L"], check=False)
dp = torch.nn.DataParallel(model)
