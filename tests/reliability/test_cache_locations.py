"""A relative ``ASCEND_SHIM_SIM_BUILD_DIR`` or ``ASCEND_SHIM_TORCH_NPU_DIR`` names one directory for the whole run:
the one under the directory the run started in, whatever directory the program (Hydra) or a worker later runs
in, not a second cache per working directory."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_shim import build_cache, config
from ascend_shim.sim.real_layer import prepare

from tests.subprocess_env import shim_free_env

REPO = Path(__file__).resolve().parents[2]
_SETTINGS = {"sim_build_dir": "ASCEND_SHIM_SIM_BUILD_DIR", "torch_npu_dir": "ASCEND_SHIM_TORCH_NPU_DIR"}


@pytest.mark.parametrize("field", sorted(_SETTINGS))
def test_a_relative_location_is_made_absolute_when_it_is_read(field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    variable = _SETTINGS[field]
    assert config.setting(field, {variable: "caches/here"}) == str(tmp_path / "caches" / "here")
    assert config.setting(field, {variable: "~/c"}) == os.path.join(os.path.expanduser("~"), "c")
    assert config.setting(field, {variable: ""}) == ""  # unset: the default under the home directory
    exported = config.Config.from_env({variable: "caches/here"}).to_env()  # what a child process is given
    assert exported[variable] == str(tmp_path / "caches" / "here")


_PROGRAM = """
import os, subprocess, sys
os.chdir("elsewhere")  # as Hydra does
from ascend_shim import build_cache
from ascend_shim.sim.real_layer import prepare
print(build_cache.cache_root())
print(prepare.torch_npu_root())
child = "import os; print(os.environ['ASCEND_SHIM_SIM_BUILD_DIR']); print(os.environ['ASCEND_SHIM_TORCH_NPU_DIR'])"
sys.stdout.flush()
subprocess.run([sys.executable, "-c", child], check=True)
"""


def test_a_program_that_changes_directory_and_its_children_use_the_run_s_caches(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    script = tmp_path / "main.py"
    script.write_text(_PROGRAM)
    env = {**shim_free_env(), "PYTHONPATH": str(REPO), "ASCEND_SHIM_SIM_LAYER": "builtin", "ASCEND_SHIM_LOG": "off",
           "ASCEND_SHIM_SIM_BUILD_DIR": "sim-cache", "ASCEND_SHIM_TORCH_NPU_DIR": "npu-cache"}
    done = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    expected = [str(tmp_path / "sim-cache"), str(tmp_path / "npu-cache")]
    assert done.stdout.split() == expected * 2, done.stdout


def test_the_readers_agree_with_the_setting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASCEND_SHIM_SIM_BUILD_DIR", "sim-cache")
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", "npu-cache")
    assert build_cache.cache_root() == tmp_path / "sim-cache"
    assert prepare.torch_npu_root() == tmp_path / "npu-cache"
