"""FSDP2 training of a small GPT with tied embeddings, written as CUDA code; prints its losses.

Run under torchrun x2 either plainly (no CUDA here: cpu + gloo) or through ``ascend_shim run --simulate``
(cuda -> the emulated npu, nccl -> hccl). The test compares the two runs' losses.

What it exercises on the device:
* ``fully_shard`` of a model built on the host: FSDP2 moves every parameter with ``param.data = p.to(device)``;
  the tied ``wte.weight``/``lm_head.weight`` must stay one parameter;
* ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``;
* deferred init: a meta-device copy, ``to_empty`` then ``reset_parameters()`` on the sharded (DTensor)
  parameters, which on an accelerator goes through DTensor's ``OffsetBasedRNGTracker`` (16-byte Philox state);
  the init must be reproducible under a seed and differ between shards;
* FSDP1 (accelerator only) of the same host model: flattening, ``param.data =`` moves, ``resize_(0)`` frees;
* ``torch.distributed.checkpoint``: the full state dict of the host model loaded into the deferred one, and a
  sharded ``dcp.save``/``dcp.load`` round trip of the trained model.

Prints ``CHECK <name> ok|FAIL``, ``LOSS <step> <value>`` and ``ALL_DONE``.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH, STEPS = 64, 32, 4, 2, 16, 4, 6


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc = nn.Linear(DIM, 4 * DIM)
        self.out = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as in GPT-2

    def reset_parameters(self):
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm)):
                module.reset_parameters()

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


def main() -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    mesh = init_device_mesh(device.type, (world,))

    def check(name, cond, detail=""):
        if rank == 0:
            print(f"CHECK {name} {'ok' if cond else 'FAIL'} {detail}".rstrip(), flush=True)

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    def shard(model):
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        return model

    # 1. Built on the host and sharded: FSDP2 moves each parameter with `param.data = p.to(device)`.
    torch.manual_seed(0)
    model = TinyGPT()
    n_host = sum(p.numel() for p in model.parameters())
    full_sd = {k: v.clone() for k, v in model.state_dict().items()}
    shard(model)
    check("tied_after_fully_shard", model.wte.weight is model.lm_head.weight)
    check("param_count", sum(p.numel() for p in model.parameters()) == n_host,
          f"{sum(p.numel() for p in model.parameters())} vs {n_host}")
    check("params_on_device", all(p.device == device for p in model.parameters()), str(device))

    # 2. Deferred init on the device: reset_parameters() on DTensor shards.
    def deferred(seed):
        with torch.device("meta"):
            meta = TinyGPT()
        shard(meta)
        meta.to_empty(device=device)
        torch.manual_seed(seed)
        meta.reset_parameters()
        return meta

    lazy = deferred(7)
    again = deferred(7)
    fc_full = lazy.blocks[0].fc.weight.full_tensor().detach()
    check("reset_parameters_is_dtensor", isinstance(lazy.blocks[0].fc.weight, DTensor))
    check("reset_parameters_reproducible", all(torch.equal(a.full_tensor(), b.full_tensor())
                                               for a, b in zip(lazy.parameters(), again.parameters(), strict=True)))
    if use_cuda:  # a cpu mesh has no DTensor RNG tracker: every rank draws the same numbers (torch's behaviour)
        half = fc_full.shape[0] // 2
        check("shards_differ", not torch.equal(fc_full[:half], fc_full[half:]))
    bound = 1 / math.sqrt(DIM)  # kaiming_uniform(a=sqrt(5)) bound of a Linear
    check("init_in_range", float(fc_full.abs().max()) <= bound + 1e-6 and float(fc_full.std()) > bound / 4)
    if use_cuda:
        state = torch.cuda.get_rng_state()
        check("rng_state_is_philox", state.numel() == 16 and int(state[8:].view(torch.int64)) % 4 == 0,
              str(state.numel()))

    # 3. Load the host model's full state dict into the deferred one (torch.distributed.checkpoint API).
    set_model_state_dict(lazy, full_sd, options=StateDictOptions(full_state_dict=True))
    check("state_dict_loaded", all(torch.equal(a.full_tensor(), b.full_tensor())
                                   for a, b in zip(lazy.parameters(), model.parameters(), strict=True)))
    check("tied_after_load", lazy.wte.weight is lazy.lm_head.weight)

    models = [model, lazy]
    if use_cuda:  # FSDP1 needs an accelerator: the same host model, flattened and moved with `param.data =`
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision

        torch.manual_seed(0)
        fsdp1 = FSDP(TinyGPT(), device_id=device, use_orig_params=True,
                     mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
        check("fsdp1_tied", fsdp1.module.wte.weight is fsdp1.module.lm_head.weight)
        check("fsdp1_on_device", all(p.device == device for p in fsdp1.parameters()))
        models.append(fsdp1)

    # 4. Train them all: same data on every backend.
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
    data = torch.Generator().manual_seed(1234)
    for step in range(STEPS):
        idx = torch.randint(0, VOCAB, (world, BATCH, SEQ + 1), generator=data)[rank]
        x, y = idx[:, :-1].to(device), idx[:, 1:].to(device)
        losses = []
        for m, opt in zip(models, opts, strict=True):
            loss = m(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            reduced = loss.detach().float().clone()
            dist.all_reduce(reduced)
            losses.append(float(reduced) / world)
        if rank == 0:
            print(f"LOSS {step} {' '.join(f'{v:.6f}' for v in losses)}", flush=True)
    check("both_models_identical", losses[0] == losses[1], str(losses))
    if use_cuda:
        check("fsdp1_matches_fsdp2", abs(losses[2] - losses[0]) < 5e-3, str(losses))

    # 5. Sharded checkpoint round trip: the trained model's shards into a fresh deferred model.
    ckpt = os.path.join(tempfile.gettempdir(), f"fsdp2_tied_gpt_{os.environ.get('MASTER_PORT', '0')}")
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=ckpt)
    restored = deferred(99)
    target = {"model": get_model_state_dict(restored)}
    dcp.load(target, checkpoint_id=ckpt)
    set_model_state_dict(restored, target["model"])
    check("dcp_round_trip", all(torch.equal(a.full_tensor(), b.full_tensor())
                                for a, b in zip(restored.parameters(), model.parameters(), strict=True)))
    dist.barrier()
    if rank == 0:
        shutil.rmtree(ckpt, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("ALL_DONE", flush=True)


if __name__ == "__main__":
    main()
