"""The shim against Huawei's own ``torch_npu.contrib.transfer_to_npu``, side by side in one run, over the same
emulated device and the same torch_npu Python (the real layer: ``python -m ascend_shim fetch-torch-npu`` first).

Each side is a process of its own for the whole run, started as a user would start it:

* shim: ``ascend-shim run --simulate --sim-layer real worker.py`` (every patch set of the ``npu`` backend);
* transfer_to_npu: ``ascend-shim run --simulate --sim-layer real --disable '*' worker.py``, the worker importing
  ``torch_npu.contrib.transfer_to_npu`` first: Huawei's translation alone, unmodified, none of the shim's patches.

The parent interleaves rounds between the two (shim, peer, peer, shim, ...) and prints the ratio of medians
shim / transfer_to_npu for: calls that need no translation (``torch.zeros(n)``, ``x.to(torch.float16)``), calls
that do (``torch.zeros(n, device="cuda")``, ``x.to("cuda")``, ``torch.device("cuda")``, ``x.cuda()``), and a
GPT-style training step written for CUDA (autocast, GradScaler, AdamW), whose losses are compared.

    python bench/bench_vs_transfer_to_npu.py [--rounds 7] [--calls 20000] [--steps 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CALLS = {
    "torch.zeros(64)  (untranslated)": "torch.zeros(64)",
    "x.to(torch.float16)  (untranslated)": "x.to(torch.float16)",
    "torch.zeros(64, device='cuda')": "torch.zeros(64, device='cuda')",
    "x.to('cuda')": "x.to('cuda')",
    "torch.device('cuda')": "torch.device('cuda')",
    "x.cuda()": "x.cuda()",
}


def worker(peer: bool, calls: int, steps: int) -> None:
    """One side: answers each round on stdout, as one JSON line, until stdin closes."""
    if peer:
        import torch_npu.contrib.transfer_to_npu  # noqa: F401  (Huawei's CUDA-to-NPU translation)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    x = torch.ones(64, device="cuda")
    compiled = {name: compile(code, name, "eval") for name, code in CALLS.items()}

    class Block(nn.Module):
        def __init__(self, d=128, heads=4):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.heads = heads

        def forward(self, h):
            b, t, d = h.shape
            q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True)
            h = h + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return h + self.mlp(self.ln2(h))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(256, 128), *[Block() for _ in range(4)], nn.LayerNorm(128),
                          nn.Linear(128, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (8, 65), generator=gen) for _ in range(steps + 1)]
    losses = []

    def step(batch):
        batch = batch.to("cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, 256), batch[:, 1:].reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    losses.append(step(batches[0]))  # warm-up
    env = {"torch": torch, "x": x}
    for _ in sys.stdin:
        out = {}
        for name, code in compiled.items():
            eval(code, env)  # noqa: S307  (warm the call site)
            start = time.perf_counter()
            for _ in range(calls):
                eval(code, env)  # noqa: S307
            out[name] = (time.perf_counter() - start) / calls * 1e6
        start = time.perf_counter()
        for batch in batches[1:]:
            losses.append(step(batch))
        out["training step (ms)"] = (time.perf_counter() - start) / steps * 1e3
        out["losses"] = losses[-steps:]
        print(json.dumps(out), flush=True)


class Side:
    def __init__(self, name: str, peer: bool, calls: int, steps: int):
        self.name = name
        args = ["--simulate", "--sim-layer", "real", "--log-level", "off"] + (["--disable", "*"] if peer else [])
        cmd = [sys.executable, "-m", "ascend_shim", "run", *args, os.path.abspath(__file__), "--worker",
               "peer" if peer else "shim", "--calls", str(calls), "--steps", str(steps)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)

    def round(self) -> dict:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        while True:  # torch_npu prints its own lines (e.g. its CANN environment warning) on stdout
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"the {self.name} side stopped (exit {self.proc.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--worker", choices=("shim", "peer"), help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.worker:
        worker(ns.worker == "peer", ns.calls, ns.steps)
        return
    shim, peer = Side("shim", False, ns.calls, ns.steps), Side("transfer_to_npu", True, ns.calls, ns.steps)
    results: dict[str, list[dict]] = {"shim": [], "transfer_to_npu": []}
    try:
        for r in range(ns.rounds):
            order = (shim, peer) if r % 2 == 0 else (peer, shim)
            for side in order:
                results[side.name].append(side.round())
    finally:
        shim.close()
        peer.close()
    print(f"shim vs Huawei's transfer_to_npu on the emulated NPU (real layer), medians of {ns.rounds} interleaved "
          f"rounds, {ns.calls} calls / {ns.steps} steps each")
    print(f"{'':40} {'shim':>10} {'transfer':>10} {'shim/transfer':>14}")
    for key in list(CALLS) + ["training step (ms)"]:
        a = statistics.median(r[key] for r in results["shim"])
        b = statistics.median(r[key] for r in results["transfer_to_npu"])
        unit = "" if key.endswith("(ms)") else " us"
        print(f"{key:40} {a:8.2f}{unit:3} {b:8.2f}{unit:3} {a / b:12.3f}")
    same = results["shim"][-1]["losses"] == results["transfer_to_npu"][-1]["losses"]
    print(f"training losses identical on both sides: {same} ({results['shim'][-1]['losses'][-1]:.4f})")


if __name__ == "__main__":
    main()
