"""A small GPT trained the way CUDA code is written: nothing in this file knows about Ascend.

It is the main job of the README: `python -m ascend_shim run --simulate examples/train_cuda.py` runs it on the
simulated NPU, unmodified, and ends with the shim's migration report. On a GPU machine it runs on CUDA as is.
"""
import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=64, heads=4, layers=2, ctx=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batches(steps, batch, ctx, vocab, seed=0):
    """A learnable synthetic language: each token is the previous one plus one, modulo vocab."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        seq = (start + torch.arange(ctx + 1)) % vocab
        yield seq[:, :-1].pin_memory(), seq[:, 1:].pin_memory()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device: {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'})")
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = TinyGPT().cuda() if device == "cuda" else TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
    first = last = None
    for step, (x, y) in enumerate(batches(args.steps, args.batch, 32, 64)):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        value = loss.item()
        first = value if first is None else first
        last = value
        if step % 10 == 0 or step == args.steps - 1:
            mem = torch.cuda.memory_allocated() / 2**20 if device == "cuda" else 0.0
            print(f"step {step:3d}  loss {value:.4f}  allocated {mem:.2f} MiB")
    if device == "cuda":
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ckpt_cuda.pt")  # a file name that contains "cuda" stays that file
        torch.save(model.state_dict(), path)
        state = torch.load(path, map_location="cuda" if device == "cuda" else "cpu")
    on = next(model.parameters()).device
    print(f"parameters on {on}; checkpoint tensors on {next(iter(state.values())).device}")
    if on.type == "cuda":
        print("trained on the accelerator")
    print(f"loss {first:.3f} -> {last:.3f}")


if __name__ == "__main__":
    main()
