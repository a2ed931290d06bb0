"""accelerate on the NPU: its own NPU paths (it checks the NPU before CUDA), and ``backend="nccl"`` accepted.

accelerate picks ``hccl`` and ``npu:LOCAL_RANK`` on Ascend by itself. Two things break an unmodified job:
CUDA reported as available to accelerate's other CUDA-first checks, and an explicit NCCL backend
(``TrainingArguments(ddp_backend="nccl")``, ``PartialState(backend="nccl")``), which accelerate >= 1.x refuses
with "Your assigned backend nccl is not available, please use hccl".
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ascend_shim.registry import PatchSet

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ascend_shim.context import PatchContext

REMOVE = "never: CUDA jobs name NCCL, which an NPU machine never has (its collectives are HCCL)"
hf_accelerate = PatchSet(
    native=("accelerate",),
    id="hf_accelerate", title="accelerate: its native NPU paths; backend='nccl' -> 'hccl'",
    requires={"accelerate": ">=1.0,<1.16"},
    checked_against="accelerate 1.15.0 (torch 2.13.0 CPU + sim backend)",
)


@hf_accelerate.patch(
    "accelerate.state:PartialState.__init__", covers=("nccl",),
    why="accelerate raises 'Your assigned backend nccl is not available, please use hccl' when a CUDA job names "
        "NCCL (TrainingArguments(ddp_backend='nccl'), PartialState(backend='nccl')) on an NPU.",
    what="backend='nccl' (or 'cpu:gloo,cuda:nccl') becomes 'hccl' ('cpu:gloo,npu:hccl') when the NPU is the "
         "accelerator (reported); other backends are left alone.",
    remove_when=REMOVE)
def partial_state_init(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.devices import translate_backend
    from ascend_shim.providers.device_wrappers import note
    from ascend_shim.providers.npu_checks import on_npu

    orig = ctx.original

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        backend = kwargs.get("backend")
        if backend is not None and on_npu():
            new = translate_backend(backend)
            if new != backend:
                note("accelerate.PartialState", "backend", backend, new)
                kwargs["backend"] = new
        return orig(self, *args, **kwargs)

    return __init__


PATCH_SETS = [hf_accelerate]
