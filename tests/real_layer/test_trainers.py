"""Hugging Face trainers on Huawei's torch_npu Python: TRL's own ``sft.py`` with ``flash_attention_2`` (transformers'
own NPU path onto torch_npu's fused attention) trains with the losses of the builtin layer and of a CPU run; the HF
``Trainer`` under torchrun x2 over hccl trains as on the builtin layer, and with the fused AdamW and fp16 logs
the grad_norms of the builtin layer and of a CPU run."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.subprocess_env import run_plain_torch, shim_free_env

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


def _cpu_copy(script: str, dest) -> str:
    """``script`` as its CPU reference: gloo, no ``.cuda()``/``set_device``, ``use_cpu=True`` (and no tf32 or pinned
    memory, which need CUDA)."""
    text = pathlib.Path(script).read_text()
    for cuda, cpu in [('dist.init_process_group("nccl")', 'dist.init_process_group("gloo")'),
                      ("torch.cuda.set_device(local_rank)", "pass"), ("\nmodel.cuda()\n", "\n"),
                      ('ddp_backend="nccl", dataloader_pin_memory=True, tf32=True',
                       'ddp_backend="gloo", dataloader_pin_memory=False, use_cpu=True')]:
        assert text.count(cuda) == 1, cuda
        text = text.replace(cuda, cpu)
    dest.write_text(text)
    return str(dest)


def test_hf_trainer_torchrun_fused_adamw_fp16_grad_norms_like_builtin_and_cpu(prepared, tmp_path):
    """optim='adamw_torch_fused' (the NPU's NpuFusedAdamW) with fp16: Huawei's GradScaler unscales the fused
    optimizer's combined buffers, so the grad_norm the Trainer logs (and clips by) is the unscaled one at every step
    only if each step's new ``.grad`` reaches them (it was x65536, the loss scale, from step 2)."""
    script = os.path.join(HF_SCRIPTS, "trainer_ddp.py")
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]

    def run(layer):
        out = tmp_path / f"{layer}.json"
        done = run_shim(layer, *torchrun, "--master_port", str(free_port()), script, str(out), "adamw_torch_fused",
                        env=OFFLINE, cwd=tmp_path)
        assert done.returncode == 0, f"{layer}: " + done.stderr[-4000:]
        return json.loads(out.read_text())

    real, builtin = run("real"), run("builtin")
    env = shim_free_env()
    env.update(OFFLINE)
    cpu = run_plain_torch([sys.executable, *torchrun, "--master_port", str(free_port()),
                           _cpu_copy(script, tmp_path / "trainer_cpu.py"), str(tmp_path / "cpu.json"),
                           "adamw_torch_fused"], env=env, cwd=tmp_path, timeout=600)
    assert cpu.returncode == 0, cpu.stderr[-4000:]
    reference = json.loads((tmp_path / "cpu.json").read_text())["grad_norms"]
    assert real["optimizer"] == builtin["optimizer"] == "NpuFusedAdamW"
    assert len(real["grad_norms"]) == 4
    assert real["grad_norms"] == pytest.approx(builtin["grad_norms"], rel=1e-5)
    assert real["grad_norms"] == pytest.approx(reference, rel=1e-2)  # fp16 noise, not the 65536 of the loss scale
