"""realhf (AReaL's legacy package): jiterator functions created at import, and the GPU count of a node read as
its NPU count."""
from __future__ import annotations

import functools
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext

_JIT_FACTORIES = ("_create_jit_fn", "_create_multi_output_jit_fn")


def jiterator_for_realhf(ctx: PatchContext) -> None:
    """torch.cuda.jiterator as realhf's modules see it: creating a function succeeds, calling it raises."""
    import types

    import torch
    import torch.cuda

    from ascend_shim.errors import NotNeeded, UnsupportedOnNPUError
    from ascend_shim.frames import caller

    current = torch.cuda.__dict__.get("jiterator")
    if current is None or current is sys.modules.get("torch.cuda.jiterator"):
        raise NotNeeded("torch.cuda.jiterator is torch's own (creating a function works)")
    report, pid = ctx.report, ctx.patch.id

    def deferred(factory_name, code, *args, **kwargs):
        name = getattr(code, "__name__", None) or str(code).split("(")[0].split()[-1][:40]

        def jit_fn(*a, **k):
            report.unsupported(f"torch.cuda.jiterator.{factory_name}", f"calling jiterator function {name}")
            raise UnsupportedOnNPUError(f"CUDA jiterator function {name}", pid,
                                        "Use the PyTorch implementation of this function on the NPU.")

        jit_fn.__name__ = jit_fn.__qualname__ = f"jiterator_{name}"
        return jit_fn

    class _RealhfJiterator(types.ModuleType):
        def __getattr__(self, attr):
            frame = caller() if attr in _JIT_FACTORIES else None
            if frame is not None and frame.f_globals.get("__name__", "").startswith("realhf"):
                return functools.partial(deferred, attr)
            return getattr(current, attr)

    ctx.replace(torch.cuda, "jiterator", _RealhfJiterator("torch.cuda.jiterator", current.__doc__))


def node_npu_count(emulated: bool) -> int:
    """The NPUs of this node, counted without touching the device runtime (as realhf counts GPUs): the
    ``/dev/davinci<N>`` nodes of a real Ascend box; with the emulated NPU, its device count (every device of the
    node, before ASCEND_RT_VISIBLE_DEVICES narrows what one process sees)."""
    if emulated:
        from ascend_shim.config import setting

        return int(setting("sim_devices"))
    try:
        return sum(1 for name in os.listdir("/dev") if re.fullmatch(r"davinci\d+", name))
    except OSError:
        return 0
