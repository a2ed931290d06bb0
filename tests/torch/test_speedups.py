"""The compiled fast paths (ascend_shim/_speedups.c) behave exactly as the pure-Python wrappers they front:
same results, same errors, same report, under threads, resets, pickling and torch.compile."""
import pickle
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import ascend_shim
from ascend_shim import speedups
from ascend_shim.report import REPORT

pytestmark = pytest.mark.skipif(not speedups.BUILT, reason="the C speedups are not built in this install")


def _calls():
    """Every shape of call the gates read, each returning what the program would see (or the error)."""
    x = torch.ones(2)
    other = torch.zeros(1, device="cuda")
    cases = {
        "zeros": lambda: torch.zeros(2),
        "zeros dtype": lambda: torch.zeros(2, dtype=torch.float16),
        "zeros cuda": lambda: torch.zeros(2, device="cuda"),
        "zeros cuda:0": lambda: torch.zeros(2, device="cuda:0"),
        "zeros device obj": lambda: torch.zeros(2, device=torch.device("cuda", 0)),
        "zeros int": lambda: torch.zeros(2, device=0),
        "zeros None": lambda: torch.zeros(2, device=None),
        "zeros cpu": lambda: torch.zeros(2, device="cpu"),
        "zeros npu": lambda: torch.zeros(2, device="npu"),
        "zeros bad": lambda: torch.zeros(2, device="cudax"),
        "full positional": lambda: torch.full((2,), 3.0, device="cuda"),
        "to cuda": lambda: x.to("cuda"),
        "to dtype": lambda: x.to(torch.float16),
        "to cuda dtype": lambda: x.to("cuda", torch.float16),
        "to device kw": lambda: x.to(device="cuda", dtype=torch.float64),
        "to both": lambda: x.to("cuda", device="cuda"),
        "to cpu": lambda: x.to("cpu"),
        "to int": lambda: x.to(0),
        "to tensor": lambda: x.to(other),
        "to bound": lambda: (lambda m: m("cuda"))(x.to),
        "to unbound": lambda: torch.Tensor.to(x, "cuda:0"),
        "to nothing": lambda: x.to(),
        "device": lambda: torch.device("cuda", 0),
        "device str": lambda: torch.device("cuda:0"),
        "device kw": lambda: torch.device(type="cuda", index=0),
    }
    seen = {}
    for name, call in cases.items():
        results = []
        for _ in range(3):  # the second and third calls at a site take the counting path
            try:
                out = call()
                results.append(repr((out.device, out.dtype, out.tolist())) if isinstance(out, torch.Tensor)
                               else repr(out))
            except Exception as error:  # noqa: BLE001 - the same error either way is the point
                results.append(f"{type(error).__name__}: {str(error).splitlines()[0]}")
        seen[name] = results
    return seen


def _run(monkeypatch, on: bool):
    monkeypatch.setenv("ASCEND_SHIM_SPEEDUPS", "1" if on else "0")
    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    try:
        kinds = (type(torch.zeros).__name__, type(torch.Tensor.__dict__["to"]).__name__)
        results = _calls()
        events = sorted((e["api"], e["detail"], e["line"], e["count"]) for e in REPORT.events())
    finally:
        ascend_shim.deactivate()
    return kinds, results, events


def test_the_compiled_and_the_python_paths_agree_on_results_errors_and_the_report(monkeypatch):
    import ascend_shim.sim

    ascend_shim.sim.install()
    compiled = _run(monkeypatch, on=True)
    python = _run(monkeypatch, on=False)
    assert compiled[0] == ("KeywordGate", "MethodGate") and python[0] == ("function", "function")
    assert compiled[1] == python[1]
    assert compiled[2] == python[2]
    translated = {(api, count) for api, _, _, count in compiled[2]}
    assert {("torch.zeros", 3), ("Tensor.to", 3), ("torch.device", 3), ("torch.full", 3)} <= translated
    assert type(torch.zeros).__name__ == "builtin_function_or_method"  # deactivation gave the builtin back


def test_a_reset_report_counts_again_from_the_first_call(clean_shim):
    clean_shim.activate(backend="sim", inherit=False, log_level="off")

    def at_one_site():
        return torch.device("cuda", 0), torch.zeros(1, device="cuda")

    for _ in range(4):
        at_one_site()
    REPORT.reset()
    for _ in range(2):
        at_one_site()
    counts = {e["api"]: e["count"] for e in REPORT.events() if e["api"] in ("torch.device", "torch.zeros")}
    assert counts == {"torch.device": 2, "torch.zeros": 2}


def test_threads_count_into_their_own_tables_and_nothing_is_lost(clean_shim):
    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    calls = 2000

    def work():
        for _ in range(calls):
            torch.device("cuda", 0)
            torch.zeros(1, device="cuda")

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = {e["api"]: e["count"] for e in REPORT.events() if e["api"] in ("torch.device", "torch.zeros")}
    assert counts == {"torch.device": 3 * calls, "torch.zeros": 3 * calls}


def test_a_gated_factory_pickles_by_reference(clean_shim):
    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    assert type(torch.zeros).__name__ == "KeywordGate"
    assert pickle.loads(pickle.dumps(torch.zeros)) is torch.zeros
    assert torch.zeros.__wrapped__.__name__ == "zeros" and torch.zeros.__name__ == "zeros"


def test_without_the_extension_the_python_wrappers_do_the_work(clean_shim, monkeypatch):
    monkeypatch.setattr(speedups, "BUILT", False)
    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    assert type(torch.zeros).__name__ == "function"
    assert torch.zeros(1, device="cuda").device.type == "npu"
    assert torch.device("cuda", 0).type == "npu"


_COMPILE_AFTER = """
import sys
import torch
import ascend_shim
ascend_shim.activate(backend="sim", inherit=False, log_level="off")
assert "torch._dynamo" not in sys.modules
from torch._dynamo.testing import CompileCounter

def f(x):
    return x + torch.zeros(2, device="cuda") + torch.ones(2, device=x.device).to("cuda")

counter = CompileCounter()
out = torch.compile(f, backend=counter, fullgraph=True)(torch.ones(2, device="cuda"))
print(type(torch.zeros).__name__, counter.frame_count, out.device, out.tolist())
"""


@pytest.mark.slow
def test_compile_traces_the_gates_when_dynamo_comes_after_activation(tmp_path):
    """A fresh process: dynamo imported after the gates exist, fullgraph (a graph break would raise)."""
    script = tmp_path / "compile_after.py"
    script.write_text(textwrap.dedent(_COMPILE_AFTER))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["KeywordGate", "1", "npu:0", "[2.0,", "2.0]"]


def test_compile_keeps_gated_calls_in_one_graph_in_process(clean_shim):
    """dynamo already imported before activation (this process), literal CUDA devices, fullgraph."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    clean_shim.activate(backend="sim", inherit=False, log_level="off")

    def f(x):
        return x + torch.zeros(2, device="cuda") + torch.empty_like(x).fill_(1).to("cuda", torch.float32)

    torch._dynamo.reset()
    counter = CompileCounter()
    try:
        out = torch.compile(f, backend=counter, fullgraph=True)(torch.ones(2, device="cuda"))
    finally:
        torch._dynamo.reset()
    assert type(torch.zeros).__name__ == "KeywordGate"
    assert counter.frame_count == 1
    assert (str(out.device), out.tolist()) == ("npu:0", [2.0, 2.0])
