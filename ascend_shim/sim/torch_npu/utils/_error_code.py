"""``torch_npu.utils._error_code``: the error-code suffix torch_npu's Python errors carry.

``pta_error(ErrCode.NOT_SUPPORT)`` is ``"\\n[ERROR] <time> (PID:<pid>, Device:<device>, RankID:<rank>) ERR00007 PTA
feature not supported"``; empty when ``TORCH_NPU_COMPACT_ERROR_OUTPUT`` is non-zero or Python runs
interactively, as on torch_npu. Libraries import ``ErrCode`` and the ``*_error`` helpers from here.
"""
from __future__ import annotations

import builtins
import os
import sys
import time
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch.npu  # noqa: F401 - for mypy: registered into torch at run time (_device imports torch itself)

__all__ = ["ErrCode", "pta_error", "ops_error", "dist_error", "graph_error", "prof_error"]


class _SubModuleID(Enum):
    PTA = 0
    OPS = 1
    DIST = 2
    GRAPH = 3
    PROF = 4
    UNKNOWN = 99


class ErrCode(Enum):
    SUCCESS = (0, "success")
    PARAM = (1, "invalid parameter")
    TYPE = (2, "invalid type")
    VALUE = (3, "invalid value")
    PTR = (4, "invalid pointer")
    INTERNAL = (5, "internal error")
    MEMORY = (6, "memory error")
    NOT_SUPPORT = (7, "feature not supported")
    NOT_FOUND = (8, "resource not found")
    UNAVAIL = (9, "resource unavailable")
    SYSCALL = (10, "system call failed")
    TIMEOUT = (11, "timeout error")
    PERMISSION = (12, "permission error")
    ACL = (100, "call acl api failed")
    HCCL = (200, "call hccl api failed")
    GE = (300, "call ge api failed")
    EXCEPT = (999, "applicaiton exception")  # torch_npu's spelling

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def msg(self) -> str:
        return self.value[1]


def _interactive() -> bool:
    return (hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules
            or hasattr(builtins, "__IPYTHON__"))


def _device() -> int:
    try:
        import torch

        return int(torch.npu.current_device()) if torch.npu.is_initialized() else -1
    except Exception:  # noqa: BLE001 - an error text must never raise
        return -1


def _rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank()
    except Exception:  # noqa: BLE001 - no process group: -1, as torch_npu prints it
        return -1


def _format(submodule: _SubModuleID, error: ErrCode) -> str:
    if int(os.getenv("TORCH_NPU_COMPACT_ERROR_OUTPUT", "0") or 0) or _interactive():
        return ""
    return (f"\n[ERROR] {time.strftime('%Y-%m-%d-%H:%M:%S', time.localtime())} (PID:{os.getpid()}, "
            f"Device:{_device()}, RankID:{_rank()}) ERR{submodule.value:0>2d}{error.code:0>3d} {submodule.name} "
            f"{error.msg}")


def pta_error(error: ErrCode) -> str:
    return _format(_SubModuleID.PTA, error)


def ops_error(error: ErrCode) -> str:
    return _format(_SubModuleID.OPS, error)


def dist_error(error: ErrCode) -> str:
    return _format(_SubModuleID.DIST, error)


def graph_error(error: ErrCode) -> str:
    return _format(_SubModuleID.GRAPH, error)


def prof_error(error: ErrCode) -> str:
    return _format(_SubModuleID.PROF, error)
