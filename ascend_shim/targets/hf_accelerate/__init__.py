"""accelerate on the NPU: its own NPU paths (it checks the NPU before CUDA), and ``backend="nccl"`` accepted.

accelerate picks ``hccl`` and ``npu:LOCAL_RANK`` on Ascend by itself. Two things break an unmodified job:
CUDA reported as available to accelerate's other CUDA-first checks, and an explicit NCCL backend
(``TrainingArguments(ddp_backend="nccl")``, ``PartialState(backend="nccl")``), which accelerate >= 1.x refuses
with "Your assigned backend nccl is not available, please use hccl".
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = "never: CUDA jobs name NCCL, which an NPU machine never has (its collectives are HCCL)"
hf_accelerate = PatchSet(
    native=("accelerate",),
    id="hf_accelerate", title="accelerate: its native NPU paths; backend='nccl' -> 'hccl'",
    requires={"accelerate": ">=1.0,<1.16"},
    checked_against="accelerate 1.15.0 (torch 2.13.0 CPU + sim backend)", implementation=f"{__name__}.impl"
)


hf_accelerate.patch(
    "accelerate.state:PartialState.__init__", covers=("nccl",),
    why="accelerate raises 'Your assigned backend nccl is not available, please use hccl' when a CUDA job names "
        "NCCL (TrainingArguments(ddp_backend='nccl'), PartialState(backend='nccl')) on an NPU.",
    what="backend='nccl' (or 'cpu:gloo,cuda:nccl') becomes 'hccl' ('cpu:gloo,npu:hccl') when the NPU is the "
         "accelerator (reported); other backends are left alone.",
    remove_when=REMOVE, factory="partial_state_init")


PATCH_SETS = [hf_accelerate]
