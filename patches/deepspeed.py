"""DeepSpeed on the NPU: its own NPU accelerator (``deepspeed.accelerator.npu_accelerator``) is selected.

DeepSpeed picks its accelerator once (``get_accelerator()``): from ``DS_ACCELERATOR``, else by probing for
``torch_npu`` after other backends; with CUDA reported as available it would build the CUDA accelerator.
The set pins ``DS_ACCELERATOR=npu`` (unless the user chose one) and lets deepspeed see the real device answers.
DeepSpeed's NPU accelerator needs the real torch_npu (CANN op builders); on the emulator only the selection is
exercised.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet

from ._hf_common import declare_native

ds = PatchSet(
    id="deepspeed", title="DeepSpeed: DS_ACCELERATOR=npu, its native NPU paths",
    requires={"deepspeed": ">=0.14,<0.19"},
    checked_against="source reading of deepspeed/accelerator/real_accelerator.py (not installed here)",
)
declare_native(ds, "deepspeed")


@ds.patch("env:DS_ACCELERATOR", kind="env", covers=("deepspeed.accelerator",),
          why="deepspeed's get_accelerator() would build its CUDA accelerator when CUDA looks available, and "
              "probes torch_npu only after other backends.",
          what="DS_ACCELERATOR=npu when unset (a user's explicit choice is kept and reported), so "
               "get_accelerator() is deepspeed's NPU_Accelerator (hccl, npu:N, torch_npu op builders).",
          remove_when="never: the choice must be made before deepspeed first asks")
def ds_accelerator(ctx):
    import os

    current = os.environ.get("DS_ACCELERATOR")
    if current:
        if current != "npu":
            ctx.report.note(f"DS_ACCELERATOR={current!r} was set by the user and is kept (the NPU's is 'npu')")
        return None
    ctx.set_env("DS_ACCELERATOR", "npu", "unset -> 'npu' (deepspeed's NPU_Accelerator)")
    return None


PATCH_SETS = [ds]
