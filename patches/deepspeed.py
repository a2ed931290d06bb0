"""DeepSpeed on the NPU: its own NPU accelerator (``deepspeed.accelerator.npu_accelerator``) is selected.

DeepSpeed picks its accelerator once (``get_accelerator()``): from ``DS_ACCELERATOR``, else by probing
(``intel_extension_for_pytorch``, then ``torch_npu``, ..., CUDA last). The set pins ``DS_ACCELERATOR=npu`` (unless
the user chose one) so the choice does not depend on probing order, and registers deepspeed as NPU-native (its
calls get the real device answers). A CUDA user's ``deepspeed.init_distributed(dist_backend="nccl")`` reaches
``torch.distributed.init_process_group("nccl")``, which the core ``torch_distributed`` set maps to hccl.
Checked against deepspeed 0.19.8 installed from PyPI (sdist, ``DS_BUILD_OPS=0``): on the emulator
``get_accelerator()`` is ``NPU_Accelerator`` and ``init_distributed(dist_backend="nccl")`` ends on hccl. The NPU
op builders (CANN compilation of fused Adam etc.) are not exercised.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ascend_shim.registry import PatchSet

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ascend_shim.context import PatchContext

ds = PatchSet(
    native=("deepspeed",),
    id="deepspeed", title="DeepSpeed: DS_ACCELERATOR=npu, its native NPU paths",
    requires={"deepspeed": ">=0.14,<0.20"},
    checked_against="deepspeed 0.19.8 (PyPI sdist, DS_BUILD_OPS=0) on the emulator; "
                    "deepspeed/accelerator/real_accelerator.py, ops/op_builder/npu/builder.py",
)


@ds.patch("env:DS_ACCELERATOR", kind="env",
          why="deepspeed's get_accelerator() would build its CUDA accelerator when CUDA looks available, and "
              "probes torch_npu only after other backends.",
          what="DS_ACCELERATOR=npu when unset (a user's explicit choice is kept and reported), so "
               "get_accelerator() is deepspeed's NPU_Accelerator (hccl, npu:N, torch_npu op builders).",
          remove_when="never: the choice must be made before deepspeed first asks")
def ds_accelerator(ctx: PatchContext) -> None:
    import os

    current = os.environ.get("DS_ACCELERATOR")
    if current:
        if current != "npu":
            ctx.report.note(f"DS_ACCELERATOR={current!r} was set by the user and is kept (the NPU's is 'npu')")
        return None
    ctx.set_env("DS_ACCELERATOR", "npu", "unset -> 'npu' (deepspeed's NPU_Accelerator)",
                read_by="deepspeed.accelerator")
    return None


@ds.patch("deepspeed.ops.op_builder.npu.builder:NPUOpBuilder.installed_cann_path",
          why="NPUOpBuilder.installed_cann_path tests `'ASCEND_HOME_PATH' in os.environ or "
              "os.path.exists(os.environ['ASCEND_HOME_PATH'])` (or for and): without CANN's set_env.sh every NPU "
              "op builder raises KeyError, and deepspeed.init_distributed builds one (ShareMemCommBuilder).",
          what="returns None when ASCEND_HOME_PATH is unset or not a path (what the code means), so deepspeed "
               "reports 'ascend_cann is missing, npu ops cannot be compiled' and goes on; otherwise unchanged.",
          remove_when="https://github.com/deepspeedai/DeepSpeed/blob/master/op_builder/npu/builder.py: "
                      "installed_cann_path tests 'in os.environ or exists(...)' (or for and), in 0.19.8 as on master")
def installed_cann_path(ctx: PatchContext) -> Callable[..., Any]:
    import functools
    import os

    orig = ctx.original

    @functools.wraps(orig)
    def wrapper(self, *args, **kwargs):
        path = os.environ.get("ASCEND_HOME_PATH")
        if not path or not os.path.exists(path):
            return None
        return orig(self, *args, **kwargs)

    return wrapper


PATCH_SETS = [ds]
