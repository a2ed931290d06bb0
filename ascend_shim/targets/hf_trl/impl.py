"""trl on the NPU: its distributed checks read accelerate's MULTI_NPU as MULTI_GPU (several devices, one process
each), through a view of the state that only trl's own modules get."""
from __future__ import annotations

import functools
from typing import Any, TYPE_CHECKING

from ascend_shim.frames import caller
from ascend_shim.targets._shared.npu_checks import on_npu, unsupported

if TYPE_CHECKING:
    from collections.abc import Callable

    from ascend_shim.context import PatchContext


class _MultiDeviceView:
    """accelerate's state as trl's distributed checks should read it: MULTI_NPU counts as MULTI_GPU."""

    __slots__ = ("_state",)

    def __init__(self, state: Any):
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


def distributed_state_for_trl(ctx: PatchContext) -> property:
    """TrainingArguments.distributed_state as a property: trl's modules read MULTI_NPU as MULTI_GPU (reported)."""
    from accelerate.utils import DistributedType

    report = ctx.report

    def get(self):
        try:
            state = self.__dict__["distributed_state"]
        except KeyError:
            raise AttributeError("distributed_state") from None
        frame = caller()
        if (state is not None and frame is not None and frame.f_globals.get("__name__", "").startswith("trl.")
                and state.distributed_type == DistributedType.MULTI_NPU):
            report.event("translated", "trl distributed check", "MULTI_NPU -> MULTI_GPU (device_map cleared)",
                         frame=frame)
            return _MultiDeviceView(state)
        return state

    def set_(self, value):
        self.__dict__["distributed_state"] = value

    def delete(self):
        self.__dict__.pop("distributed_state", None)

    return property(get, set_, delete, "accelerate's PartialState (trl's modules: MULTI_NPU reads as MULTI_GPU)")


def init_communicator(ctx: PatchContext) -> Callable[..., Any]:
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
