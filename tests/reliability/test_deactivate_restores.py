"""deactivate() on the emulated NPU restores what the user had: no finder of the shim's, ``torch_npu`` not
importable where it was not installed, no library sees an NPU, ``Tensor.type`` and torch's storage classes
torch's own; the device stays registered (torch cannot unregister it) and tensors on it stay usable.

Under Huawei's torch_npu Python (the real layer) the imported torch_npu stays too, with what its import set up
(its own import finder, its typed storages and ``Tensor.type``), as README's Limitations state: libraries still
see an NPU in that process."""
import subprocess
import sys
import textwrap

from tests.conftest import LAYER

_SCRIPT = """
    import importlib, importlib.util, sys
    import torch
    import transformers.utils.import_utils as tf_utils
    import accelerate.utils.imports as acc_imports
    before_meta_path = list(sys.meta_path)
    original_type = torch.Tensor.type
    storages_before = set(torch._storage_classes)
    import ascend_shim

    ascend_shim.activate(backend="sim")
    import torch_npu
    x = torch.ones(3, device="npu")
    assert tf_utils.is_torch_npu_available() and acc_imports.is_npu_available()
    assert torch.Tensor.type is not original_type
    ascend_shim.deactivate()

    leftover = [f for f in sys.meta_path if f not in before_meta_path]
    print("leftover finders", leftover)
    print("finders left from", ",".join(sorted({type(f).__module__ for f in leftover})) or "-")
    print("torch_npu spec", importlib.util.find_spec("torch_npu"))
    try:
        importlib.import_module("torch_npu")
        print("torch_npu importable True")
    except ModuleNotFoundError:
        print("torch_npu importable False")
    print("transformers npu", tf_utils.is_torch_npu_available())
    print("accelerate npu", acc_imports.is_npu_available())
    print("Tensor.type restored", torch.Tensor.type is original_type)
    print("storages restored", set(torch._storage_classes) == storages_before)
    print("Tensor.type from", getattr(torch.Tensor.type, "__module__", None) or "torch")
    print("storages added from", ",".join(sorted({c.__module__ for c in set(torch._storage_classes) - storages_before}))
          or "-")
    print("tensor usable", (x * 2).cpu().tolist())
    ascend_shim.activate(backend="sim")  # the layer comes back
    import torch_npu as again
    print("reactivated", again.npu is torch.npu, tf_utils.is_torch_npu_available())
"""


def test_deactivate_restores_imports_probes_and_tensor_type(tmp_path):
    script = tmp_path / "deactivate.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.rsplit(" ", 1) if " " in line else (line, "") for line in done.stdout.splitlines()
                 if not line.startswith(("leftover", "tensor usable", "torch_npu spec")))
    out = done.stdout
    if LAYER == "builtin":
        assert "leftover finders []" in out
        assert "torch_npu spec None" in out
        assert lines["torch_npu importable"] == "False"
        assert lines["transformers npu"] == "False"
        assert lines["accelerate npu"] == "False"
        assert lines["Tensor.type restored"] == "True"
        assert lines["storages restored"] == "True"
    else:  # the shim's finders are gone; Huawei's torch_npu stays imported, with its own finder and device classes
        assert lines["finders left from"] == "torch_npu.utils._dynamo", out
        assert "torch_npu spec ModuleSpec(name='torch_npu'" in out and "/site/torch_npu/__init__.py" in out
        assert lines["torch_npu importable"] == "True"
        assert lines["transformers npu"] == "True"
        assert lines["accelerate npu"] == "True"
        # torch_npu's C++ puts them there (the emulator's device core stands in for it); the shim's patches are gone
        assert lines["Tensor.type from"] == "ascend_shim.sim.tensor_types"
        assert lines["storages added from"] == "torch.npu,torch_npu.npu"  # its C++'s and its Python's
    assert "tensor usable [2.0, 2.0, 2.0]" in out
    assert "reactivated True True" in out
