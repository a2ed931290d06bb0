"""A nanochat-shaped training script (written for ascend_shim's tests, CUDA-only as nanochat is).

Patterns of nanochat @ 92d63d4: PYTORCH_ALLOC_CONF set before torch is imported, an import-time capability
check, `--device-type` restricted to cuda|cpu|mps, FA3 via the kernels hub with window_size=(L, 0) and an
in-place kv cache, `--fp8`, torch.compile of the model and of a fullgraph optimizer step, torchrun + nccl with
ReduceOp.AVG reductions, a fp16 GradScaler, MFU from a peak-flops table. Prints `RESULT {json}` at the end.
"""
import os

os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
import argparse
import json
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from nanochat.common import COMPUTE_DTYPE, autodetect_device_type, compute_init, get_peak_flops
from nanochat import flash_attention
from nanochat.flash_attention import flash_attn

parser = argparse.ArgumentParser()
parser.add_argument("--device-type", type=str, default="", choices=["cuda", "cpu", "mps"])
parser.add_argument("--fp8", action="store_true")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per rank and step")
args = parser.parse_args()

device_type = autodetect_device_type() if args.device_type == "" else args.device_type
ddp, rank, local_rank, world, device = compute_init(device_type)
peak_flops = get_peak_flops(torch.cuda.get_device_name(0)) if device_type == "cuda" else float("inf")

B, T, H, D, V, WINDOW = 2, 16, 2, 16, 64, 6


class Linear(nn.Linear):
    def forward(self, x):  # nanochat casts weights to the compute dtype instead of autocast
        return F.linear(x, self.weight.to(dtype=x.dtype))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, H * D)
        self.qkv = Linear(H * D, 3 * H * D, bias=False)
        self.proj = Linear(H * D, H * D, bias=False)
        self.lm_head = Linear(H * D, V, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx).to(COMPUTE_DTYPE)
        q, k, v = self.qkv(x).view(idx.size(0), idx.size(1), 3, H, D).unbind(2)
        y = flash_attn.flash_attn_func(q, k, v, causal=True, window_size=(WINDOW, 0))
        x = x + self.proj(y.reshape(idx.size(0), idx.size(1), H * D))
        logits = self.lm_head(x).float()
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


@torch.compile(dynamic=False, fullgraph=True)
def sgd_step(p, grad, lr):
    p.add_(grad, alpha=-lr)


class DistSGD(torch.optim.Optimizer):
    """Like nanochat's MuonAdamW: averages gradients across ranks itself (ReduceOp.AVG), compiled update."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr = torch.tensor(group["lr"], device=group["params"][0].device)
            for p in group["params"]:
                if dist.is_initialized():
                    dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
                sgd_step(p, p.grad, lr)


model = TinyGPT().to(device)
if args.fp8:
    from nanochat.fp8 import convert_to_float8_training
    convert_to_float8_training(model)
orig_model = model
model = torch.compile(model, dynamic=False)
optimizer = DistSGD(orig_model.parameters(), lr=0.5)
scaler = torch.amp.GradScaler() if torch.float16 == COMPUTE_DTYPE else None

gen = torch.Generator().manual_seed(1234)
per_step = world * args.grad_accum
data = torch.randint(0, V, (args.steps * per_step, B, T + 1), generator=gen)
losses, reduce_scatter_ok = [], None
for step in range(args.steps):
    loss = 0.0
    for micro in range(args.grad_accum):
        batch = data[step * per_step + rank * args.grad_accum + micro].to(device)
        micro_loss = model(batch[:, :-1], batch[:, 1:]) / args.grad_accum
        (scaler.scale(micro_loss) if scaler is not None else micro_loss).backward()
        loss = loss + micro_loss.detach()
    if scaler is not None:
        scaler.unscale_(optimizer)
        if ddp:  # nanochat: every rank must agree on skipping the step
            for found_inf in scaler._found_inf_per_device(optimizer).values():
                dist.all_reduce(found_inf, op=dist.ReduceOp.MAX)
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step_loss = loss.detach().float().clone()
    if ddp:
        dist.all_reduce(step_loss, op=dist.ReduceOp.AVG)
    losses.append(step_loss.item())

if ddp:  # the sharded-optimizer pattern: reduce_scatter with AVG
    full = torch.arange(world * 4, dtype=torch.float32, device=device) * (rank + 1)
    shard = torch.empty(4, device=device)
    dist.reduce_scatter_tensor(shard, full, op=dist.ReduceOp.AVG)
    expected = torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) * (world + 1) / 2
    reduce_scatter_ok = torch.allclose(shard.cpu(), expected)
    checksum = torch.stack([p.detach().float().sum() for p in orig_model.parameters()]).sum().reshape(1)
    sums = [torch.zeros(1, device=device) for _ in range(world)]
    dist.all_gather(sums, checksum)
    params_in_sync = all(torch.equal(s, sums[0]) for s in sums)
else:
    params_in_sync = True

# Generation through the kv cache, as nanochat's Engine does it: inference mode, one int32 cache_seqlens tensor
# advanced in place after each forward; prefill, then one token at a time, against full attention
def generate_check():
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 12, H, D, generator=g).to(device=device, dtype=COMPUTE_DTYPE) for _ in range(3))
    full = flash_attn.flash_attn_func(q, k, v, causal=True, window_size=(WINDOW, 0))
    k_cache = torch.zeros(1, 16, H, D, device=device, dtype=COMPUTE_DTYPE)
    v_cache = torch.zeros_like(k_cache)
    cache_seqlens = torch.zeros(1, dtype=torch.int32, device=device)
    outs = []
    for t0, t1 in [(0, 8)] + [(i, i + 1) for i in range(8, 12)]:
        y = flash_attn.flash_attn_with_kvcache(q[:, t0:t1], k_cache, v_cache, k=k[:, t0:t1], v=v[:, t0:t1],
                                               cache_seqlens=cache_seqlens, causal=True, window_size=(WINDOW, 0))
        assert isinstance(y, torch.Tensor), type(y)  # a bare tensor, not a tuple
        outs.append(y)
        cache_seqlens += t1 - t0
    kv_err = (torch.cat(outs, 1).float() - full.float()).abs().max().item()
    return kv_err, torch.equal(k_cache[:, :12], k) and torch.equal(v_cache[:, :12], v)


with torch.inference_mode():
    try:
        (kv_err, cache_in_place), kv_error = generate_check(), None
    except Exception as exc:  # reported, so the other checks still print
        kv_err, cache_in_place, kv_error = None, False, f"{type(exc).__name__}: {exc}"

result = {
    "rank": rank, "world": world, "device": str(next(orig_model.parameters()).device), "losses": losses,
    "compute_dtype": str(COMPUTE_DTYPE), "peak_flops": peak_flops,
    "fa3": getattr(flash_attention._fa3, "__name__", None), "use_fa3": flash_attention.USE_FA3,
    "fp8_layers": sum(type(m).__name__ == "Float8Linear" for m in model.modules()),
    "npu_alloc_conf": os.environ.get("PYTORCH_NPU_ALLOC_CONF"), "scaler": None if scaler is None else
    {"enabled": scaler.is_enabled(), "device": scaler._device, "scale": scaler.get_scale()},
    "reduce_scatter_ok": reduce_scatter_ok, "params_in_sync": params_in_sync, "kv_err": kv_err,
    "cache_in_place": cache_in_place, "kv_error": kv_error, "finite": all(math.isfinite(x) for x in losses),
}
sys.stdout.write("RESULT " + json.dumps(result) + "\n")
sys.stdout.flush()
if ddp:
    dist.destroy_process_group()
