"""torchrun worker: DDP and FSDP2 training over the emulated hccl backend, checked against one process.

``--mode ddp``: DistributedDataParallel, a few SGD steps with a different batch per rank.
``--mode fsdp2``: ``fully_shard`` over ``init_device_mesh(<device>, (2,))``, a few Adam steps; run
twice: under the default AVG policy ("reject", where FSDP2's fp32 ReduceOp.AVG reduce-scatter must
fail with HCCL's message, and ``set_force_sum_reduction_for_comms(True)`` trains), then under
"sum_div" (plain FSDP2).
Both check that the ranks end with identical weights and that they match a single-process run on
the concatenated batches. Prints ``CHECK <name> ok`` lines and ``ALL_DONE``.
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

STEPS = 4
IN, HID, OUT, PER_RANK = 8, 16, 4, 6


def make_model() -> nn.Module:
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(IN, HID), nn.Tanh(), nn.Linear(HID, HID), nn.Tanh(), nn.Linear(HID, OUT))


def batch(step: int, rank: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(PER_RANK, IN, generator=g), torch.randn(PER_RANK, OUT, generator=g)


def reference(opt_name: str, world: int) -> list[torch.Tensor]:
    """One process, the concatenated batches: what data-parallel training must reproduce."""
    model = make_model()
    opt = make_opt(opt_name, model.parameters())
    for step in range(STEPS):
        xs, ys = zip(*(batch(step, r) for r in range(world)), strict=True)
        loss = nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def make_opt(name, params):
    return torch.optim.SGD(params, lr=0.1) if name == "sgd" else torch.optim.Adam(params, lr=0.01)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "fsdp2"], required=True)
    ap.add_argument("--device", default="npu", choices=["npu", "cpu"])
    ap.add_argument("--init", default="hccl", choices=["hccl", "none", "device_id"],
                    help="init_process_group(backend) | init_process_group() | init_process_group(device_id=dev)")
    args = ap.parse_args()

    from ascend_shim.sim import hccl

    local_rank = int(os.environ["LOCAL_RANK"])
    if args.device == "npu":
        import ascend_shim.sim as sim

        sim.install()
        hccl.register()
        torch.npu.set_device(local_rank)
        dev = torch.device("npu", local_rank)
        backend = "hccl"
    else:
        hccl._register_for_device("hcclcpu", "cpu")
        dev = torch.device("cpu")
        backend = "hcclcpu"

    if args.init == "hccl":
        dist.init_process_group(backend)
    elif args.init == "none":
        dist.init_process_group()
    else:
        dist.init_process_group(device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()

    def check(name, cond, detail=""):
        if not cond:
            raise AssertionError(f"rank {rank}: {name} failed {detail}")
        if rank == 0:
            print(f"CHECK {name} ok", flush=True)

    def agree_and_match(tag, params: list[torch.Tensor], ref: list[torch.Tensor], atol):
        flat = torch.cat([p.detach().reshape(-1) for p in params]).to(dev)
        gathered = torch.empty(world * flat.numel(), device=dev)
        dist.all_gather_into_tensor(gathered, flat)
        g = gathered.cpu().reshape(world, -1)
        check(f"{tag}_ranks_identical", torch.equal(g[0], g[1]), f"max diff {(g[0] - g[1]).abs().max()}")
        r = torch.cat([p.reshape(-1) for p in ref])
        diff = (g[0] - r).abs().max().item()
        check(f"{tag}_matches_single_process", diff <= atol, f"max diff {diff}")
        moved = (g[0] - torch.cat([p.detach().reshape(-1) for p in make_model().parameters()])).abs().max().item()
        check(f"{tag}_weights_moved", moved > 1e-3, f"{moved}")

    check(f"init_{args.init}_is_hccl",
          dist.distributed_c10d._get_default_group()._get_backend(dev).name() == "hccl")

    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = make_model().to(dev)
        ddp = DDP(model, device_ids=[local_rank] if dev.type != "cpu" else None)
        opt = make_opt("sgd", ddp.parameters())
        for step in range(STEPS):
            x, y = batch(step, rank)
            loss = nn.functional.mse_loss(ddp(x.to(dev)), y.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
        check("ddp_trained", True)
        agree_and_match("ddp", [p.cpu() for p in model.parameters()], reference("sgd", world), atol=1e-5)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        mesh = init_device_mesh(dev.type, (world,))

        def build():
            model = make_model().to(dev)
            for layer in model:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            return model

        def train(model):
            opt = make_opt("adam", model.parameters())
            for step in range(STEPS):
                x, y = batch(step, rank)
                loss = nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
                opt.zero_grad()
                loss.backward()
                opt.step()
            return [p.full_tensor().cpu() for p in model.parameters()]

        ref = reference("adam", world)
        hccl.set_avg_policy("reject")
        model = build()
        x, y = batch(0, rank)
        try:
            nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        except RuntimeError as e:
            check("fsdp2_avg_rejected", "Cannot use ReduceOp.AVG with HCCL" in str(e), repr(e))
        else:
            raise AssertionError("FSDP2 reduce-scatter with ReduceOp.AVG was not rejected")
        model = build()
        for m in model.modules():  # per FSDP module (each fully_shard'ed layer and the root)
            if isinstance(m, FSDPModule):
                m.set_force_sum_reduction_for_comms(True)
        agree_and_match("fsdp2_force_sum", train(model), ref, atol=1e-5)
        hccl.set_avg_policy("sum_div")
        agree_and_match("fsdp2_avg_sum_div", train(build()), ref, atol=1e-5)

    dist.destroy_process_group()
    if rank == 0:
        print("ALL_DONE", flush=True)


if __name__ == "__main__":
    main()
