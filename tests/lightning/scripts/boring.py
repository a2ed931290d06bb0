"""Lightning as its users write it for a GPU: Trainer(accelerator=...) on BoringModel and a Fabric loop.

    python boring.py OUT RUNS DEVICES

RUNS is a comma list of ``trainer:ACCELERATOR`` / ``fabric:ACCELERATOR``, each run in turn from the same seed;
DEVICES > 1 runs Lightning's DDP (it relaunches this script once per extra rank: give one run then). Each rank
writes OUT.rank<N>.json: per run, the devices the losses lived on and the loss of every step.
"""
import json
import sys

import torch
import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel

STEPS = 3


class Recorded(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.seen.append((str(out["loss"].device), out["loss"].item()))
        return out


def trainer_run(accelerator, devices):
    L.seed_everything(0, verbose=False)
    model = Recorded()
    model.seen = []
    trainer = L.Trainer(accelerator=accelerator, devices=devices, max_steps=STEPS, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model)
    return trainer.global_rank, model.seen


def fabric_run(accelerator, devices):
    fabric = L.Fabric(accelerator=accelerator, devices=devices)
    fabric.launch()
    fabric.seed_everything(0, verbose=False)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    data = torch.Generator().manual_seed(fabric.global_rank)
    seen = []
    for _ in range(STEPS):
        loss = model(torch.randn(8, 16, generator=data).to(fabric.device)).square().mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        seen.append((str(loss.device), loss.item()))
    return fabric.global_rank, seen


def main():
    out, runs, devices = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
    results, rank = {}, 0
    for name in runs:
        kind, _, accelerator = name.partition(":")
        rank, seen = {"trainer": trainer_run, "fabric": fabric_run}[kind](accelerator, devices)
        results[name] = {"devices": sorted({d for d, _ in seen}), "losses": [x for _, x in seen]}
    with open(f"{out}.rank{rank}.json", "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
