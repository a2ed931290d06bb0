"""Hugging Face trainers on Huawei's torch_npu Python: TRL's own ``sft.py`` with ``flash_attention_2`` (transformers'
own NPU path onto torch_npu's fused attention) trains with the losses of the builtin layer and of a CPU run; the HF
``Trainer`` under torchrun x2 over hccl trains as on the builtin layer."""
import os
import re
import subprocess
import sys

import pytest

from .conftest import REPO, free_port, run_shim

pytestmark = pytest.mark.slow

HF_SCRIPTS = os.path.join(REPO, "tests", "hf", "scripts")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\{'loss': '([0-9.]+)'", text)]


def _sft_script() -> str:
    import trl

    return os.path.join(os.path.dirname(trl.__file__), "scripts", "sft.py")


def test_trl_sft_flash_attention_2_matches_builtin_and_cpu(prepared, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    env.update(OFFLINE, PYTHONPATH=REPO)
    subprocess.run([sys.executable, os.path.join(HF_SCRIPTS, "tiny_trl_assets.py"), str(tmp_path)], env=env,
                   check=True, capture_output=True, timeout=300)
    common = [_sft_script(), "--model_name_or_path", str(tmp_path / "tiny-llama"), "--dataset_name",
              str(tmp_path / "sft"), "--max_steps", "3", "--per_device_train_batch_size", "4", "--logging_steps",
              "1", "--report_to", "none", "--save_strategy", "no", "--max_length", "32", "--seed", "0"]
    fa2 = ["--attn_implementation", "flash_attention_2"]
    # one visible NPU, as one would run it on one GPU: with several, trl loads the model with device_map="auto",
    # spread over the devices, and its loss then mixes devices (on CUDA as on the NPU)
    one = {**OFFLINE, "ASCEND_RT_VISIBLE_DEVICES": "0"}
    runs = {layer: run_shim(layer, *common, *fa2, "--output_dir", str(tmp_path / layer), env=one)
            for layer in ("real", "builtin")}
    for layer, done in runs.items():
        assert done.returncode == 0, f"{layer}: " + done.stderr[-4000:]
    cpu = subprocess.run([sys.executable, *common, "--attn_implementation", "sdpa", "--use_cpu", "True",
                          "--output_dir", str(tmp_path / "cpu")], env=env, capture_output=True, text=True,
                         timeout=900)
    assert cpu.returncode == 0, cpu.stderr[-4000:]
    real, builtin = _losses(runs["real"].stdout + runs["real"].stderr), _losses(runs["builtin"].stdout +
                                                                               runs["builtin"].stderr)
    assert len(real) == 3 and real == builtin
    assert real == pytest.approx(_losses(cpu.stdout + cpu.stderr), rel=1e-2)


def test_hf_trainer_torchrun_two_npus_over_hccl_like_builtin(prepared, tmp_path):
    def run(layer):
        out = tmp_path / f"{layer}.json"
        done = run_shim(layer, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                        "127.0.0.1", "--master_port", str(free_port()), os.path.join(HF_SCRIPTS, "trainer_ddp.py"),
                        str(out), env=OFFLINE, cwd=tmp_path)
        assert done.returncode == 0, f"{layer}: " + done.stderr[-4000:]
        return out.read_text()

    assert run("real") == run("builtin")
