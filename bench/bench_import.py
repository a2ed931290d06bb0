"""Start-up cost of the shim, side by side in one run: fresh interpreters, alternating, medians and ratios.

Rows (each "active" process is activated the way `run` activates its children: the bootstrap `sitecustomize`
on PYTHONPATH with ASCEND_SHIM=1):

* ``import torch`` and ``import torch, transformers``: active on the emulated NPU vs. a plain interpreter.
  "active" includes the bootstrap, activation, bringing up the emulated NPU and every patch whose target
  gets imported; the in-process import time and the whole interpreter's wall time are both shown. The emulated
  NPU's layer is the one a dry run gets (Huawei's torch_npu Python once ``fetch-torch-npu`` ran: its import,
  which an Ascend machine pays too, is in the active side), and a row with the emulator's own layer.
* a whole short program on the NPU: ``tiny.py`` written for CUDA (a model step on "cuda") run by
  ``python -m ascend_shim run --simulate`` vs. the same program hand-ported to "npu" that brings the emulator
  up itself (``ascend_shim.sim.install()``, what a port to the emulated NPU needs) -- the emulator's own cost is
  on both sides, so the ratio is what the shim adds.

Python's default bytecode caching is used in the children even when the caller set PYTHONDONTWRITEBYTECODE
(without it every process recompiles the shim's modules, a cost no installed package pays).

    python bench/bench_import.py [--runs 9]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOTSTRAP = os.path.join(ROOT, "ascend_shim", "bootstrap")
TINY = '''import torch
device = "{device}"
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(32, 64, device=device)
for _ in range(3):
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print(float(loss))
'''


def _env(active: bool, layer: str = "auto") -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ASCEND_SHIM") and k != "PYTHONDONTWRITEBYTECODE"}
    env["ASCEND_SHIM_LOG"] = "off"
    if active:
        env.update(ASCEND_SHIM="1", ASCEND_SHIM_BACKEND="sim", ASCEND_SHIM_SIM_LAYER=layer,
                   PYTHONPATH=os.pathsep.join(filter(None, [BOOTSTRAP, env.get("PYTHONPATH")])))
    return env


def _timed(argv, env) -> tuple[float, float]:
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    lines = out.stdout.strip().splitlines()
    try:
        inner = float(lines[-1])
    except (IndexError, ValueError):
        inner = wall
    return inner, wall


def import_sample(modules: str, active: bool, layer: str = "auto") -> tuple[float, float]:
    code = f"import time; t = time.perf_counter(); import {modules}; print(time.perf_counter() - t)"
    return _timed([sys.executable, "-c", code], _env(active, layer))


def program_sample(folder: str, shim: bool) -> tuple[float, float]:
    if shim:
        return _timed([sys.executable, "-m", "ascend_shim", "run", "--simulate", os.path.join(folder, "train_cuda.py")],
                      _env(False))
    return _timed([sys.executable, os.path.join(folder, "train_npu.py")], _env(False))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="bench_import_")
    with open(os.path.join(folder, "train_cuda.py"), "w") as f:
        f.write(TINY.format(device="cuda"))
    with open(os.path.join(folder, "train_npu.py"), "w") as f:
        f.write("import ascend_shim.sim\nascend_shim.sim.install()\n" + TINY.format(device="npu"))
    rows = {
        "import torch": lambda active: import_sample("torch", active),
        "import torch (builtin layer)": lambda active: import_sample("torch", active, "builtin"),
        "import torch, transformers": lambda active: import_sample("torch, transformers", active),
        "program on the NPU": lambda active: program_sample(folder, active),
    }
    for make in rows.values():  # warm caches (bytecode, the emulator's build)
        make(True), make(False)
    results = {name: {False: [], True: []} for name in rows}
    for _ in range(args.runs):
        for name, make in rows.items():
            for active in (False, True):
                results[name][active].append(make(active))
    print(f"{args.runs} alternating runs each, medians (inactive: plain interpreter; for the program: the same "
          "program hand-ported to npu)")
    for name in rows:
        off, on = results[name][False], results[name][True]
        for label, idx in (("in-process", 0), ("interpreter wall", 1)):
            if name == "program on the NPU" and idx == 0:
                continue
            a, b = statistics.median(r[idx] for r in off), statistics.median(r[idx] for r in on)
            print(f"  {name:28s} {label:17s} inactive {a * 1000:8.1f} ms   active {b * 1000:8.1f} ms   "
                  f"ratio {b / a:.3f}")


if __name__ == "__main__":
    main()
