"""trl on the NPU: its native NPU paths, and a clear stop where its vLLM server weight sync needs CUDA.

Without vLLM, GRPO/DPO/SFT trainers delegate devices to accelerate and run on the NPU as they are
(trl's own NPU support). trl 1.16's server-mode weight sync (``VLLMClient.init_communicator``) goes through
vLLM's NCCL weight-transfer engine and refuses a non-CUDA device with a NotImplementedError; colocate mode
(``vllm_mode="colocate"``) builds ``vllm.LLM`` in-process, which the ``vllm`` set prepares for vllm-ascend.
(Older trl read ``torch.cuda.get_device_properties(device).uuid`` there and moved FSDP params to ``"cuda"``;
trl 1.16 no longer does either.)
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


hf_trl = PatchSet(
    native=("trl",),
    id="hf_trl", title="trl: its native NPU paths; vLLM server weight sync stops with a clear error",
    requires={"trl": ">=0.18,<1.17"},
    checked_against="trl 1.16.0 (torch 2.13.0 CPU + sim backend; GRPO + LoRA without vLLM)",
    implementation=f"{__name__}.impl"
)


hf_trl.patch(
    "trl.generation.vllm_client:VLLMClient.init_communicator", fidelity="unsupported",
    requires={"trl": ">=1.10"},
    why="trl's server-mode weight sync joins vLLM's NCCL weight-transfer engine; with the trainer on an NPU "
        "it fails with 'needs a CUDA device' after the vLLM server is already up.",
    what="with an NPU device, raises UnsupportedOnNPUError naming vllm_mode='server' weight sync and the ways "
         "out (vllm_mode='colocate', or use_vllm=False); a CUDA device is passed through.",
    remove_when="https://github.com/huggingface/trl/issues/4790: trl's server-mode weight sync uses vLLM's NCCL "
                "engine on the trainer side, not vllm-ascend's HCCL one", factory="init_communicator")


hf_trl.patch(
    "transformers.training_args:TrainingArguments.distributed_state", kind="add", id="hf_trl.multi_npu_checks",
    sweep=False,
    why="trl's trainers clear model_init_kwargs['device_map'] only when `args.distributed_state.distributed_type in "
        "['MULTI_GPU', 'DEEPSPEED']`; accelerate says MULTI_NPU on an NPU, so a multi-process run keeps "
        "device_map='auto' and stops with \"You can't train a model that has been loaded with device_map='auto' in "
        "any distributed mode\".",
    what="trl's own modules read args.distributed_state through a view whose distributed_type answers MULTI_GPU "
         "for MULTI_NPU (in trl it means 'several devices, one process each'); everyone else, accelerate and "
         "transformers included, gets the real state (reported).",
    remove_when="https://github.com/huggingface/trl/blob/f2cd57710ae345ea6428ae95363267fcf38a3dc8/trl/trainer/"
                "grpo_trainer.py: trl's trainers test distributed_type in ['MULTI_GPU', 'DEEPSPEED'], never "
                "MULTI_NPU", factory="distributed_state_for_trl")


PATCH_SETS = [hf_trl]
