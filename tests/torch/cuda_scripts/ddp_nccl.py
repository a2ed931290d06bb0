"""A torchrun DDP script written for NCCL/CUDA; under the shim it must run over hccl on npu:0/npu:1."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
assert dist.get_backend() == "nccl", dist.get_backend()
assert dist.is_nccl_available()
mesh = init_device_mesh("cuda", (world,))
assert mesh.device_type == "npu", mesh.device_type

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).cuda()
ddp = DDP(model, device_ids=[local_rank], output_device=local_rank)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
g = torch.Generator().manual_seed(100 + rank)  # different data on each rank
losses = []
for _ in range(5):
    x = torch.randn(16, 8, generator=g).cuda()
    y = x.sum(1, keepdim=True)
    loss = ((ddp(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

avg = torch.tensor([float(rank + 1)], device="cuda")
dist.all_reduce(avg, op=dist.ReduceOp.AVG)
assert abs(avg.item() - (world + 1) / 2) < 1e-6, avg

flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
same = all(torch.equal(gathered[0].cpu(), t.cpu()) for t in gathered)
devices = sorted({str(p.device) for p in model.parameters()})
if rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump({"same": same, "devices": devices, "losses": losses, "avg": avg.item()}, fh)
dist.barrier()
dist.destroy_process_group()
print("OK ddp_nccl", rank)
