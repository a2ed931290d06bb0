"""realhf (legacy AReaL) under the shim, on a fixture package with realhf's CUDA patterns (tests/projects/realhf_like,
our own lines; realhf itself is not installable): full redirect, pynvml on the NPU, CUDA-graph decoding off,
jiterator created at import, TorchScript helper, @torch.compile, and its flash_attn calls (packed prefill,
decode with fused rotary and in-place caches) served by the flash_attn provider."""
import json
import os
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "realhf_like")


def run_fixture(*extra, args=()):
    env = shim_free_env()
    env["PYTHONPATH"] = FIXTURE
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *extra,
                           os.path.join(FIXTURE, "run_realhf.py"), *args],
                          capture_output=True, text=True, env=env, timeout=600, cwd=FIXTURE)
    return proc


def result(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_realhf_patterns_and_attention_through_the_provider():
    out = result(run_fixture(args=("--attention",)))
    assert out["use_cuda"] is True and out["device"] == "npu:0"
    assert out["nvml"]["total"] > 0 and out["nvml"]["double_shutdown"] == "NVMLError_Uninitialized"
    assert out["use_cuda_graph"] is False
    assert out["positions"] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]
    assert out["entropy_ok"] is True
    assert out["jiterator_call"] == "UnsupportedOnNPUError"
    assert out["prefill_err"] < 2e-2 and out["decode_err"] < 2e-2 and out["cache_err"] < 2e-2, out


def test_realhf_without_its_set_fails_at_import():
    proc = run_fixture("--disable", "realhf")
    assert proc.returncode != 0
    assert "pynvml" in proc.stderr or "NVML" in proc.stderr, proc.stderr[-2000:]  # absent, or no NVIDIA driver


def test_pynvml_answer_in_process(clean_shim, monkeypatch):
    """The NPU-backed pynvml directly: life cycle, memory from torch.npu, unsupported calls named."""
    import importlib

    nvml = importlib.import_module("ascend_shim.targets.realhf.pynvml")
    clean_shim.activate(backend="sim", inherit=False)
    with pytest.raises(nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    try:
        import torch

        assert nvml.nvmlDeviceGetCount() == torch.npu.device_count()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        free, total = torch.npu.mem_get_info(0)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        assert (mem.total, mem.free, mem.used) == (total, free, total - free)
        assert nvml.nvmlDeviceGetName(handle) == torch.npu.get_device_name(0)
        with pytest.raises(nvml.NVMLError_InvalidArgument):
            nvml.nvmlDeviceGetHandleByIndex(torch.npu.device_count())
        with pytest.raises(nvml.NVMLError_NotSupported, match="nvmlDeviceGetTemperature"):
            nvml.nvmlDeviceGetTemperature(handle, 0)
    finally:
        nvml.nvmlShutdown()


def test_jit_script_of_wrapped_factories_compiles(clean_shim, tmp_path, monkeypatch):
    """torch_features: @torch.jit.script over a shim-wrapped torch.arange compiles (realhf's position helper)."""
    src = tmp_path / "scripted_mod.py"
    src.write_text("import torch\n\n@torch.jit.script\ndef f(n: int, c: torch.Tensor) -> torch.Tensor:\n"
                   "    return torch.arange(n, dtype=torch.long, device=c.device) + c.sum().long()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    clean_shim.activate(backend="sim", inherit=False)
    import torch

    mod = __import__("scripted_mod")
    try:
        assert mod.f(3, torch.zeros(2, device="cuda")).tolist() == [0, 1, 2]
    finally:
        sys.modules.pop("scripted_mod", None)
