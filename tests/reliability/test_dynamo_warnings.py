"""torch.compile on the emulated NPU: no warning a user sees names the emulator's internals, and dynamo's graphs
are what they were (it no longer traces into the emulator, which only ever ended in a graph break)."""
import os
import subprocess
import sys
import textwrap

from tests.subprocess_env import shim_free_env

SCRIPT = textwrap.dedent("""\
    import warnings
    import torch, torch.nn as nn
    from torch._dynamo.utils import counters

    warnings.simplefilter("always")

    @torch.compile
    def bookkeeping(x):
        torch.cuda.manual_seed(1)
        used = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return x + (used > 0)

    print("bookkeeping", bookkeeping(torch.ones(2, device="cuda")).tolist())
    counters.clear()

    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).cuda()

    @torch.compile
    def step(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x)
        if torch.cuda.is_available() and x.device.type == "cuda":
            y = y * torch.cuda.device_count()
        return y.float().sum() + torch.zeros(1, device="cuda") + torch.cuda.current_device()

    for n in (8, 9):
        step(torch.randn(n, 16, device="cuda")).backward()
    print("graph breaks", dict(counters["graph_break"]))
    """)


def test_compiled_code_calling_the_device_runtime_warns_with_no_shim_internal_name(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    env = shim_free_env()
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--log-level", "off",
                           "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "bookkeeping [2.0, 2.0]" in proc.stdout
    assert "graph breaks {}" in proc.stdout  # a training step compiles to whole graphs, as before
    for internal in ("_ascend_shim", "pybind11", "ascend_shim"):
        assert internal not in proc.stderr, proc.stderr[-4000:]


def test_the_skip_is_given_back(clean_shim):
    import torch._dynamo  # noqa: F401
    from torch._dynamo import trace_rules

    from ascend_shim.sim import dynamo

    skip_dirs = list(trace_rules.SKIP_DIRS)
    undo = dynamo.register(trace_rules)
    assert trace_rules.check_file(os.path.join(dynamo.EMULATOR_DIR, "ops", "x.py")).skipped
    undo()
    assert skip_dirs == trace_rules.SKIP_DIRS
    assert not trace_rules.check_file(os.path.join(dynamo.EMULATOR_DIR, "ops", "x.py")).skipped
