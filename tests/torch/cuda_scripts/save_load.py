"""Checkpoints: file names with 'cuda' in them stay file names; map_location values are translated."""
import os
import tempfile

import torch

tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "ckpt_cuda.pt")
w = torch.randn(3, 3, device="cuda")
torch.save({"w": w, "dev": torch.device("cuda", 1)}, path)
assert os.path.exists(path) and not os.path.exists(path.replace("cuda", "npu"))
for loc in ("cuda", "cuda:1", torch.device("cuda", 1), {"npu:0": "cuda:1"}):
    state = torch.load(path, map_location=loc)
    assert state["w"].device.type == "npu", (loc, state["w"].device)
    assert torch.equal(state["w"].cpu(), w.cpu())
state = torch.load(path, map_location="cpu")
assert state["w"].device.type == "cpu"
assert state["dev"] == torch.device("npu", 1), state["dev"]
print("OK save_load")
