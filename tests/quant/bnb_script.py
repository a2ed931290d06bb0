"""CUDA code using bitsandbytes: 8-bit Adam, 4-bit and LLM.int8 layers on data made on the CPU; saves the results.

Run under the shim (device "cuda", the NPU) and, as the reference, without it on the CPU; the int8 layer runs
bitsandbytes' accelerator algorithm (LLM.int8) in both (on the CPU bitsandbytes picks another one by default).
"""
import sys

import torch

import bitsandbytes as bnb
import peft  # noqa: F401  (imports bitsandbytes' integration)
from bitsandbytes.autograd import _functions
from transformers import Trainer  # noqa: F401

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Linear(32, 16)
batches = [torch.randn(4, 32) for _ in range(3)]
model = model.to(dev)
opt = bnb.optim.Adam8bit(model.parameters(), lr=1e-2, min_8bit_size=0)
losses = []
for x in batches:
    loss = model(x.to(dev)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.detach().cpu())
paged = bnb.optim.PagedAdamW8bit(model.parameters(), lr=1e-2, min_8bit_size=0)
model(batches[0].to(dev)).sum().backward()
paged.step()

torch.manual_seed(1)
dense = torch.nn.Linear(64, 32)
x = torch.randn(4, 64, dtype=torch.bfloat16)
q4 = bnb.nn.Linear4bit(64, 32, compute_dtype=torch.bfloat16, quant_type="nf4")
q4.load_state_dict(dense.state_dict())
y4 = q4.to(dev)(x.to(dev))
q8 = bnb.nn.Linear8bitLt(64, 32, has_fp16_weights=False)
q8.load_state_dict(dense.state_dict())
q8 = q8.to(dev)
if dev == "cpu":
    q8.init_8bit_state()
    y8 = _functions.MatMul8bitLt.apply(x.half(), q8.weight, None, q8.bias.half(), q8.state)
else:
    y8 = q8(x.half().to(dev))
torch.save({"losses": torch.stack(losses), "weight": model.weight.detach().cpu(), "y4": y4.detach().cpu(),
            "y8": y8.detach().cpu()}, sys.argv[1])
print("bnb done", dev)
