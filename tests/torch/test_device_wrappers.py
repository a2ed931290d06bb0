"""The translating wrappers of torch's builtins stand in for them where programs hand them around: a factory is
pickled by reference as torch's own is (a spawned worker, a pickled config holding ``torch.zeros``), and
``torch.compile`` keeps a translated call in its graph when dynamo is first imported after activation."""
import _thread
import json
import pickle
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from ascend_shim.targets._shared.device_wrappers import translate_device
from ascend_shim.report import REPORT

from tests.subprocess_env import shim_free_env


def test_a_translating_factory_pickles_by_reference(clean_shim):
    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    for factory in (torch.zeros, torch.full, torch.tensor, torch.empty_like):
        assert factory.__wrapped__.__name__ == factory.__name__
        assert pickle.loads(pickle.dumps(factory)) is factory
    clean_shim.deactivate()
    assert pickle.loads(pickle.dumps(torch.zeros)) is torch.zeros  # torch's own again


_COMPILE_AFTER = """
import sys
import torch
import ascend_shim
ascend_shim.activate(backend="sim", inherit=False, log_level="off")
assert "torch._dynamo" not in sys.modules
from torch._dynamo.testing import CompileCounter

def f(x):
    return x + torch.zeros(2, device="cuda") + torch.ones(2, device=x.device).to("cuda", torch.float32)

counter = CompileCounter()
out = torch.compile(f, backend=counter, fullgraph=True)(torch.ones(2, device="cuda"))
print(counter.frame_count, out.device, out.tolist())
"""


@pytest.mark.slow
def test_compile_keeps_translated_calls_in_one_graph_when_dynamo_comes_after_activation(tmp_path):
    """A fresh process: dynamo imported after the wrappers are installed, fullgraph (a graph break would raise)."""
    script = tmp_path / "compile_after.py"
    script.write_text(textwrap.dedent(_COMPILE_AFTER))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1", "npu:0", "[2.0,", "2.0]"]


def test_a_wrapper_called_with_no_python_caller_makes_the_call_and_reports_an_unknown_site():
    """Straight from C (a thread ``_thread`` starts; atexit, a C extension's callback): no frame above the wrapper."""
    got, done = [], threading.Event()

    def factory(n, *, device=None):
        got.append((n, device))
        done.set()

    wrapper = translate_device(factory, "shimtest.factory")
    REPORT.reset()
    _thread.start_new_thread(wrapper, (1,), {"device": "cuda:1"})
    assert done.wait(30), "the call never happened"
    assert got == [(1, "npu:1")]
    sites = [(e["file"], e["line"]) for e in REPORT.events() if e["api"] == "shimtest.factory"]
    assert sites == [("<unknown>", 0)]


_FROM_C = '''
import _thread, atexit, functools, itertools
import torch


def from_c(fn, *args, **kwargs):
    """Call fn in a new thread where only C code calls it (no Python frame above it): [its result], or []."""
    results, done = [], _thread.allocate_lock()
    done.acquire()
    calls = itertools.chain(itertools.starmap(functools.partial(fn, **kwargs), [args]),
                            itertools.starmap(done.release, [()]))
    _thread.start_new_thread(results.extend, (calls,))
    done.acquire(timeout=20)
    return results[:1]


print("from C:", from_c(torch.cuda.is_available), [t.device.type for t in from_c(torch.zeros, 2, device="cuda")])
atexit.register(print, "atexit ran")
atexit.register(torch.ones, 1, device="cuda")  # runs first, called by the interpreter's exit
'''


@pytest.mark.slow
def test_patched_functions_called_from_c_run_as_the_users(tmp_path):
    (tmp_path / "from_c.py").write_text(_FROM_C)
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", "r.json",
                           "from_c.py"], cwd=tmp_path, env=shim_free_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[:2] == ["from C: [True] ['npu']", "atexit ran"], proc.stdout
    events = json.loads((tmp_path / "r.json").read_text())["events"]
    unknown = {e["api"] for e in events if e["file"] == "<unknown>"}
    assert {"torch.ones", "torch.zeros"} <= unknown, events
