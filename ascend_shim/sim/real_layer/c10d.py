"""``torch_npu._C._distributed_c10d`` over the emulated NPU: torch_npu's ``ProcessGroupHCCL`` is the emulator's
hccl backend (``ascend_shim.sim.hccl``) with torch_npu's constructor ``(store, rank, size, options)``.

torch_npu registers the ``hccl`` backend itself (``_init/registry/distributed.py``) and builds the process group
from here, so ``isinstance(backend, ProcessGroupHCCL)`` checks in its Python hold as on hardware.
"""
from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from .namespace import Namespace

NAMESPACE = Namespace("torch_npu._C._distributed_c10d")
NAMESPACE.not_emulated_class("ParallelStore", "ProcessGroupLCCL")
NAMESPACE.provide("_is_support_hccl_comm_name", lambda: False)
NAMESPACE.not_emulated("_verify_params_across_processes")


class Options:
    """``ProcessGroupHCCL.Options``: kept, as torch_npu keeps them; the emulated collectives have no streams or
    HCCL configuration to apply them to."""

    def __init__(self, is_high_priority_stream: bool = False):
        self.is_high_priority_stream = is_high_priority_stream
        self._timeout: timedelta | None = None
        self.global_ranks_in_group: list[int] = []
        self.group_id = ""
        self.hccl_config: dict = {}


@functools.cache
def process_group_class():
    """The class, built with the emulator's C++ backend on first use (a first build compiles it)."""
    from ..hccl import HcclSim, build

    base: Any = build().ProcessGroupHCCL  # the C++ class, built at run time

    class ProcessGroupHCCL(base):
        __module__ = "torch_npu._C._distributed_c10d"
        __qualname__ = "ProcessGroupHCCL"

        def __init__(self, store, rank, size, options=None):
            options = options if options is not None else Options()
            timeout = getattr(options, "_timeout", None) or timedelta(minutes=30)
            impl = HcclSim(store, rank, size, timeout, device_type="npu",
                           group_name=str(getattr(options, "group_id", "")))
            super().__init__(rank, size, impl)
            self.options = options

    ProcessGroupHCCL.Options = Options
    return ProcessGroupHCCL


def _module_getattr(name):
    if name == "ProcessGroupHCCL":
        return process_group_class()
    raise AttributeError(f"module {NAMESPACE.path!r} has no attribute {name!r} (the emulated NPU's native layer "
                         f"does not provide it)")


NAMESPACE.getattr = _module_getattr
