"""Seed-004 style torchrun Trainer job, written for CUDA: nccl, model.cuda(), fp16, pinned memory, tf32.

Run: torchrun --nproc_per_node 2 trainer_ddp.py OUT.json [optim]
Writes (rank 0) the loss and grad_norm curves, devices and a weight digest per rank to OUT.json.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments, TrainerCallback

out_path = sys.argv[1]
optim = sys.argv[2] if len(sys.argv) > 2 else "adamw_torch"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
model.cuda()
initial = torch.cat([p.detach().float().flatten() for p in model.parameters()]).cpu()

g = torch.Generator().manual_seed(1)
ids = torch.randint(0, 64, (32, 16), generator=g).tolist()
train = Dataset.from_dict({"input_ids": ids, "labels": ids})

losses = []
grad_norms = []  # as logged: after GradScaler's unscale_, before clipping


class Record(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            losses.append(logs["loss"])
            grad_norms.append(logs.get("grad_norm"))


args = TrainingArguments(
    output_dir=os.path.join(os.path.dirname(os.path.abspath(out_path)), "trainer_out"),
    per_device_train_batch_size=4, max_steps=4, learning_rate=1e-3, logging_steps=1,
    fp16=True, ddp_backend="nccl", dataloader_pin_memory=True, tf32=True, optim=optim,
    report_to=[], save_strategy="no", seed=0, disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[Record()])
trainer.train()

devices = sorted({str(p.device) for p in model.parameters()})
flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, flat)  # every rank's final weights, compared on rank 0
gathered = [t.cpu() for t in gathered]
all_devices = [None] * dist.get_world_size()
dist.all_gather_object(all_devices, devices)
if dist.get_rank() == 0:
    result = {
        "losses": losses, "grad_norms": grad_norms, "devices": all_devices, "world": dist.get_world_size(),
        "backend_seen_by_user": dist.get_backend(), "backend_config": str(dist.get_backend_config()),
        "max_rank_weight_diff": max((gathered[0] - t).abs().max().item() for t in gathered),
        "flat_device": str(flat.device),
        "max_weight_change": (gathered[0] - initial).abs().max().item(),
        "args_device": str(args.device), "optimizer": type(trainer.optimizer.optimizer).__name__,
        "scaler": type(getattr(trainer.accelerator, "scaler", None)).__name__,
    }
    try:  # test instrumentation only: which emulated fused NPU ops ran (absent on a real NPU)
        from ascend_shim.sim import counters
        result["op_calls"] = dict(counters.op_calls())
    except ImportError:
        pass
    with open(out_path, "w") as f:
        json.dump(result, f)
dist.barrier()
dist.destroy_process_group()
