"""Every ``ASCEND_SHIM_*`` value is parsed strictly in Python, before anything native runs: one line, exit 2."""
import os
import subprocess
import sys

import pytest

from ascend_shim import config
from ascend_shim.activation import BOOTSTRAP_DIR as BOOTSTRAP
from ascend_shim.errors import ConfigError

from tests.subprocess_env import shim_free_env

BAD_DEVICES = ["1e9", "2x", "100", "65", "0", "-1", "abc", "3.0", "0x4"]


def _env(**extra) -> dict:
    env = shim_free_env()
    env.update(extra)
    return env


@pytest.mark.parametrize("raw", BAD_DEVICES)
def test_sim_devices_rejects_what_is_not_a_count_the_emulator_supports(raw):
    with pytest.raises(ConfigError, match="ASCEND_SHIM_SIM_DEVICES"):
        config.setting("sim_devices", {"ASCEND_SHIM_SIM_DEVICES": raw})
    with pytest.raises(ConfigError, match="ASCEND_SHIM_SIM_DEVICES"):
        config.Config.from_env({"ASCEND_SHIM_SIM_DEVICES": raw})


@pytest.mark.parametrize("raw, count", [("1", 1), ("8", 8), (" 4 ", 4), ("64", 64), ("", 8)])
def test_sim_devices_accepts_1_to_the_emulator_maximum(raw, count):
    assert config.setting("sim_devices", {"ASCEND_SHIM_SIM_DEVICES": raw}) == count
    assert config.setting("sim_devices", {}) == 8


def test_the_maximum_is_the_emulators():
    header = os.path.join(os.path.dirname(config.__file__), "sim", "csrc", "sim.h")
    with open(header) as fh:
        assert f"constexpr int kMaxDevices = {config.MAX_SIM_DEVICES};" in fh.read()


@pytest.mark.parametrize("name, raw", [
    ("ASCEND_SHIM_SIM_HCCL_AVG", "mean"), ("ASCEND_SHIM_SIM_CANN_VERSION", "latest"),
    ("ASCEND_SHIM_SIM_BUILD_VERBOSE", "loud"), ("ASCEND_SHIM_SIM_HCCL_NO_ALIAS", "2"),
    ("ASCEND_SHIM_CUDA_CAPABILITY", "9"), ("ASCEND_SHIM_STRICT", "maybe"),
])
def test_other_settings_are_strict_too(name, raw):
    with pytest.raises(ConfigError, match=name):
        config.check_environment({name: raw})


def _one_error_line(stderr: str, name: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert name in lines[0] and "Traceback" not in stderr and "backward" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("raw", ["1e9", "2x", "100", "0", "-1", "abc"])
def test_run_with_a_bad_device_count_is_one_line_and_exit_2(tmp_path, raw):
    script = tmp_path / "train.py"
    script.write_text("import torch\nprint(torch.cuda.device_count())\n")
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", str(script)],
                          env=_env(ASCEND_SHIM_SIM_DEVICES=raw), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    _one_error_line(proc.stderr, "ASCEND_SHIM_SIM_DEVICES")


def test_run_with_a_bad_hccl_policy_is_one_line_and_exit_2(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", str(script)],
                          env=_env(ASCEND_SHIM_SIM_HCCL_AVG="mean"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    _one_error_line(proc.stderr, "ASCEND_SHIM_SIM_HCCL_AVG")


def test_bootstrap_with_a_bad_device_count_is_one_line(tmp_path):
    """A child Python activated through the bootstrap ``sitecustomize`` says what is wrong in one line."""
    env = _env(ASCEND_SHIM="1", ASCEND_SHIM_BACKEND="sim", ASCEND_SHIM_SIM_DEVICES="abc",
               PYTHONPATH=os.pathsep.join(filter(None, [BOOTSTRAP, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", "import torch; print('ran')"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ran", proc.stderr
    _one_error_line(proc.stderr, "ASCEND_SHIM_SIM_DEVICES")


@pytest.mark.parametrize("raw", ["0", "abc"])
def test_installing_the_emulator_directly_names_the_setting(raw):
    proc = subprocess.run([sys.executable, "-c", "import ascend_shim.sim as s; s.install()"],
                          env=_env(ASCEND_SHIM_SIM_DEVICES=raw), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "ConfigError" in proc.stderr and "ASCEND_SHIM_SIM_DEVICES" in proc.stderr, proc.stderr[-2000:]
    assert "backward" not in proc.stderr


@pytest.mark.parametrize("raw", ["²", "٣", "３", " 3", "+3", "3_0", "-1", ""])
def test_a_rank_not_written_in_ascii_digits_is_no_rank(monkeypatch, raw):
    """'²'.isdigit() is True, int('²') fails; int() takes '٣', signs, spaces and underscores, no launcher's."""
    from ascend_shim.report import process_rank

    monkeypatch.setenv("RANK", raw)
    assert process_rank() is None
    monkeypatch.setenv("RANK", "12")
    assert process_rank() == 12


@pytest.mark.parametrize("value", ["cuda:²", "cuda:٣", "cuda:+1"])
def test_a_device_index_not_in_ascii_digits_is_left_to_torch(value):
    from ascend_shim import devices

    assert devices.translate(value) == value and devices.untranslate(value.replace("cuda", "npu")) == \
        value.replace("cuda", "npu")
    assert devices.translate("cuda:1") == "npu:1" and devices.untranslate("npu:1") == "cuda:1"


def test_a_superscript_rank_still_writes_the_report(tmp_path):
    (tmp_path / "job.py").write_text("print('ran')\n")
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", "r.json", "job.py"],
                          cwd=tmp_path, env=_env(RANK="²"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "r.json").exists()
