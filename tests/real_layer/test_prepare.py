"""``fetch-torch-npu``: what a prepared package holds (Huawei's Python, no native code), the yaml it reads, and that
nothing outside the shim sees it."""
import json
import os
import subprocess
import sys
import zipfile

import pytest

from ascend_shim.errors import ConfigError
from ascend_shim.real_layer import loader, prepare

_YAML = """backend: NPU
cpp_namespace: at_npu::native
supported:
- add.Tensor
- func: clone
  op_api: true
autograd:
- func: _thnn_fused_gru_cell(Tensor input_gates) -> (Tensor, Tensor)
custom:
- device_check: NoCheck
  func: npu_change_data_ptr(Tensor dst, Tensor src, int index) -> int
- func: npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)
symint:
- as_strided_
- func: npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)
"""


def _wheel(path, version="9.9.0"):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("torch_npu/__init__.py", "")
        zf.writestr("torch_npu/version.py", f"__version__ = '{version}'\n")
        zf.writestr("torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml", _YAML)
        zf.writestr("torch_npu/_C.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
        zf.writestr("torch_npu/lib/libtorch_npu.so", b"\x7fELF")
        zf.writestr("torch_npu/lib/libop_plugin_atb.so", b"\x7fELF")
        zf.writestr("torch_npu/include/npu.h", "")
        zf.writestr("torch_npu.libs/libhccl.so.1", b"\x7fELF")
        zf.writestr(f"torch_npu-{version}.dist-info/METADATA", f"Name: torch-npu\nVersion: {version}\n")
    return path


def test_a_prepared_wheel_keeps_the_python_and_leaves_out_native_code(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    where = prepare.prepare(_wheel(tmp_path / "torch_npu-9.9.0-py3-none-any.whl"))
    assert where == tmp_path / "cache" / "9.9.0"
    site = where / "site"
    kept = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert kept == ["torch_npu-9.9.0.dist-info/METADATA", "torch_npu/__init__.py",
                    "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml", "torch_npu/lib/libop_plugin_atb.so",
                    "torch_npu/version.py"]
    assert (site / "torch_npu/lib/libop_plugin_atb.so").stat().st_size == 0  # a placeholder, never loadable
    meta = json.loads((where / "prepared.json").read_text())
    assert meta["torch_npu"] == "9.9.0" and meta["native_left_out"] == 5
    assert meta["npu_schemas"] == ["npu_change_data_ptr(Tensor dst, Tensor src, int index) -> int",
                                   "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)"]
    assert meta["aten_kernels"] == ["_thnn_fused_gru_cell", "add.Tensor", "as_strided_", "clone", "npu_rms_norm"]
    assert (where / "cann" / "opp").is_dir()
    assert "version=" in (where / "cann" / "ascend_toolkit_install.info").read_text()
    assert loader.find_prepared("9.9.0") == where


def test_prepare_refuses_what_is_not_a_torch_npu_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    (tmp_path / "junk.whl").write_text("not a zip")
    with pytest.raises(ConfigError, match="not a wheel"):
        prepare.prepare(tmp_path / "junk.whl")
    with pytest.raises(ConfigError, match="no such file"):
        prepare.prepare(tmp_path / "missing.whl")


def test_a_prepared_package_others_can_write_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    where = prepare.prepare(_wheel(tmp_path / "w.whl"))
    os.chmod(where / "site" / "torch_npu", 0o777)
    before = loader.enabled_site()  # the real-layer lane has enabled the prepared package at start-up
    with pytest.raises(ConfigError, match="not safe to import from"):
        loader.enable(where)
    assert loader.enabled_site() == before != str(where / "site")


def test_the_yaml_reader_reads_the_wheels_yaml_as_yaml_does(prepared):
    yaml = pytest.importorskip("yaml")
    for path in (prepared / "site" / "torch_npu" / "csrc" / "aten").glob("*.yaml"):
        text = path.read_text()
        ours = prepare.read_yaml_functions(text)
        theirs = {key: [item if isinstance(item, str) else item["func"] for item in value]
                  for key, value in yaml.safe_load(text).items() if isinstance(value, list)}
        assert ours == theirs, path.name


def test_a_plain_python_never_sees_the_prepared_package(prepared):
    code = ("import importlib.util, importlib.metadata, torch\n"
            "print(importlib.util.find_spec('torch_npu'), hasattr(torch, 'npu'),\n"
            "      [d.metadata['Name'] for d in importlib.metadata.distributions() if 'npu' in d.metadata['Name']])")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "False", "[]"]


def test_activation_on_a_package_no_longer_prepared_says_so(monkeypatch):
    """The layer was chosen while the package was prepared; removed before activation put it in place."""
    from ascend_shim import backend, real_layer

    monkeypatch.setattr(real_layer, "find_prepared", lambda version=None: None)
    with pytest.raises(ConfigError, match="no longer prepared; run `python -m ascend_shim fetch-torch-npu`"):
        backend.prepare("sim", "real")
    assert loader.enabled_site() is None
