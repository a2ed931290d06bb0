"""Training-step time of the emulated NPU against plain CPU, side by side in one process.

The model is a 4-layer d=256 transformer encoder (nn.TransformerEncoderLayer); one step is forward, loss,
backward and AdamW. Both copies start from the same weights and see the same batch; rounds alternate between
them so that machine noise hits both. The emulator's overhead is the fallback dispatch around each CPU kernel,
so the ratio should stay close to 1 (target: <= 3x).

    python bench/bench_sim_vs_cpu.py [--steps 10] [--rounds 3] [--batch 8] [--seq 128] [--json]
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

import ascend_shim.sim as sim
from ascend_shim.sim import counters


def build(args) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(args.d_model, args.heads, 4 * args.d_model, dropout=0.1,
                                             batch_first=True, norm_first=True)
    return torch.nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)


def make_runner(model: torch.nn.Module, device: str, batch: torch.Tensor):
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = batch.to(device)

    def step():
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def time_steps(step, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    args = parser.parse_args()

    t0 = time.perf_counter()
    sim.install()
    install_s = time.perf_counter() - t0

    base = build(args)
    batch = torch.randn(args.batch, args.seq, args.d_model, generator=torch.Generator().manual_seed(1))
    runners = {"cpu": make_runner(copy.deepcopy(base), "cpu", batch),
               "npu": make_runner(copy.deepcopy(base), "npu", batch)}
    for step in runners.values():
        for _ in range(args.warmup):
            step()

    counters.reset()
    times: dict[str, list[float]] = {"cpu": [], "npu": []}
    for _ in range(args.rounds):
        for name, step in runners.items():
            times[name].append(time_steps(step, args.steps))
    d2h = counters.d2h_syncs()

    cpu, npu = statistics.median(times["cpu"]), statistics.median(times["npu"])
    result = {
        "model": f"TransformerEncoder layers={args.layers} d_model={args.d_model} heads={args.heads}",
        "batch": [args.batch, args.seq], "threads": torch.get_num_threads(), "install_s": round(install_s, 3),
        "cpu_step_ms": round(cpu * 1e3, 2), "sim_step_ms": round(npu * 1e3, 2), "ratio": round(npu / cpu, 3),
        "d2h_syncs_during_sim_steps": d2h,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['model']}, batch {args.batch}x{args.seq}, {result['threads']} threads, "
          f"fwd+bwd+AdamW, median of {args.rounds} rounds x {args.steps} steps")
    print(f"  sim.install(): {install_s:.2f} s")
    print(f"  cpu step: {result['cpu_step_ms']:8.2f} ms")
    print(f"  sim step: {result['sim_step_ms']:8.2f} ms")
    print(f"  ratio sim/cpu: {result['ratio']:.2f}x (target <= 3x); d2h syncs during sim steps: {d2h}")


if __name__ == "__main__":
    main()
