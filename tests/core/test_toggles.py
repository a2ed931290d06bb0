"""Every environment toggle, every bad value, and the CLI's exit code 2 on them."""
import importlib
import subprocess
import sys

import pytest

import ascend_shim
from ascend_shim import activation
from ascend_shim.config import ENV_VARS, Config
from ascend_shim.errors import ConfigError
from ascend_shim.report import REPORT

from .test_activation import PATCHES, TARGET
from tests.conftest import SIM_BACKEND
from tests.subprocess_env import shim_free_env


@pytest.fixture
def demo_env(make_modules, clean_shim, monkeypatch):
    p = make_modules({"target": TARGET, "patches": PATCHES})
    monkeypatch.setenv("ASCEND_SHIM_PATCH_MODULES", f"{p}patches")
    monkeypatch.setenv("ASCEND_SHIM_BACKEND", "sim")
    return p, monkeypatch


def _activate():
    ascend_shim.activate(inherit=False)


def test_backend_toggle(demo_env):
    p, env = demo_env
    env.setenv("ASCEND_SHIM_ONLY", f"{p}demo")
    _activate()
    assert ascend_shim.current_backend() == SIM_BACKEND  # backend sim: "npu" on the real layer


@pytest.mark.parametrize("var,value,needle", [
    ("ASCEND_SHIM_BACKEND", "gpu", "valid values: npu, sim, auto"),
    ("ASCEND_SHIM_STRICT", "maybe", "use 1 or 0"),
    ("ASCEND_SHIM_LOG", "loud", "valid values: debug, info, warning, error, off"),
    ("ASCEND_SHIM_DISABLE", "a,,b", "malformed"),
    ("ASCEND_SHIM_ONLY", "bad id!", "not a valid id"),
    ("ASCEND_SHIM_ENABLE", "x,,", "malformed"),
    ("ASCEND_SHIM_PATCH_MODULES", "not-a-module", "not a valid module name"),
])
def test_bad_values_name_the_valid_ones(var, value, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        Config.from_env({var: value})
    assert var in str(info.value) and "\n" not in str(info.value)


def test_unknown_patch_id_is_an_error_listing_the_sets(demo_env):
    p, env = demo_env
    env.setenv("ASCEND_SHIM_DISABLE", "no_such_set")
    with pytest.raises(ConfigError, match=rf"unknown patch set or patch id 'no_such_set'.*{p}demo"):
        _activate()
    assert not ascend_shim.is_active()


def test_unimportable_patch_module_is_an_error(clean_shim, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_PATCH_MODULES", "no_such_module_xyz")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        ascend_shim.activate(backend="sim", inherit=False)


def test_disable_a_set_and_a_single_patch(demo_env):
    p, env = demo_env
    env.setenv("ASCEND_SHIM_ONLY", f"{p}demo")
    env.setenv("ASCEND_SHIM_DISABLE", f"{p}demo.{p}target.greet")
    _activate()
    target = importlib.import_module(f"{p}target")
    assert target.greet() == "orig"
    assert target.Thing().method() == "patched:orig-method"
    assert REPORT.patches[f"{p}demo.{p}target.greet"]["status"] == "disabled"
    ascend_shim.deactivate()
    env.setenv("ASCEND_SHIM_DISABLE", f"{p}demo")
    _activate()
    assert target.Thing().method() == "orig-method"
    assert REPORT.sets[f"{p}demo"]["status"] == "disabled"


def test_only_a_single_patch(demo_env):
    p, env = demo_env
    env.setenv("ASCEND_SHIM_ONLY", f"{p}demo.{p}target.Thing.method")
    _activate()
    target = importlib.import_module(f"{p}target")
    assert target.Thing().method() == "patched:orig-method"
    assert target.greet() == "orig"


def test_enable_turns_on_a_default_off_set(demo_env):
    p, env = demo_env
    env.setenv("ASCEND_SHIM_DISABLE", f"{p}demo")
    env.setenv("ASCEND_SHIM_ENABLE", f"{p}off")
    _activate()
    assert importlib.import_module(f"{p}target").VALUE == 99


def test_strict_toggle(demo_env):
    p, env = demo_env
    env.setenv("ASCEND_SHIM_ONLY", f"{p}old")
    env.setenv("ASCEND_SHIM_STRICT", "1")
    with pytest.raises(ascend_shim.StrictModeError):
        _activate()


def test_log_toggle_sets_the_logger_level(demo_env):
    p, env = demo_env
    env.setenv("ASCEND_SHIM_ONLY", f"{p}demo")
    env.setenv("ASCEND_SHIM_LOG", "debug")
    _activate()
    assert activation.log.level == 10
    ascend_shim.deactivate()
    env.setenv("ASCEND_SHIM_LOG", "off")
    _activate()
    assert activation.log.level > 50


def test_auto_backend_without_torch_npu_is_a_clear_error(clean_shim, monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_BACKEND", "auto")
    with pytest.raises(ConfigError, match="torch_npu is not installed.*--simulate"):
        ascend_shim.activate(inherit=False)


def test_keywords_override_the_environment(monkeypatch):
    monkeypatch.setenv("ASCEND_SHIM_BACKEND", "npu")
    assert Config.from_env(backend="sim").backend == "sim"
    assert Config.from_env().backend == "npu"


def test_config_round_trips_through_the_environment():
    cfg = Config.from_env({}, backend="sim", disable="a,b", strict=True, report="/tmp/r.json")
    assert Config.from_env(cfg.to_env()) == cfg
    assert {v.name for v in ENV_VARS} >= set(cfg.to_env())


def _cli(*args, env=None, cwd=None, timeout=120):
    full = shim_free_env()
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "ascend_shim", *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("args,env,needle", [
    (["run", "--backend", "sim", "--disable", "nope_xyz", "x.py"], {}, "unknown patch set or patch id 'nope_xyz'"),
    (["run", "x.py"], {"ASCEND_SHIM_BACKEND": "cuda"}, "valid values: npu, sim, auto"),
    (["list"], {"ASCEND_SHIM_ONLY": "a,,b"}, "malformed"),
    (["run", "--backend", "auto", "x.py"], {}, "--simulate"),
])
def test_cli_exits_2_with_a_one_line_error(args, env, needle):
    proc = _cli(*args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
