"""TRL's "multi-device" checks (`distributed_type in ["MULTI_GPU", "DEEPSPEED"]`) hold for MULTI_NPU: its own
scripts run under `accelerate launch --num_processes 2` with no extra flag."""
import os
import re
import subprocess
import sys
import types

import pytest

from tests.subprocess_env import run_plain_torch, shim_free_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASSETS = os.path.join(os.path.dirname(__file__), "scripts", "tiny_trl_assets.py")
CHECK = 'args.distributed_state.distributed_type in ["MULTI_GPU", "DEEPSPEED"]'


def _state(kind):
    from accelerate.utils import DistributedType

    return types.SimpleNamespace(distributed_type=DistributedType[kind], num_processes=2)


def _read(args, module):
    return eval(CHECK, {"__name__": module}, {"args": args})


def test_trl_modules_read_multi_npu_as_multi_device_others_the_real_state(clean_shim, tmp_path):
    from accelerate.utils import DistributedType
    from transformers import TrainingArguments

    clean_shim.activate("sim")
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    real = args.distributed_state = _state("MULTI_NPU")
    assert _read(args, "trl.trainer.sft_trainer") is True
    assert args.distributed_state.num_processes == 2  # everything else reads through
    assert _read(args, "transformers.trainer") is False and args.distributed_state is real
    assert args.distributed_state.distributed_type is DistributedType.MULTI_NPU
    args.distributed_state = _state("MULTI_CPU")
    assert _read(args, "trl.trainer.sft_trainer") is False  # only MULTI_NPU is widened
    args.distributed_state = real
    clean_shim.deactivate()
    assert _read(args, "trl.trainer.sft_trainer") is False and args.distributed_state is real


def _trl_script(name):
    import trl

    return os.path.join(os.path.dirname(trl.__file__), "scripts", name)


def _env(**extra):
    env = shim_free_env()
    env.update(PYTHONPATH=REPO, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **extra)
    return env


def _losses(text):
    return [float(x) for x in re.findall(r"\{'loss': '([0-9.]+)'", text)]


@pytest.mark.slow
def test_trl_sft_script_under_accelerate_launch_two_processes(tmp_path):
    subprocess.run([sys.executable, ASSETS, str(tmp_path)], env=_env(), check=True, capture_output=True,
                   timeout=300)
    common = [_trl_script("sft.py"), "--model_name_or_path", str(tmp_path / "tiny-llama"), "--dataset_name",
              str(tmp_path / "sft"), "--max_steps", "3", "--per_device_train_batch_size", "4", "--logging_steps",
              "1", "--report_to", "none", "--save_strategy", "no", "--max_length", "32", "--seed", "0"]
    npu = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--backend", "sim", "-m",
                          "accelerate.commands.launch", "--num_processes", "2", *common,
                          "--output_dir", str(tmp_path / "npu")],
                         env=_env(), capture_output=True, text=True, timeout=900)
    assert npu.returncode == 0, npu.stdout[-3000:] + npu.stderr[-5000:]
    assert "device_map='auto'" not in npu.stderr
    assert "trl distributed check -> MULTI_NPU -> MULTI_GPU" in npu.stderr
    cpu = run_plain_torch([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *common,  # reference
                           "--use_cpu", "True", "--output_dir", str(tmp_path / "cpu")], env=_env(), timeout=900)
    assert cpu.returncode == 0, cpu.stderr[-5000:]
    npu_losses, cpu_losses = _losses(npu.stdout + npu.stderr), _losses(cpu.stdout + cpu.stderr)
    assert len(npu_losses) == 3 and npu_losses == pytest.approx(cpu_losses, rel=1e-2)
