"""The nanochat patch set (and the kernels-hub answer it relies on) on the emulated NPU.

`nanochat_like/` reproduces nanochat's CUDA patterns in small files written for these tests (the real project is
checked by hand, see the set's `checked_against`): an import-time capability check, FA3 from the kernels hub,
`--device-type`, `--fp8`, compile, nccl + ReduceOp.AVG, a fp16 GradScaler, peak flops, PYTORCH_ALLOC_CONF;
`web.py` chat_web's worker pool (one replica per `cuda:{i}`, `--num-gpus`, generation under inference mode).
"""
import json
import os
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "nanochat_like")
NO_KERNELS = os.path.join(FIXTURE, "no_kernels")
TRAIN = os.path.join(FIXTURE, "train.py")
WEB = os.path.join(FIXTURE, "web.py")
FA3 = "ascend_shim.targets.flash_attn.fa3"


def _env(**extra):
    env = shim_free_env("NANOCHAT_", "PYTORCH_", "TORCHDYNAMO", "RANK", "WORLD_SIZE")
    env.pop("PYTHONPATH", None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def _results(stdout):
    """Every `RESULT {...}` object printed (ranks may interleave their lines)."""
    out, decoder, at = [], json.JSONDecoder(), stdout.find("RESULT ")
    while at >= 0:
        obj, end = decoder.raw_decode(stdout, at + len("RESULT "))
        out.append(obj)
        at = stdout.find("RESULT ", end)
    return sorted(out, key=lambda r: r["rank"])


def _run(cmd, tmp_path, **env):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(**env), timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return _results(proc.stdout), proc


def _shim(tmp_path, *args, **env):
    report = tmp_path / "report.json"
    results, proc = _run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
                          *args], tmp_path, **env)
    return results, json.loads(report.read_text()), proc


def _cpu(tmp_path, *args, **env):
    """The same script on plain CPU torch, no shim (eager: compilation does not change the numbers)."""
    results, _ = _run([sys.executable, TRAIN, *args], tmp_path, TORCHDYNAMO_DISABLE="1", **env)
    return results


def _events(report, category, api):
    return [e for e in report["events"] if e["category"] == category and e["api"] == api]


@pytest.mark.slow
def test_seed_command_single_process_matches_cpu(tmp_path):
    """--device-type=npu --fp8 as the hand port runs it; FA3 comes through the real kernels package, hub offline."""
    (npu,), report, proc = _shim(tmp_path, TRAIN, "--device-type=npu", "--fp8", HF_HUB_OFFLINE="1")
    (cpu,) = _cpu(tmp_path, NANOCHAT_DTYPE="bfloat16")

    assert npu["device"] == "npu:0"
    assert npu["compute_dtype"] == "torch.bfloat16"  # the import-time capability check answered (8, 0)
    # FA3 from the kernels hub, answered locally (HF_HUB_OFFLINE=1: any hub access would raise)
    assert npu["fa3"] == FA3 and npu["use_fa3"] is True
    assert _events(report, "translated", "kernels.get_kernel") and _events(report, "translated", "kernels.has_kernel")
    assert report["patches"]["nanochat.fa3"]["status"] == "not-needed"  # the hub answer was already FA3
    # --fp8 neutralised, not silently
    assert npu["fp8_layers"] == 0 and _events(report, "fallback", "nanochat --fp8")
    assert "fp8 training is not available" in proc.stderr
    assert npu["peak_flops"] == 354e12 and cpu["peak_flops"] == float("inf")
    assert npu["npu_alloc_conf"] == "expandable_segments:True" and cpu["npu_alloc_conf"] is None
    assert _events(report, "translated", "nanochat --device-type")
    assert {e["api"] for e in report["events"] if e["category"] == "fallback"} >= {"torch.compile"}
    # the same training as plain CPU torch (bf16 SDPA there, bf16 NPU fused attention here)
    assert npu["finite"] and len(npu["losses"]) == len(cpu["losses"]) == 4
    diff = max(abs(a - b) for a, b in zip(npu["losses"], cpu["losses"], strict=True))
    assert diff < 2e-2, (npu["losses"], cpu["losses"])
    _check_generation(npu, cpu)


def _check_generation(npu, cpu):
    """Generation through the kv cache (inference mode, cache_seqlens advanced in place, as nanochat's Engine):
    caches updated in place, output equal to full attention with the same window."""
    assert cpu["kv_error"] is None and cpu["cache_in_place"] and cpu["kv_err"] < 2e-2
    assert npu["kv_error"] is None, npu["kv_error"]
    assert npu["cache_in_place"] and npu["kv_err"] < 2e-2, npu


@pytest.mark.slow
def test_torchrun_two_processes_fp16_matches_cpu(tmp_path):
    """torchrun + nccl + ReduceOp.AVG + the fp16 GradScaler; no kernels package: FA3 plugged in directly."""
    results, report, _ = _shim(tmp_path, "-m", "torch.distributed.run", "--nproc_per_node=2", TRAIN,
                               NANOCHAT_DTYPE="float16", PYTHONPATH=NO_KERNELS)
    (cpu,) = _cpu(tmp_path, "--grad-accum=2", NANOCHAT_DTYPE="float16")

    assert [r["rank"] for r in results] == [0, 1]
    assert [r["device"] for r in results] == ["npu:0", "npu:1"]
    for r in results:
        assert r["scaler"] == {"enabled": True, "device": "npu", "scale": r["scaler"]["scale"]}
        assert r["reduce_scatter_ok"] and r["params_in_sync"] and r["finite"]
        assert r["fa3"] == FA3 and r["use_fa3"] is False  # FA3 is bf16-only in nanochat: fp16 keeps SDPA
    assert results[0]["losses"] == results[1]["losses"]
    # AVG over 2 ranks == the mean over 2 micro-batches in one CPU process
    diff = max(abs(a - b) for a, b in zip(results[0]["losses"], cpu["losses"], strict=True))
    assert diff < 2e-2, (results[0]["losses"], cpu["losses"])
    rank0 = json.loads((tmp_path / "report.rank0.json").read_text())
    assert rank0["patches"]["nanochat.fa3"]["status"] == "applied"
    assert _events(rank0, "translated", "torch.distributed.init_process_group")  # nccl -> hccl
    _check_generation(results[0], cpu)  # fp16: nanochat's own SDPA kv cache on the NPU


@pytest.mark.slow
def test_chat_web_worker_per_device_streams_like_cpu(tmp_path):
    """chat_web --num-gpus=4 --device-type=npu: one replica per `cuda:{i}` lands on npu:i, concurrent requests
    each get their own device and generate through the FA3 kv cache (prefill first: no training ran before, so
    the provider's causal mask is first built under inference mode), streaming what plain CPU torch streams."""
    (npu,), report, _ = _shim(tmp_path, WEB, "--device-type=npu", "--num-gpus=4", HF_HUB_OFFLINE="1")
    (cpu,), _ = _run([sys.executable, WEB, "--device-type=cpu"], tmp_path, TORCHDYNAMO_DISABLE="1",
                     NANOCHAT_DTYPE="bfloat16", HF_HUB_OFFLINE="1")

    assert npu["device_count"] >= 4 and npu["num_gpus"] == 4
    assert npu["fa3"] == FA3 and npu["use_fa3"] is True
    devices = [f"npu:{i}" for i in range(4)]
    assert [w["device"] for w in npu["workers"]] == devices
    assert [w["params"] for w in npu["workers"]] == [[d] for d in devices]
    translated = {e["detail"] for e in _events(report, "translated", "torch.device")}
    assert {f"device=cuda:{i} -> npu:{i}" for i in range(4)} <= translated
    assert _events(report, "translated", "nanochat --device-type")
    # four concurrent requests: each on its own device, interleaved, streamed to the end
    assert sorted(r["gpu"] for r in npu["responses"]) == [0, 1, 2, 3]
    assert all(r["done"] and len(r["tokens"]) == 6 for r in npu["responses"])
    by_temp = {}
    for r in npu["responses"] + cpu["responses"]:
        by_temp.setdefault(r["temperature"], []).append(r["tokens"])
    greedy = by_temp[0.0]
    assert all(t == greedy[0] for t in greedy), greedy  # every device and the CPU run say the same
    assert all(t == by_temp[0.8][0] for t in by_temp[0.8][:2])  # seeded sampling: the same on every device
    # teacher-forced logits: bit-identical across the four devices, close to CPU bf16 SDPA
    first = npu["forced_logits"][0]
    assert all(f == first for f in npu["forced_logits"])
    err = max(abs(a - b) for step, ref in zip(first, cpu["forced_logits"][0], strict=True)
              for a, b in zip(step, ref, strict=True))
    assert err < 5e-2, err


# -- in-process ----------------------------------------------------------------------------------------------
@pytest.fixture
def nanochat_like(monkeypatch, tmp_path):
    """The fixture package importable as `nanochat` (and the offline hub as `kernels`), cleaned up afterwards; the
    real kernels package, if imported, is put back (its native module cannot be initialised twice in a process)."""
    def drop():
        return {name: sys.modules.pop(name) for name in list(sys.modules)
                if name == "nanochat" or name.startswith(("nanochat.", "kernels"))}

    real = {name: module for name, module in drop().items() if name.startswith("kernels")}
    monkeypatch.setenv("ASCEND_SHIM_USER_ROOTS", os.pathsep.join([FIXTURE, str(tmp_path)]))
    for var in ("NANOCHAT_DTYPE", "PYTORCH_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        monkeypatch.delenv(var, raising=False)
    yield monkeypatch
    drop()
    sys.modules.update(real)


def test_import_time_capability_and_peak_flops(nanochat_like, clean_shim):
    nanochat_like.syspath_prepend(FIXTURE)
    clean_shim.activate(backend="sim")
    import torch
    from nanochat import common

    assert torch.bfloat16 == common.COMPUTE_DTYPE
    assert common.get_peak_flops(torch.cuda.get_device_name(0)) == 354e12
    assert common.get_peak_flops("Ascend910_9392") == 354e12
    assert common.get_peak_flops("Ascend910ProB") == 256e12
    assert common.get_peak_flops("NVIDIA H100 80GB HBM3") == 989e12  # nanochat's own table still answers
    assert common.get_peak_flops("Ascend310P3") == float("inf")


def test_device_type_npu_argument():
    from ascend_shim.targets.nanochat.impl import device_type_changes

    assert device_type_changes(["x.py", "--device-type=npu", "--depth=2"]) == [(1, "--device-type=cuda")]
    assert device_type_changes(["x.py", "--device-type", "npu"]) == [(2, "cuda")]
    assert device_type_changes(["x.py", "--device-type=cpu", "--run", "npu"]) == []


def test_kernels_hub_answered_locally(clean_shim, monkeypatch):
    """The real kernels package with the hub offline: FA3 repositories are answered without any hub access."""
    import importlib

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    clean_shim.activate(backend="sim")
    from huggingface_hub.errors import OfflineModeIsEnabled
    from kernels import get_kernel, has_kernel

    fa3 = importlib.import_module(FA3)
    assert has_kernel("kernels-community/flash-attn3") is True
    for repo in ("varunneal/flash-attention-3", "kernels-community/flash-attn3"):
        kernel = get_kernel(repo)
        assert kernel.flash_attn_interface is fa3 and kernel.flash_attn_func is fa3.flash_attn_func
    with pytest.raises((OfflineModeIsEnabled, ValueError), match="offline"):  # others still go to the hub
        get_kernel("kernels-community/activation", version=1)


def test_fp8_conversion_is_turned_off_and_needed(nanochat_like, clean_shim):
    import torch
    import torch.nn as nn

    from ascend_shim.errors import UnsupportedOnNPUError
    from ascend_shim.report import REPORT

    nanochat_like.syspath_prepend(FIXTURE)
    clean_shim.activate(backend="sim")
    from nanochat.fp8 import convert_to_float8_training

    model = convert_to_float8_training(nn.Sequential(nn.Linear(16, 16)).to("npu"))
    assert type(model[0]) is nn.Linear
    assert any(e["api"] == "nanochat --fp8" for e in REPORT.events())

    clean_shim.deactivate()  # without the patch, the fp8 layers reach the NPU's missing fp8 matmul
    for name in [m for m in sys.modules if m.startswith("nanochat")]:
        del sys.modules[name]
    clean_shim.activate(backend="sim", disable=["nanochat.fp8"])
    from nanochat.fp8 import convert_to_float8_training

    model = convert_to_float8_training(nn.Sequential(nn.Linear(16, 16)).to("npu"))
    from ascend_shim import patching

    if patching.is_patched("torch._scaled_mm"):  # torch_npu < 2.13 has no NPU kernel for it
        with pytest.raises(UnsupportedOnNPUError, match="fp8"):
            model(torch.randn(4, 16, device="npu"))
    else:  # torch_npu 2.13+ registers torch._scaled_mm for the NPU: the fp8 layers run
        assert type(model[0]) is not nn.Linear and model(torch.randn(4, 16, device="npu")).device.type == "npu"


def test_other_nanochat_commit_skips_cleanly(nanochat_like, clean_shim, tmp_path):
    """Attributes the set needs are missing (another commit): the patches are skipped and reported."""
    pkg = tmp_path / "nanochat"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "common.py").write_text("def compute_init(device_type='cuda'):\n    return device_type\n")
    (pkg / "flash_attention.py").write_text("flash_attn = None\n")
    nanochat_like.syspath_prepend(str(tmp_path))
    clean_shim.activate(backend="sim")
    import nanochat.common
    import nanochat.flash_attention  # noqa: F401

    from ascend_shim.report import REPORT

    assert REPORT.patches["nanochat.fa3"]["status"] == "skipped"
    assert "_fa3" in REPORT.patches["nanochat.fa3"]["reason"]
    assert REPORT.patches["nanochat.peak_flops"]["status"] == "skipped"
    assert nanochat.common.compute_init("cpu") == "cpu"
