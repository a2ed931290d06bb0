"""Per-call cost of torch calls with the shim active vs. inactive, side by side in one process.

Two groups, each printed as a ratio of medians over interleaved rounds:
* calls the shim must not slow (`torch.zeros(8)`, `x.to(torch.float16)`, `x.add_(1)`): active / inactive,
  aim under 1.10x;
* translated calls (`torch.zeros(8, device="cuda")`, `x.to("cuda")`) under the shim vs. the hand-ported call
  with "npu" as a hand port runs it, without the shim (only the emulator up): aim under 1 us added per call
  (what that is in a step: bench_decode_rollout.py). The hand-ported call under the shim is printed too.

    python bench/bench_calls.py [--rounds 7] [--number 20000]
"""
import argparse
import os
import statistics
import timeit

import torch

import ascend_shim
import ascend_shim.sim

CASES_UNSLOWED = {
    "torch.zeros(8)": "torch.zeros(8)",
    "torch.zeros(8, dtype=float16)": "torch.zeros(8, dtype=torch.float16)",
    "x.to(torch.float16)": "x.to(torch.float16)",
    "x.add_(1)": "x.add_(1)",
}
CASES_TRANSLATED = {
    'torch.zeros(8, device="cuda")': ('torch.zeros(8, device="cuda")', 'torch.zeros(8, device="npu")'),
    'x.to("cuda")': ('c.to("cuda")', 'c.to("npu")'),
    'x.cuda()': ('c.cuda()', 'c.npu()'),
    'torch.device("cuda", 0)': ('torch.device("cuda", 0)', 'torch.device("npu", 0)'),
}


def per_call(stmt, env, number):
    return timeit.timeit(stmt, globals=env, number=number) / number * 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args()
    # the hand port's side needs torch.npu without the shim: the emulator's builtin torch_npu layer, and the shim
    # activated on that same layer (it cannot switch to Huawei's torch_npu once the builtin one is registered)
    os.environ["ASCEND_SHIM_SIM_LAYER"] = "builtin"
    ascend_shim.sim.install()
    env = {"torch": torch, "x": torch.ones(8), "c": torch.ones(8)}
    inactive = {k: [] for k in CASES_UNSLOWED}
    active = {k: [] for k in CASES_UNSLOWED}
    translated = {k: ([], [], []) for k in CASES_TRANSLATED}  # shim, hand port alone, hand port under the shim
    for _ in range(args.rounds):
        for name, stmt in CASES_UNSLOWED.items():
            inactive[name].append(per_call(stmt, env, args.number))
        for name, (_, npu_stmt) in CASES_TRANSLATED.items():
            translated[name][1].append(per_call(npu_stmt, env, args.number // 4))
        ascend_shim.activate(backend="sim", inherit=False, log_level="off")
        for name, stmt in CASES_UNSLOWED.items():
            active[name].append(per_call(stmt, env, args.number))
        for name, (cuda_stmt, npu_stmt) in CASES_TRANSLATED.items():
            translated[name][0].append(per_call(cuda_stmt, env, args.number // 4))
            translated[name][2].append(per_call(npu_stmt, env, args.number // 4))
        ascend_shim.deactivate()
    print("calls the shim must not slow (ns per call, median):")
    for name in CASES_UNSLOWED:
        off, on = statistics.median(inactive[name]), statistics.median(active[name])
        print(f"  {name:32s} inactive {off:8.0f}  active {on:8.0f}  ratio {on / off:.3f}")
    print('translated calls vs. the hand-ported "npu" call without the shim (ns per call, median; last column: '
          'the "npu" call under the shim):')
    for name, (cuda_t, npu_t, npu_shim_t) in translated.items():
        a, b, c = (statistics.median(t) for t in (cuda_t, npu_t, npu_shim_t))
        print(f"  {name:32s} hand-port {b:8.0f}  shim {a:8.0f}  ratio {a / b:.3f}   (npu under the shim {c:6.0f})")


if __name__ == "__main__":
    main()
