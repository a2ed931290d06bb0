"""Report files: readable by their owner only (they hold the command line, tokens included), and written where
the run was told when it started, whatever directory the program changes to (Hydra changes it) -- in the
process itself and in every child."""
import json
import os
import stat
import subprocess
import sys

import pytest

from ascend_shim.config import Config
from ascend_shim.report import Report

from tests.subprocess_env import shim_free_env


@pytest.fixture
def root_process(monkeypatch):
    """The report goes to the path itself (no rank or pid in its name)."""
    for var in ("RANK", "ASCEND_SHIM_ROOT_PID"):
        monkeypatch.delenv(var, raising=False)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_report_is_readable_by_its_owner_only(tmp_path, root_process):
    old = os.umask(0o022)  # the usual umask gave 0o644: every local user could read the argv
    try:
        rep = Report()
        target = rep.write_json(str(tmp_path / "r.json"))
        assert _mode(target) == 0o600
        os.chmod(target, 0o644)  # an older, world-readable report is replaced by a private one
        rep.write_json(str(target))
        assert _mode(target) == 0o600
    finally:
        os.umask(old)
    assert json.loads(target.read_text())["process"]["argv"] == sys.argv


def test_a_relative_report_path_is_made_absolute_when_the_settings_are_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    want = str(tmp_path / "r.json")
    assert Config.from_env({"ASCEND_SHIM_REPORT": "r.json"}).report == want
    assert Config.from_env({}, report="r.json").report == want
    assert Config.from_env({}, report=tmp_path.relative_to(tmp_path) / "r.json").report == want
    assert Config.from_env({}, report="r.json").to_env()["ASCEND_SHIM_REPORT"] == want  # what children inherit
    assert Config.from_env({}).report == ""  # no report stays no report


CHDIR_SCRIPT = '''\
import os, subprocess, sys
import torch
x = torch.zeros(2, device="cuda")
os.makedirs("elsewhere", exist_ok=True)
os.chdir("elsewhere")  # as Hydra does
subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='cuda')"], check=True)
print("child env", os.environ["ASCEND_SHIM_REPORT"])
'''


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--report", "ASCEND_SHIM_REPORT"])
def test_the_report_lands_where_the_run_started_after_a_chdir(tmp_path, how):
    (tmp_path / "train.py").write_text(CHDIR_SCRIPT)
    env = shim_free_env()
    args = [sys.executable, "-m", "ascend_shim", "run", "--simulate"]
    if how == "--report":
        args += ["--report", "r.json"]
    else:
        env["ASCEND_SHIM_REPORT"] = "r.json"
    proc = subprocess.run([*args, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"child env {tmp_path / 'r.json'}" in proc.stdout
    assert not (tmp_path / "elsewhere" / "r.json").exists()
    assert not [p.name for p in (tmp_path / "elsewhere").iterdir() if p.suffix == ".json"]
    main = json.loads((tmp_path / "r.json").read_text())
    assert any(e["api"] == "torch.zeros" for e in main["events"])
    [child] = [p for p in tmp_path.iterdir() if p.name.startswith("r.pid")]
    assert _mode(child) == _mode(tmp_path / "r.json") == 0o600
    assert f"JSON report: {tmp_path / 'r.json'}" in proc.stderr
