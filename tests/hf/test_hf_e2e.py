"""End to end on the emulated NPU: a seed-004 torchrun Trainer job and an open-r1 style TRL GRPO + LoRA job,
both written for CUDA and run unmodified under ``python -m ascend_shim run --simulate``.

Library versions are the pinned test dependencies (transformers 5.23.0, accelerate 1.15.0, peft 0.21.2,
trl 1.16.0, datasets 5.2.0); the assertions pin how those versions behave on the NPU path.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("datasets")

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra):
    env = shim_free_env()
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_DISABLED="true",
               TOKENIZERS_PARALLELISM="false", **extra)
    return env


def run_trainer(tmp_path, optim="adamw_torch", **env):
    tmp_path.mkdir(parents=True, exist_ok=True)
    out, report = tmp_path / "out.json", tmp_path / "report.json"
    cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
           "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), os.path.join(SCRIPTS, "trainer_ddp.py"), str(out), optim]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(**env), timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    reports = [json.loads((tmp_path / f"report.rank{r}.json").read_text()) for r in (0, 1)]
    return json.loads(out.read_text()), reports


def events(rep, category=None):
    return {(e["api"], e["detail"]) for e in rep["events"] if category in (None, e["category"])}


def apis(rep, category=None):
    return {api for api, _ in events(rep, category)}


@pytest.fixture(scope="module")
def trainer_off(tmp_path_factory):
    return run_trainer(tmp_path_factory.mktemp("off"))


@pytest.mark.slow
def test_torchrun_trainer_fp16_nccl_tf32_runs_on_two_npus_over_hccl(trainer_off):
    result, reports = trainer_off
    assert result["world"] == 2
    assert result["devices"] == [["npu:0"], ["npu:1"]], result
    assert result["backend_config"] == "npu:hccl", result  # the real process group
    assert result["backend_seen_by_user"] == "nccl"  # what the CUDA script asked for
    assert len(result["losses"]) == 4, result
    assert result["max_weight_change"] > 1e-4, "the optimizer did not move the weights"
    assert result["max_rank_weight_diff"] == 0.0, "ranks ended with different weights"
    assert result["args_device"] == "npu:0"
    assert result["optimizer"] == "AdamW" and result["scaler"] == "GradScaler"
    for rep in reports:
        ev = events(rep, "translated")
        assert ("torch.distributed.init_process_group", "backend='nccl' -> 'hccl'") in ev
        assert ("accelerate.PartialState", "backend='nccl' -> 'hccl'") in ev  # ddp_backend="nccl"
        assert any(a == "TrainingArguments(tf32=...)" and "allow_hf32 = True" in d for a, d in ev), ev
        assert "Module.cuda" in apis(rep)
        for pid in ("hf_transformers.native", "hf_accelerate.native", "hf_peft.native", "hf_trl.native"):
            assert rep["patches"][pid]["status"] == "applied", pid
        assert rep["patch_sets"]["fast_ops"]["status"] == "disabled"


@pytest.mark.slow
def test_adamw_torch_fused_becomes_npu_fused_adamw_and_trains_the_same(trainer_off, tmp_path):
    off, _ = trainer_off
    result, reports = run_trainer(tmp_path, optim="adamw_torch_fused")
    assert result["optimizer"] == "NpuFusedAdamW", result
    assert result["max_rank_weight_diff"] == 0.0
    # the fused update is AdamW's: same weights and losses (the set_to_none-safe wrapper keeps every step's grads)
    assert result["max_weight_change"] == pytest.approx(off["max_weight_change"], rel=1e-4)
    assert result["losses"] == pytest.approx(off["losses"], abs=1e-4)
    assert ("optim='adamw_torch_fused'", "torch_npu.optim.NpuFusedAdamW") in events(reports[0], "translated")


@pytest.mark.slow
def test_fast_ops_loss_curve_matches_and_each_swap_is_reported(trainer_off, tmp_path):
    off, _ = trainer_off
    result, reports = run_trainer(tmp_path, ASCEND_SHIM_ENABLE="fast_ops")
    assert result["optimizer"] == "NpuFusedAdamW"
    assert result["max_rank_weight_diff"] == 0.0
    assert result["losses"] == pytest.approx(off["losses"], abs=2e-3), (result["losses"], off["losses"])
    assert result["max_weight_change"] == pytest.approx(off["max_weight_change"], rel=1e-2)
    ops = result["op_calls"]
    assert ops.get("npu_rms_norm", 0) > 0 and ops.get("npu_swiglu", 0) > 0, ops
    for rep in reports:
        ev = events(rep, "translated")
        assert ("torch.optim.AdamW", "torch_npu.optim.NpuFusedAdamW") in ev
        assert ("LlamaMLP.forward", "silu(gate) * up -> torch_npu.npu_swiglu") in ev
        assert any(a == "LlamaRMSNorm.forward" and "npu_rms_norm" in d for a, d in ev), ev
        # fp16 autocast gives fp16 q/k but fp32 cos/sin: npu_rotary_mul cannot take the mix, the composite is kept
        fb = events(rep, "fallback")
        assert any(a == "Llama.apply_rotary_pos_emb" and "cos torch.float32" in d for a, d in fb), fb
        assert rep["patch_sets"]["fast_ops"]["status"] == "active"


@pytest.mark.slow
def test_trl_grpo_lora_open_r1_style_runs_on_the_npu(tmp_path):
    out, report = tmp_path / "out.json", tmp_path / "report.json"
    cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
           os.path.join(SCRIPTS, "grpo_lora.py"), str(tmp_path), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    result = json.loads(out.read_text())
    assert result["steps"] == 2
    assert result["devices"] == ["npu:0"], result  # every parameter and buffer
    assert result["lora_params"] > 0
    assert result["attn_implementation"] == "flash_attention_2"
    assert result["dtypes"] == ["torch.bfloat16", "torch.float32"]  # bf16 base model, peft keeps LoRA in fp32
    # transformers' own NPU flash-attention path ran (forward and backward)
    assert result["op_calls"].get("npu_fusion_attention", 0) > 0, result["op_calls"]
    steps = [row for row in result["logs"] if "reward" in row]
    assert len(steps) == 2 and all("rewards/length_reward/mean" in row for row in steps), result["logs"]
    assert all(-5.0 < row["reward"] <= 0.0 for row in steps)
    rep = json.loads(report.read_text())
    for pid in ("hf_transformers.native", "hf_accelerate.native", "hf_peft.native", "hf_trl.native"):
        assert rep["patches"][pid]["status"] == "applied", pid
    assert {s: rep["patch_sets"][s]["status"] for s in ("hf_transformers", "hf_accelerate", "hf_peft", "hf_trl")} \
        == dict.fromkeys(("hf_transformers", "hf_accelerate", "hf_peft", "hf_trl"), "active")
    assert "ascend_shim migration report" in proc.stderr
