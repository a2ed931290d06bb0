"""Huawei's torch_npu Python under the shim prints nothing a CUDA run would not: no error-code line after a Python
traceback, no storage warning caused by its internals, no patch failures when ``import torch_npu`` comes first;
and a prepared package that cannot come up is one line naming the cause and the fix."""
import os
import shutil

import pytest

from ascend_shim.sim.real_layer import prepare

from .conftest import run_shim


def _write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def test_a_python_exception_ends_with_its_traceback_alone(prepared, tmp_path):
    script = _write(tmp_path, "failing.py", 'import torch\nx = torch.ones(2, device="cuda")\n'
                                            'raise ValueError("boom")\n')
    done = run_shim("real", "--log-level", "off", script)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("ValueError: boom"), done.stderr[-2000:]
    assert "ERR99999" not in done.stdout + done.stderr


class _Ctx:
    def __init__(self, original):
        self.original = original


def _handler(message, force_stop=False, pattern_attr="npu_exception"):
    from ascend_shim.targets.torch_npu.impl import NPU_ERROR

    handler = type("Handler", (), {})()
    handler.exception, handler.force_stop_flag = message, force_stop
    setattr(handler, pattern_attr, NPU_ERROR)
    return handler


def test_the_exit_handler_keeps_torch_npus_handling_of_npu_errors():
    from ascend_shim.targets.torch_npu.impl import quiet_exit_handler

    calls = []
    handle = quiet_exit_handler(_Ctx(lambda self: calls.append(self.exception)))
    handle(_handler("boom"))  # a Python exception: nothing
    assert calls == []
    npu_error = "call aclnnAdd failed\n[ERROR] 2026-01-01-00:00:00 (PID:7, Device:0, RankID:-1) ERR01100 OPS call acl"
    for handler in (_handler(npu_error), _handler(npu_error, pattern_attr="npu_except_pattern"),
                    _handler("boom", force_stop=True), _handler(None)):
        handle(handler)
    assert calls == [npu_error, npu_error, "boom", None]


_STORAGE = """
import torch, warnings
model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(2):
    model(torch.randn(2, 4, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
print(type(opt).__name__)
torch.ones(2).storage()  # the program's own: warns, as on CUDA
"""


def test_torch_npus_internal_storage_calls_do_not_warn(prepared, tmp_path):
    script = _write(tmp_path, "storage.py", _STORAGE)
    done = run_shim("real", "--enable", "fast_ops", "--log-level", "off", script,
                    env={"PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NpuFusedAdamW" in done.stdout  # whose step calls Tensor.storage()
    warned = [line for line in done.stderr.splitlines() if "Warning:" in line]
    assert len([w for w in warned if "TypedStorage is deprecated" in w]) == 1, warned
    assert warned and all(line.startswith(f"{script}:") for line in warned), warned  # nothing from torch_npu


def test_importing_torch_npu_first_applies_the_patches_once_it_is_attached(prepared, tmp_path):
    script = _write(tmp_path, "first.py", "import torch_npu\nimport torch\nimport ascend_shim\n"
                                          "print(torch.cuda.current_device(), "
                                          "ascend_shim.is_patched('torch.cuda.current_device'))\n"
                                          "print(type(torch_npu.__loader__).__name__)\n")
    done = run_shim("real", script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["0", "True", "SourceFileLoader"]
    assert "failed while applying" not in done.stderr and " 0 failed" in done.stderr, done.stderr[-3000:]


def _damage_missing(site):
    (site / "torch_npu" / "npu" / "utils.py").unlink()
    return "torch_npu/npu/utils.py is missing"


def _damage_writable(site):
    os.chmod(site / "torch_npu" / "npu", 0o775)
    return "torch_npu/npu is writable by others"


def _damage_same_size(site):
    """A change the check before import does not see (size kept): found when the import fails."""
    path = site / "torch_npu" / "npu" / "utils.py"
    size = path.stat().st_size
    body = b'raise RuntimeError("planted")\n'
    path.write_bytes(body + b"#" * (size - len(body) - 1) + b"\n")
    return "torch_npu/npu/utils.py has changed (RuntimeError: planted"


@pytest.mark.parametrize("damage, script, env", [
    (_damage_missing, "import torch\n", {}),
    (_damage_writable, "import torch\n", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    (_damage_same_size, "import torch_npu\n", {}),
], ids=["missing-file", "writable-dir-autoload-off", "changed-file-torch_npu-first"])
def test_a_prepared_package_that_cannot_come_up_is_one_line(prepared, tmp_path, damage, script, env):
    root = tmp_path / "cache"
    shutil.copytree(prepared, root / prepared.name, symlinks=True)
    said = damage(root / prepared.name / "site")
    done = run_shim("real", _write(tmp_path, "main.py", script + "print('ran')\n"),
                    env={"ASCEND_SHIM_TORCH_NPU_DIR": str(root), **env})
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1, lines
    assert lines[0].startswith("ascend_shim: ERROR: Huawei's torch_npu prepared in ") and said in lines[0], lines
    assert lines[0].endswith("Run `ascend-shim fetch-torch-npu` again"), lines
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD" not in lines[0]


def test_the_prepared_package_is_as_prepared(prepared):
    """What the check before each import and doctor's hashes compare with: this machine's prepared package."""
    import json

    meta = json.loads((prepared / "prepared.json").read_text())
    assert meta["format"] == prepare.FORMAT and meta["file_count"] == len(meta["files"]) > 1000
    assert prepare.check_files(prepared, meta) == []
