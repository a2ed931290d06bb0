"""The translating wrappers of torch's builtins stand in for them where programs hand them around: a factory is
pickled by reference as torch's own is (a spawned worker, a pickled config holding ``torch.zeros``), and
``torch.compile`` keeps a translated call in its graph when dynamo is first imported after activation."""
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch


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
