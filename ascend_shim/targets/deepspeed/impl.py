"""DeepSpeed's NPU op builders without CANN: its host ops on the emulated NPU, and its "CANN is missing" line once.

DeepSpeed's NPU accelerator compiles three host ops (``cpu_adam``, ``cpu_adagrad``, ``cpu_lion``: ZeRO-Offload's
CPU optimizers) from the same ``csrc`` sources as its CPU accelerator does, adding CANN's and torch_npu's include
and library paths and linking ``libascendcl`` and ``libtorch_npu`` (``deepspeed/ops/op_builder/npu/builder.py``;
the sources use neither). The emulated NPU has no CANN libraries (under Huawei's torch_npu Python it sets up only
CANN's environment, ASCEND_HOME_PATH with a version record, while torch_npu imports) and that torch_npu runs
without its native library, so nothing can be linked against either: :func:`host_jit_load` builds those sources
as DeepSpeed's CPU accelerator builds them (its own ``deepspeed/ops/op_builder/cpu`` builders), into DeepSpeed's
build cache (``TORCH_EXTENSIONS_DIR``), where a CPU run of the same program finds the same extension.

Every NPU op builder looks for CANN when it is constructed and prints ``<op> ascend_cann is missing, npu ops cannot
be compiled!`` when there is none; ``import deepspeed`` constructs all of them (``all_ops``), so a process printed
the line ~20 times. :func:`cann_missing_once` lets the first one print it and keeps the later ones quiet.
"""
from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


HOST_BUILD = ("built for the host as DeepSpeed's CPU accelerator builds it (the same csrc sources; the emulated NPU "
              "has no libascendcl or libtorch_npu for the NPU builder to link, and the op uses neither)")

CANN_HOME = "/usr/local/Ascend/ascend-toolkit/latest"


def host_jit_load(ctx: PatchContext, module: str, name: str) -> Callable[..., Any]:
    """``jit_load`` of DeepSpeed's NPU builder ``name`` of a host op (deepspeed.ops.op_builder.npu.``module``), on
    the emulated NPU: the CPU accelerator's builder of the same module and name builds and loads it (reported);
    with real NPUs the patch is not needed."""
    from ascend_shim.errors import NotNeeded, TargetMissing

    if not ctx.emulated:
        raise NotNeeded("real NPUs: DeepSpeed builds the op against CANN (ASCEND_HOME_PATH)")
    where = f"deepspeed.ops.op_builder.cpu.{module}"
    try:
        host_module = importlib.import_module(where)
    except ImportError as exc:
        raise TargetMissing(f"{where} (DeepSpeed's CPU accelerator builder) cannot be imported: {exc}") from None
    host_builder = ctx.need(host_module, name, where)
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def jit_load(self, verbose=True):
        report.fallback(f"deepspeed {self.name} op", HOST_BUILD)
        return host_builder().jit_load(verbose)

    return jit_load


def cann_missing_once(ctx: PatchContext) -> Callable[..., Any]:
    """``NPUOpBuilder.installed_cann_version``: once it has failed for one builder's construction (DeepSpeed then
    prints its "ascend_cann is missing" line), it returns None to the next builders' constructions instead of
    failing again; the builder is left as after the failure (``_cann_version`` None). Other callers get the
    original's answer, failure included."""
    init = ctx.need(ctx.owner, "__init__", "deepspeed NPUOpBuilder")
    init_code = getattr(init, "__code__", None)
    orig, report, emulated = ctx.original, ctx.report, ctx.emulated
    said: list[bool] = []

    @functools.wraps(orig)
    def installed_cann_version(self, name=""):
        try:
            return orig(self, name)
        except Exception:
            if sys._getframe(1).f_code is not init_code:
                raise
            if said:
                return None  # DeepSpeed's line is printed once per process
            said.append(True)
            where = ("the emulated NPU has none; DeepSpeed's host ops are built for the host" if emulated else
                     f"source CANN's set_env.sh (ASCEND_HOME_PATH={CANN_HOME}) before starting the job")
            report.note(f"DeepSpeed's NPU op builders found no CANN ({where}): its 'ascend_cann is missing' line "
                        "is printed once per process, not once per builder")
            raise

    return installed_cann_version


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
