"""Per-call cost of the emulated NPU's operator-coverage check, side by side in one process.

Each case runs on npu tensors with the coverage check installed (the NPU's kernel list, as under ``--simulate``)
and uninstalled, alternating in short rounds (the order flips every round); printed: ns per call (median over the
rounds) and the median of the per-round ratios, which adjacent rounds keep robust to a loaded machine. Time is
this thread's CPU time, which other processes on the machine do not add to. The noise floor is the same ratio
between two unchecked series (A/A). Cases: small
ops with NPU kernels through the emulator's fallback (``x.add_(1)``, ``x + y``, ``x.mul(2.0)``, ``torch.mm``) and
an NPU kernel the emulator runs as torch's decomposition, marked as one kernel (``torch._weight_norm``, the
kernel behind ``nn.utils.weight_norm``). One intra-op thread: CPU time then counts all the work.
Aim: ratios within noise (under 1.03).

    python bench/bench_op_coverage.py [--rounds 40] [--number 2000]
"""
import argparse
import statistics
import time
import timeit

import torch

import ascend_shim.sim as sim
from ascend_shim.sim import op_coverage

CASES = {
    "x.add_(1)": "x.add_(1)",
    "x + y": "x + y",
    "x.mul(2.0)": "x.mul(2.0)",
    "torch.mm(a, b)": "torch.mm(a, b)",
    "torch._weight_norm(v, g)": "torch._weight_norm(v, g)",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--number", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    sim.install()
    if not op_coverage.install_builtin():
        raise SystemExit(f"no NPU kernel list is shipped for torch {torch.__version__}")
    a = torch.randn(8, 8, device="npu")
    env = {"torch": torch, "x": torch.zeros(8, device="npu"), "y": torch.ones(8, device="npu"), "a": a,
           "b": torch.randn(8, 8, device="npu"), "v": a, "g": torch.ones(8, 1, device="npu")}
    timings = {name: {"off": [], "on": [], "off again": []} for name in CASES}
    for round_ in range(args.rounds):
        for state in (("off", "on", "off again") if round_ % 2 else ("on", "off again", "off")):
            if state == "on":
                op_coverage.install_builtin()
            else:
                op_coverage.uninstall()
            for name, stmt in CASES.items():
                timer = timeit.Timer(stmt, timer=time.thread_time, globals=env)
                timer.timeit(args.number // 10)  # warm up
                per_call = timer.timeit(args.number) / args.number * 1e9
                timings[name][state].append(per_call)
    op_coverage.install_builtin()
    print(f"operator-coverage check (ns of CPU time per call, median of {args.rounds} rounds of {args.number}; "
          "ratio: median of the per-round ratios):")
    for name, t in timings.items():
        off, on = statistics.median(t["off"]), statistics.median(t["on"])
        ratio = statistics.median(b / a for a, b in zip(t["off"], t["on"], strict=True))
        floor = statistics.median(b / a for a, b in zip(t["off"], t["off again"], strict=True))
        print(f"  {name:28s} unchecked {off:8.0f}  checked {on:8.0f}  ratio {ratio:.3f}  (A/A {floor:.3f})")

if __name__ == "__main__":
    main()
