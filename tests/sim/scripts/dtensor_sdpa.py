"""F.scaled_dot_product_attention on DTensors (the FSDP2 + TP pattern), as a CUDA script writes it, under torchrun:
every layout is checked against plain attention on the CPU (forward and gradients)."""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

rank = int(os.environ["RANK"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (dist.get_world_size(),))


def check(name, placements, *, heads_kv=4, mask=None, is_causal=False, dropout_p=0.0, enable_gqa=False,
          want=None):
    torch.manual_seed(0)
    q = torch.randn(4, 4, 6, 8, requires_grad=True)
    k, v = (torch.randn(4, heads_kv, 6, 8, requires_grad=True) for _ in range(2))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=enable_gqa)
    ref.backward(torch.ones_like(ref))
    dq, dk, dv = (distribute_tensor(t.detach().cuda(), mesh, placements).requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(dq, dk, dv, attn_mask=None if mask is None else mask.cuda(),
                                         dropout_p=dropout_p, is_causal=is_causal, enable_gqa=enable_gqa)
    assert isinstance(out, DTensor), type(out)
    assert list(out.placements) == (want or placements), (name, out.placements)
    if dropout_p:
        report(name, True, f"{list(out.placements)}")
        return
    out.backward(torch.ones_like(out))
    err = (out.full_tensor().cpu() - ref.detach()).abs().max().item()
    gerr = max((d.grad.full_tensor().cpu() - t.grad).abs().max().item() for d, t in ((dq, q), (dk, k), (dv, v)))
    report(name, err < 1e-5 and gerr < 1e-5, f"out {err:.2e} grads {gerr:.2e} {list(out.placements)}")


def report(name, ok, detail):
    """Every rank checks; rank 0 prints (one line each), another rank stops the job on a failure."""
    if rank == 0:
        print(f"CHECK {name} {'ok' if ok else 'FAIL'} {detail}", flush=True)
    elif not ok:
        raise AssertionError(f"rank {rank}: {name} {detail}")


causal = torch.ones(6, 6, dtype=torch.bool).tril()
check("heads_causal", [Shard(1)], is_causal=True)  # tensor parallel: heads split
check("batch_mask_per_batch", [Shard(0)], mask=torch.rand(4, 1, 6, 6) > 0.3)  # a plain (B,1,L,S) mask
check("heads_mask_2d", [Shard(1)], mask=causal)
check("heads_gqa", [Shard(1)], heads_kv=2, enable_gqa=True, is_causal=True)
check("sequence_sharded", [Shard(2)], is_causal=True, want=[Replicate()])  # no sequence strategy: replicated
check("replicated", [Replicate()], is_causal=True)
check("dropout_replicated", [Shard(1)], dropout_p=0.5, want=[Replicate()])
dist.destroy_process_group()
if rank == 0:
    print("ALL_DONE")
