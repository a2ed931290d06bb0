"""trl on the NPU: its native NPU paths, and a clear stop where its vLLM server weight sync needs CUDA.

Without vLLM, GRPO/DPO/SFT trainers delegate devices to accelerate and run on the NPU as they are
(trl's own NPU support). trl 1.16's server-mode weight sync (``VLLMClient.init_communicator``) goes through
vLLM's NCCL weight-transfer engine and refuses a non-CUDA device with a NotImplementedError; colocate mode
(``vllm_mode="colocate"``) builds ``vllm.LLM`` in-process, which the ``vllm`` set prepares for vllm-ascend.
(Older trl read ``torch.cuda.get_device_properties(device).uuid`` there and moved FSDP params to ``"cuda"``;
trl 1.16 no longer does either.)
"""
from __future__ import annotations

import functools
import sys

from ascend_shim.registry import PatchSet

from ._hf_common import on_npu, unsupported

hf_trl = PatchSet(
    native=("trl",),
    id="hf_trl", title="trl: its native NPU paths; vLLM server weight sync stops with a clear error",
    requires={"trl": ">=0.18,<1.17"},
    checked_against="trl 1.16.0 (torch 2.13.0 CPU + sim backend; GRPO + LoRA without vLLM)",
)


@hf_trl.patch(
    "trl.generation.vllm_client:VLLMClient.init_communicator", fidelity="unsupported",
    requires={"trl": ">=1.10"},
    why="trl's server-mode weight sync joins vLLM's NCCL weight-transfer engine; with the trainer on an NPU "
        "it fails with 'needs a CUDA device' after the vLLM server is already up.",
    what="with an NPU device, raises UnsupportedOnNPUError naming vllm_mode='server' weight sync and the ways "
         "out (vllm_mode='colocate', or use_vllm=False); a CUDA device is passed through.",
    remove_when="trl/vllm-ascend provide an HCCL weight-transfer engine for server mode")
def init_communicator(ctx):
    import torch

    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def init_communicator(self, device=0):
        dev = torch.device(device) if not isinstance(device, int) else None
        if (dev is not None and dev.type == "npu") or (dev is None and on_npu()):
            raise unsupported(report, pid, "trl GRPOConfig(use_vllm=True, vllm_mode='server') weight sync",
                              "vLLM's NCCL weight-transfer engine needs CUDA; use vllm_mode='colocate' (vLLM runs "
                              "in-process on vllm-ascend) or use_vllm=False (generation with model.generate).")
        return orig(self, device)

    return init_communicator


class _MultiDeviceView:
    """accelerate's state as trl's distributed checks should read it: MULTI_NPU counts as MULTI_GPU."""

    __slots__ = ("_state",)

    def __init__(self, state):
        object.__setattr__(self, "_state", state)

    @property
    def distributed_type(self):
        from accelerate.utils import DistributedType

        real = self._state.distributed_type
        return DistributedType.MULTI_GPU if real == DistributedType.MULTI_NPU else real

    def __getattr__(self, name):
        return getattr(self._state, name)

    def __setattr__(self, name, value):
        setattr(self._state, name, value)


@hf_trl.patch(
    "transformers.training_args:TrainingArguments.distributed_state", kind="add", id="hf_trl.multi_npu_checks",
    sweep=False,
    why="trl's trainers clear model_init_kwargs['device_map'] only when `args.distributed_state.distributed_type in "
        "['MULTI_GPU', 'DEEPSPEED']`; accelerate says MULTI_NPU on an NPU, so a multi-process run keeps "
        "device_map='auto' and stops with \"You can't train a model that has been loaded with device_map='auto' in "
        "any distributed mode\".",
    what="trl's own modules read args.distributed_state through a view whose distributed_type answers MULTI_GPU "
         "for MULTI_NPU (in trl it means 'several devices, one process each'); everyone else, accelerate and "
         "transformers included, gets the real state (reported).",
    remove_when="trl tests MULTI_NPU (or any multi-device type) where it tests MULTI_GPU")
def multi_npu_checks(ctx):
    from accelerate.utils import DistributedType

    report = ctx.report

    def get(self):
        try:
            state = self.__dict__["distributed_state"]
        except KeyError:
            raise AttributeError("distributed_state") from None
        caller = sys._getframe(1)
        if (state is not None and caller.f_globals.get("__name__", "").startswith("trl.")
                and state.distributed_type == DistributedType.MULTI_NPU):
            report.event("translated", "trl distributed check", "MULTI_NPU -> MULTI_GPU (device_map cleared)",
                         frame=caller)
            return _MultiDeviceView(state)
        return state

    def set_(self, value):
        self.__dict__["distributed_state"] = value

    def delete(self):
        self.__dict__.pop("distributed_state", None)

    return property(get, set_, delete, "accelerate's PartialState (trl's modules: MULTI_NPU reads as MULTI_GPU)")


PATCH_SETS = [hf_trl]
