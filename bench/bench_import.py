"""Import time of `import torch, transformers` with the shim active vs. inactive, side by side.

Each sample is a fresh interpreter; samples alternate between the two variants so machine noise hits both
alike; the medians and their ratio are printed (aim: under 1.05). The active variant includes everything the
shim does at start-up: the bootstrap sitecustomize, activation, bringing up the backend and applying every
patch set whose target gets imported.

    python bench/bench_import.py [--runs 9] [--backend sim] [--modules torch,transformers]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

BOOTSTRAP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ascend_shim", "bootstrap")


def sample(modules, active, backend):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    if active:
        env.update(ASCEND_SHIM="1", ASCEND_SHIM_BACKEND=backend, ASCEND_SHIM_LOG="off",
                   PYTHONPATH=os.pathsep.join(filter(None, [BOOTSTRAP, env.get("PYTHONPATH")])))
    code = f"import time; t = time.perf_counter(); import {modules}; print(time.perf_counter() - t)"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    return float(out.stdout.strip().splitlines()[-1]), wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--backend", default="sim")
    ap.add_argument("--modules", default="torch,transformers")
    args = ap.parse_args()
    modules = ", ".join(args.modules.split(","))
    sample(modules, True, args.backend)  # warm caches (and build the emulator once)
    sample(modules, False, args.backend)
    results = {False: [], True: []}
    for _ in range(args.runs):
        for active in (False, True):
            results[active].append(sample(modules, active, args.backend))
    for label, key, idx in (("import (in-process)", "import", 0), ("interpreter wall", "wall", 1)):
        off = statistics.median(r[idx] for r in results[False])
        on = statistics.median(r[idx] for r in results[True])
        print(f"{label:22s} inactive {off * 1000:8.1f} ms   active ({args.backend}) {on * 1000:8.1f} ms   "
              f"ratio {on / off:.3f}")


if __name__ == "__main__":
    main()
