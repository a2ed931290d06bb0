"""A CUDA user's DeepSpeed ZeRO-Offload job: optimizer states and step on the host (DeepSpeedCPUAdam), one process.

Run: python ds_zero_offload.py OUT.json STAGE [STAGE ...]  (MASTER_PORT in the environment)
Each ZeRO stage trains the same seeded MLP for 6 steps with ``offload_optimizer: {device: cpu}``; OUT.json gets,
per stage, the losses, the optimizer classes, where the model and the fp32 master weights live, and the final
weights' sum. Without CUDA (the CPU reference run) the same script runs on DeepSpeed's CPU accelerator.
"""
import json
import os
import sys

import torch
import deepspeed

out_path, stages = sys.argv[1], [int(s) for s in sys.argv[2:]]
os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

g = torch.Generator().manual_seed(1)
x, y = torch.randn(48, 16, generator=g), torch.randn(48, 4, generator=g)
results = {}
for stage in stages:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    config = {"train_batch_size": 8, "steps_per_print": 1000,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "weight_decay": 0.01}},
              "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}}}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    losses = []
    for step in range(6):
        xb, yb = x[step * 8:(step + 1) * 8].to(device), y[step * 8:(step + 1) * 8].to(device)
        loss = torch.nn.functional.mse_loss(engine(xb), yb)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    basic = optimizer.optimizer
    # the fp32 master partitions the host optimizer steps (ZeRO-2: per group; ZeRO-3: flat sub-groups)
    masters = getattr(optimizer, "single_partition_of_fp32_groups", None) or optimizer.fp32_partitioned_groups_flat
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
        weights = sum(float(p.detach().double().sum()) for p in engine.module.parameters())
    results[str(stage)] = {
        "losses": losses, "weights": weights, "zero_optimizer": type(optimizer).__name__,
        "optimizer": type(basic).__name__,
        "master_devices": sorted({t.device.type for t in masters}),
        "model_device": str(next(engine.module.parameters()).device).split(":")[0],
    }
    engine.destroy()
with open(out_path, "w") as f:
    json.dump(results, f)
