"""AReaL main under the shim: its own NPU platform (hccl, ASCEND_RT_VISIBLE_DEVICES per vLLM server).

Two kinds of tests: a fixture package (tests/projects/areal_like, our own few lines with AReaL's CUDA-first
detection) run with ``ascend-shim run --simulate``; and the real ``areal`` from PyPI (installed ``--no-deps``
by the test command, tests/requirements-nodeps.txt).
"""
import json
import os
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "areal_like")


def run_fixture(*extra, env_extra=None, args=()):
    env = shim_free_env("ASCEND_RT", "CUDA_VISIBLE")
    env["PYTHONPATH"] = FIXTURE
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *extra,
                           os.path.join(FIXTURE, "run_platform.py"), *args],
                          capture_output=True, text=True, env=env, timeout=600, cwd=FIXTURE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), proc


def test_fixture_cuda_first_detection_picks_npu_platform():
    out, _ = run_fixture(env_extra={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert (out["platform"], out["backend"], out["env_var"]) == ("NPUPlatform", "hccl", "ASCEND_RT_VISIBLE_DEVICES")
    # the user's CUDA_VISIBLE_DEVICES became ASCEND_RT_VISIBLE_DEVICES; each server gets its own NPU
    assert [s["ASCEND_RT_VISIBLE_DEVICES"] for s in out["servers"]] == ["2", "3"]
    assert out["optimizer_device"] == "npu:1" and out["tensor_device"] == "npu:0"


def test_fixture_without_the_areal_set_falls_into_the_trap():
    out, _ = run_fixture("--disable", "areal", env_extra={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert out["platform"] == "UnknownPlatform" and out["backend"] == "nccl"
    assert [s["CUDA_VISIBLE_DEVICES"] for s in out["servers"]] == ["2", "3"]  # ignored by the Ascend runtime


@pytest.mark.slow
def test_fixture_vllm_server_children_come_up_activated_on_their_own_npu():
    out, _ = run_fixture(env_extra={"CUDA_VISIBLE_DEVICES": "0,1"}, args=("--children",))
    assert out["children"] == [{"active": True, "platform": "NPUPlatform", "visible": "0"},
                               {"active": True, "platform": "NPUPlatform", "visible": "1"}]


# -- the real areal (PyPI wheel, installed --no-deps plus the few modules its launcher imports) -----------------
def _real_areal():
    try:
        import areal.infra.launcher.vllm_server  # noqa: F401
        from areal.infra import platforms
    except Exception as exc:  # not installed, or a dependency of its launcher missing
        pytest.fail(f"areal (tests/requirements-nodeps.txt) not importable: {type(exc).__name__}: {exc}")
    return platforms


@pytest.fixture
def areal_platforms(clean_shim):
    platforms = _real_areal()
    proxy = platforms.current_platform

    def reset():
        object.__setattr__(proxy, "_platform", None)
        object.__setattr__(proxy, "_initialized", False)

    reset()
    yield platforms
    clean_shim.deactivate()
    reset()


def test_real_areal_platform_is_npu_under_the_shim(areal_platforms):
    import ascend_shim

    ascend_shim.activate(backend="sim", inherit=False, disable=["areal"])
    assert type(areal_platforms._init_platform()).__name__ == "UnknownPlatform"  # the trap, without the set
    ascend_shim.deactivate()

    ascend_shim.activate(backend="sim", inherit=False)
    platform = areal_platforms.current_platform
    assert type(platform._ensure_initialized()).__name__ == "NPUPlatform"
    assert (platform.device_type, platform.communication_backend, platform.device_control_env_var) == \
        ("npu", "hccl", "ASCEND_RT_VISIBLE_DEVICES")
    ascend_shim.deactivate()
    from ascend_shim import callers

    assert "areal" not in callers._native  # undone


def test_real_areal_vllm_servers_get_one_npu_each(areal_platforms, monkeypatch):
    import ascend_shim
    from areal.api.alloc_mode import _AllocationMode
    from areal.api.cli_args import vLLMConfig
    from areal.infra.launcher import vllm_server

    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ascend_shim.activate(backend="sim", inherit=False)
    launched = []

    class Running:
        def poll(self):
            return None

    def launch_one_server(self, cmd, host_ip, server_port, custom_env=None):
        launched.append((cmd, custom_env))
        self._shutdown_requested = True  # leave run()'s watch loop once both are "up"
        return Running()

    monkeypatch.setattr(vllm_server.vLLMServerWrapper, "launch_one_server", launch_one_server)
    import signal

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        wrapper = vllm_server.vLLMServerWrapper("exp", "trial", vLLMConfig(model="/models/tiny", device="npu"),
                                                _AllocationMode.from_str("vllm:d2"), n_gpus_per_node=2)
        wrapper.run()
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert [env for _, env in launched] == [{"ASCEND_RT_VISIBLE_DEVICES": "0"}, {"ASCEND_RT_VISIBLE_DEVICES": "1"}]
    cmd = launched[0][0]
    assert cmd[:3] == ["python3", "-m", "areal.engine.vllm_ext.areal_vllm_server"] and "--device" not in cmd


def test_real_areal_hand_port_device_setting(areal_platforms):
    import ascend_shim
    from omegaconf import OmegaConf

    ascend_shim.activate(backend="sim", inherit=False)
    from areal.api.cli_args import to_structured_cfg, vLLMConfig

    config = vLLMConfig(device="npu")
    assert config.device == "npu"
    assert "device" not in vLLMConfig.build_args(config, tp_size=1, pp_size=1)
    with pytest.raises(ValueError, match="vLLMConfig.device"):
        vLLMConfig(device="tpu")
    merged = to_structured_cfg(OmegaConf.create({"model": "m", "device": "npu", "enforce_eager": True}), vLLMConfig)
    assert OmegaConf.to_object(merged).enforce_eager is True
    ascend_shim.deactivate()
    with pytest.raises(TypeError):
        vLLMConfig(device="npu")


def test_real_areal_optimizer_device_string(areal_platforms):
    """fsdp_utils/optimizer.py builds torch.device(f"cuda:{device_id}") from an int."""
    import inspect

    import ascend_shim
    import torch
    from areal.engine.fsdp_utils import optimizer

    assert 'torch.device(f"cuda:{device_id}")' in inspect.getsource(optimizer)  # the site is still there
    ascend_shim.activate(backend="sim", inherit=False)
    assert torch.device("cuda:1") == torch.device("npu", 1)
