"""Warnings raised inside the shim's wrappers are shown at the line of the code that called them.

A warning torch raises from C (``TORCH_WARN``: sparse invariant checks, deprecations) names the innermost Python
frame, which for a translated call is the shim's wrapper rather than the user's line. Every warning Python
shows passes through ``warnings._showwarnmsg`` (before ``showwarning``, which torch_npu replaces, and the
recorders of ``catch_warnings``); the shim's frames are skipped there.
"""
from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from ascend_shim.errors import NotNeeded

if TYPE_CHECKING:
    from collections.abc import Callable

    from ascend_shim.context import PatchContext

_SHIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_WARNINGS_FILE = warnings.__file__


def _callers_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame from ``frame`` outward that is neither the shim's nor the warnings module's."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_SHIM_DIR) and name != _WARNINGS_FILE:
            return frame
        frame = frame.f_back
    return None


def at_callers_line(original: Callable[[warnings.WarningMessage], object]) -> Callable[..., object]:
    """``warnings._showwarnmsg`` that moves a warning located in the shim to the line that called into it."""

    def _showwarnmsg(msg: warnings.WarningMessage) -> object:
        if isinstance(msg.filename, str) and msg.filename.startswith(_SHIM_DIR):
            frame = _callers_frame(sys._getframe(1))
            if frame is not None:
                msg.filename, msg.lineno, msg.line = frame.f_code.co_filename, frame.f_lineno, None
        return original(msg)

    return _showwarnmsg


def cuda_code_rule(ctx: PatchContext) -> Callable[[], object]:
    from ascend_shim import callers

    if not (ctx.config.user_packages or ctx.config.native_packages):
        raise NotNeeded("no ASCEND_SHIM_USER_PACKAGES / ASCEND_SHIM_NATIVE_PACKAGES")
    return callers.set_overrides(ctx.config.user_packages, ctx.config.native_packages)


def rewrite_user_code(ctx: PatchContext) -> Callable[[], object]:
    from ascend_shim import entry, rewrite

    if not ctx.config.rewrite:
        raise NotNeeded("ASCEND_SHIM_REWRITE=0")
    rewrite.install(list(ctx.config.user_roots), ctx.config.user_packages)
    ctx.on_undo(rewrite.uninstall)
    entry.arm_worker_main()
    return entry.disarm_worker_main


def warnings_at_callers_line(ctx: PatchContext) -> Callable[..., object]:
    return at_callers_line(ctx.original)
