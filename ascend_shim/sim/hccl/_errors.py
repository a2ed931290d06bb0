"""Error texts of torch_npu's ProcessGroupHCCL, reproduced verbatim.

Source: Ascend/pytorch tag ``v26.2.0-0day-pytorch2.13.0`` (the torch_npu line that pairs with torch 2.13):
``torch_npu/csrc/distributed/ProcessGroupHCCL.cpp`` (``check_npu_*``, ``checkSupportedDataType``,
``getHcclReduceOp``), ``HCCLUtils.cpp`` (``getHcclDataType``, the data-type names) and
``torch_npu/csrc/core/npu/NPUException.cpp`` (``formatErrorCode``: the ``DIST_ERROR`` suffix).
"""
from __future__ import annotations

import os
import time

from ...digits import parse_digits

# ErrCode values and texts (NPUException.h / NPUException.cpp errCodeMap)
PARAM, TYPE, VALUE, NOT_SUPPORT, NOT_FOUND = 1, 2, 3, 7, 8
_ERR_TEXT = {
    PARAM: "invalid parameter",
    TYPE: "invalid type",
    VALUE: "invalid value",
    NOT_SUPPORT: "feature not supported",
    NOT_FOUND: "resource not found",
}
_SUBMODULE_DIST = 2


def _current_device_index() -> int:
    try:
        import torch

        npu = getattr(torch, "npu", None)
        if npu is not None and hasattr(npu, "current_device"):
            return int(npu.current_device())
    except Exception:
        pass
    return -1


def dist_error(code: int) -> str:
    """``DIST_ERROR(code)``: the suffix every torch_npu distributed error carries.

    Empty when ``TORCH_NPU_COMPACT_ERROR_OUTPUT`` is set to a non-zero value, as on torch_npu.
    """
    compact = os.environ.get("TORCH_NPU_COMPACT_ERROR_OUTPUT", "0").strip()
    if compact not in ("", "0"):
        return ""
    rank = parse_digits(os.environ.get("RANK"))
    if rank is None:
        rank = -1
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime())
    return (
        f"\n[ERROR] {stamp} (PID:{os.getpid()}, Device:{_current_device_index()}, RankID:{rank}) "
        f"ERR{_SUBMODULE_DIST:02d}{code:03d} DIST {_ERR_TEXT[code]}"
    )


def hccl_error(message: str, code: int) -> RuntimeError:
    """A ``TORCH_CHECK(false, message, DIST_ERROR(code))`` as Python sees it: a RuntimeError."""
    return RuntimeError(message + dist_error(code))
