"""torch_npu's own Python kept as quiet as CUDA: its exit error-code line only for NPU errors, and no storage
deprecation warning caused by its internals (see the torch_npu target's declarations)."""
from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext

#: torch_npu's pattern for its own errors (``_NPUExceptionHandler.npu_exception``; ``npu_except_pattern`` in older
#: releases), used when the handler carries neither
NPU_ERROR = r"\[ERROR\] [0-9\-\:]* \(PID:\d*, Device:\-?\d*, RankID:\-?\d*\) ERR\d{5}"


def quiet_exit_handler(ctx: PatchContext) -> Callable[..., Any]:
    """``_NPUExceptionHandler.handle_exception`` that prints nothing for an exception that is not an NPU error."""
    orig = ctx.original

    @functools.wraps(orig)
    def handle_exception(self):
        message = getattr(self, "exception", None)
        if message and not getattr(self, "force_stop_flag", False):
            pattern = getattr(self, "npu_exception", None) or getattr(self, "npu_except_pattern", None) or NPU_ERROR
            if not re.search(pattern, message):
                return None  # a Python exception: its traceback is all a CUDA run shows
        return orig(self)

    return handle_exception


#: torch_npu's counterpart of torch.cuda: its legacy storage classes (``torch.npu.FloatStorage``) warn where
#: torch.cuda's do
_LEGACY_STORAGE_MODULE = "torch_npu.npu"


def _from_torch_npu(frame) -> bool:
    name = frame.f_globals.get("__name__") or ""
    return (name == "torch_npu" or name.startswith("torch_npu.")) and name != _LEGACY_STORAGE_MODULE


def warn_unless_from_torch_npu(ctx: PatchContext) -> Callable[..., Any]:
    """``torch.storage._warn_typed_storage_removal`` that leaves out a warning pointing into torch_npu.

    torch warns once per process (the function remembers it did); a warning left out is not remembered, so the
    program's own first ``storage()`` call still warns, as on CUDA."""
    orig = ctx.original

    @functools.wraps(orig)
    def _warn_typed_storage_removal(stacklevel=2):
        try:
            frame = sys._getframe(stacklevel)  # the line the warning would point at (warnings' stacklevel + 1)
        except ValueError:
            frame = None
        if frame is not None and _from_torch_npu(frame):
            return None
        return orig(stacklevel=stacklevel + 1)

    return _warn_typed_storage_removal
