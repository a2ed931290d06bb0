"""CUDA/NCCL environment variables translated to their Ascend/HCCL counterparts, once per process tree: a child
whose CUDA value a parent's shim already translated keeps the translation unless it got a value of its own."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


def npu_variable_from_cuda(ctx: PatchContext, cuda_var: str, npu_var: str) -> None:
    """Set ``npu_var`` from ``cuda_var`` where the user did not set it (reported, undone on deactivation)."""
    marker = f"ASCEND_SHIM_DERIVED_{cuda_var}"  # the value a parent's shim translated; children inherit it
    value, current = os.environ.get(cuda_var), os.environ.get(npu_var)
    if value is None:
        return None  # nothing to translate
    if current is not None and not (current == os.environ.get(marker) and value != current):
        return None  # the user set the NPU variable (it wins), or the parent's translation still holds
    # unset, or inherited from a parent's translation while this child got its own CUDA value (AReaL / TRL
    # start each vLLM server with CUDA_VISIBLE_DEVICES=<its card>)
    ctx.set_env(npu_var, value, f"{npu_var} set from {cuda_var}={value!r}")
    old_marker = os.environ.get(marker)
    os.environ[marker] = value
    ctx.on_undo(lambda: os.environ.__setitem__(marker, old_marker) if old_marker is not None
                else os.environ.pop(marker, None))
    return None
