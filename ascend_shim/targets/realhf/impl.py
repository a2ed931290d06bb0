"""realhf (AReaL's legacy package): jiterator functions created at import, and the GPU count of a node read as
its NPU count."""
from __future__ import annotations

import functools
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

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


def provide_pynvml(ctx: PatchContext) -> None:
    real = sys.modules.get("pynvml")
    if real is not None and not getattr(real, "__name__", "").startswith("ascend_shim"):
        # imported before realhf: later `import pynvml` statements must get the NPU answer too
        del sys.modules["pynvml"]
        ctx.on_undo(lambda: sys.modules.__setitem__("pynvml", real))
    ctx.provide_module("pynvml", "ascend_shim.targets.realhf.pynvml")


def no_cuda_graph(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __post_init__(self, *args, **kwargs):
        if getattr(self, "use_cuda_graph", False):
            self.use_cuda_graph = False
            report.fallback("realhf GenerationHyperparameters.use_cuda_graph",
                            "True -> False: CUDA-graph decoding runs eagerly on the NPU")
        return orig(self, *args, **kwargs)

    return __post_init__


def gpu_count(ctx: PatchContext) -> Callable[..., Any]:
    orig, report, emulated = ctx.original, ctx.report, ctx.emulated

    @functools.wraps(orig)
    def gpu_count():
        found = orig()
        if found:
            return found
        npus = node_npu_count(emulated)
        report.translated("realhf gpu_count (/dev/nvidia*)", f"{npus} NPUs of this node")
        return npus

    return gpu_count
