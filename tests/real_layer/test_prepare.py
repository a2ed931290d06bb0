"""``fetch-torch-npu``: what a prepared package holds (Huawei's Python, no native code), the yaml it reads, and that
nothing outside the shim sees it."""
import hashlib
import json
import os
import stat
import subprocess
import sys
import zipfile

import pytest

from ascend_shim.errors import ConfigError
from ascend_shim.sim.real_layer import loader, prepare

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


def _torch_release() -> str:
    """The torch release a prepared torch-npu must be built for: the installed torch's."""
    from ascend_shim.versions import base, installed_version

    return base(installed_version("torch"))


def _wheel(path, version=None):
    version = version or _torch_release()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("torch_npu/__init__.py", "")
        zf.writestr("torch_npu/version.py", f"__version__ = '{version}'\n")
        zf.writestr("torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml", _YAML)
        zf.writestr("torch_npu/_C.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
        zf.writestr("torch_npu/lib/libtorch_npu.so", b"\x7fELF")
        zf.writestr("torch_npu/lib/libop_plugin_atb.so", b"\x7fELF")
        zf.writestr("torch_npu/include/npu.h", "")
        zf.writestr("torch_npu.libs/libhccl.so.1", b"\x7fELF")
        zf.writestr("torchnpugen/aoti/fallback_ops.py", "inductor_fallback_ops_npu = {}\n")
        zf.writestr(f"torch_npu-{version}.dist-info/METADATA", f"Name: torch-npu\nVersion: {version}\n")
    return path


def test_a_prepared_wheel_keeps_the_python_and_leaves_out_native_code(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    release = _torch_release()
    where = prepare.prepare(_wheel(tmp_path / f"torch_npu-{release}-py3-none-any.whl"))
    assert where == tmp_path / "cache" / release
    site = where / "site"
    kept = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert kept == [f"torch_npu-{release}.dist-info/METADATA", "torch_npu/__init__.py",
                    "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml", "torch_npu/lib/libop_plugin_atb.so",
                    "torch_npu/version.py", "torchnpugen/aoti/fallback_ops.py"]  # the inductor backend imports it
    assert (site / "torch_npu/lib/libop_plugin_atb.so").stat().st_size == 0  # a placeholder, never loadable
    meta = json.loads((where / "prepared.json").read_text())
    assert meta["torch_npu"] == release and meta["native_left_out"] == 5
    assert meta["npu_schemas"] == ["npu_change_data_ptr(Tensor dst, Tensor src, int index) -> int",
                                   "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)"]
    assert meta["aten_kernels"] == ["_thnn_fused_gru_cell", "add.Tensor", "as_strided_", "clone", "npu_rms_norm"]
    assert (where / "cann" / "opp").is_dir()
    assert "version=" in (where / "cann" / "ascend_toolkit_install.info").read_text()
    assert loader.find_prepared() == where


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
            "print(importlib.util.find_spec('torch_npu'), importlib.util.find_spec('torchnpugen'),\n"
            "      hasattr(torch, 'npu'),\n"
            "      [d.metadata['Name'] for d in importlib.metadata.distributions() if 'npu' in d.metadata['Name']])")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None", "False", "[]"]
    # an activated process finds both of the wheel's packages there (torch_npu's inductor imports torchnpugen)
    code = ("import ascend_shim; ascend_shim.activate('sim')\n"
            "import torchnpugen.aoti.fallback_ops as f; print(f.__file__)")
    done = subprocess.run([sys.executable, "-c", code], env=dict(env, ASCEND_SHIM_SIM_LAYER="real"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(str(prepared / "site" / "torchnpugen")), done.stdout


def test_activation_on_a_package_no_longer_prepared_says_so(monkeypatch):
    """The layer was chosen while the package was prepared; removed before activation put it in place."""
    from ascend_shim import backend
    from ascend_shim.sim import real_layer

    before = loader.enabled_site()  # the real lane's own, or none
    monkeypatch.setattr(real_layer, "find_prepared", lambda version=None: None)
    with pytest.raises(ConfigError, match="no longer prepared; run `python -m ascend_shim fetch-torch-npu`"):
        backend.prepare("sim", "real")
    assert loader.enabled_site() == before  # nothing put in place


def test_prepare_records_every_file_and_sets_its_modes_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    old = os.umask(0o002)  # a group-writable default (as on shared machines)
    try:
        where = prepare.prepare(_wheel(tmp_path / "w.whl"))
    finally:
        os.umask(old)
    meta = json.loads((where / "prepared.json").read_text())
    site = where / "site"
    files = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert sorted(meta["files"]) == files and meta["file_count"] == len(files) == 6
    for name, record in meta["files"].items():
        data = (site / name).read_bytes()
        assert record == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert list((site / "torch_npu" / "__pycache__").glob("version.*.pyc"))  # compiled, as pip does on install
    for path in [where, *where.rglob("*")]:
        assert stat.S_IMODE(path.stat().st_mode) == (0o755 if path.is_dir() else 0o644), path
    assert prepare.check_files(where, meta) == [] and prepare.check_files(where, meta, full=True) == []
    loader._check_safe(where)  # what enable() refuses: nothing


def test_check_files_names_what_changed_since_it_was_prepared(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    where = prepare.prepare(_wheel(tmp_path / "w.whl"))
    meta = json.loads((where / "prepared.json").read_text())
    site = where / "site" / "torch_npu"
    (site / "__init__.py").unlink()
    (site / "version.py").write_text((site / "version.py").read_text().replace("'", '"'))  # same size
    (site / "planted.py").write_text("")
    (site / "notes.txt").write_text("")  # not importable: not a problem
    os.chmod(site / "lib", 0o777)
    quick = ["torch_npu/lib is writable by others (mode 0o777)", "torch_npu/__init__.py is missing",
             "torch_npu/planted.py is not part of the package"]
    assert prepare.check_files(where, meta) == quick
    assert prepare.check_files(where, meta, full=True) == quick + ["torch_npu/version.py has changed"]


def test_a_directory_others_can_write_deep_in_the_package_is_named(tmp_path, monkeypatch):
    """Every directory of the package is judged, however deep: code is imported from any of them."""
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    where = prepare.prepare(_wheel(tmp_path / "w.whl"))
    meta = json.loads((where / "prepared.json").read_text())
    deep = where / "site" / "torch_npu" / "csrc" / "aten"
    os.chmod(deep, 0o777)
    os.chmod(deep.parent, 0o775)
    assert prepare.check_files(where, meta) == ["torch_npu/csrc is writable by others (mode 0o775)",
                                                "torch_npu/csrc/aten is writable by others (mode 0o777)"]


def test_a_package_prepared_by_an_older_shim_is_prepared_again_with_a_clear_message(tmp_path, monkeypatch, capsys):
    from ascend_shim import backend
    from ascend_shim.versions import base, installed_version

    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    version = base(installed_version("torch"))
    where = prepare.prepare(_wheel(tmp_path / "w.whl", version))
    meta = json.loads((where / "prepared.json").read_text())
    (where / "prepared.json").write_text(json.dumps({**meta, "format": prepare.FORMAT - 1}))
    assert loader.find_prepared() is None
    _, kind, why = loader.prepared_state()
    assert kind == "stale" and f"prepared by an older version of ascend_shim (format {prepare.FORMAT - 1}" in why
    with pytest.raises(ConfigError, match="older version of ascend_shim .*; run `python -m ascend_shim fetch-torch-"):
        backend.resolve_layer("sim", "real")
    assert backend.resolve_layer("sim", "auto") == "builtin"
    capsys.readouterr()
    assert prepare.prepare(_wheel(tmp_path / "w.whl", version)) == where
    assert "replacing" in capsys.readouterr().err and loader.find_prepared() == where
