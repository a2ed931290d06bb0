"""``torch.npu.mstx``: msTX profiling marks and ranges (the NPU's NVTX).

On hardware they annotate the msprof timeline; the emulator has no profiler timeline, so they are valid calls
that annotate nothing. Argument checks, warnings and return values are torch_npu's: ``range_start`` returns a
fresh non-zero id (0 for invalid input), ``range_push``/``range_pop`` return the nesting depth (-1 for invalid
input or an empty stack), ``mark``/``range_end`` return None.
"""
from __future__ import annotations

import itertools
import sys
import threading
import warnings
from types import FrameType

__all__ = ["mstx", "annotate"]

_ids = itertools.count(1)
_stacks = threading.local()


def _stack(domain: str) -> list:
    stacks = getattr(_stacks, "by_domain", None)
    if stacks is None:
        stacks = _stacks.by_domain = {}
    return stacks.setdefault(domain, [])


def _warn(message: str) -> None:
    """Warn at the user's call: the first frame outside this module (a direct call, or annotate/mstx_range)."""
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level)


def _valid_stream(stream, func: str) -> bool:
    from .streams import Stream

    if stream and not isinstance(stream, Stream):
        _warn(f"Invalid stream for mstx.{func} func. Please input valid stream.")
        return False
    return True


class mstx:
    @staticmethod
    def mark(message: str, stream=None, domain: str = "default"):
        if not message or not isinstance(message, str):
            _warn("Invalid message for mstx.mark function. Please provide a valid message string.")
            return
        if not isinstance(domain, str):
            _warn("Invalid domain for mstx.mark function. Please provide a valid domain string.")
            return
        _valid_stream(stream, "mark")

    @staticmethod
    def range_push(message: str, stream=None, domain: str = "default") -> int:
        if not message or not isinstance(message, str):
            _warn("Invalid message for mstx.range_push func. Please input valid message string.")
            return -1
        if not domain or not isinstance(domain, str):
            _warn("Invalid domain for mstx.range_push func. Please input valid domain string.")
            return -1
        if not _valid_stream(stream, "range_push"):
            return -1
        stack = _stack(domain)
        stack.append(message)
        return len(stack) - 1

    @staticmethod
    def range_pop(domain: str = "default") -> int:
        if not domain or not isinstance(domain, str):
            _warn("Invalid domain for mstx.range_pop func. Please input valid domain string.")
            return -1
        stack = _stack(domain)
        if not stack:
            return -1
        stack.pop()
        return len(stack)

    @staticmethod
    def range_start(message: str, stream=None, domain: str = "default") -> int:
        if not message or not isinstance(message, str):
            _warn("Invalid message for mstx.range_start function. Please provide a valid message string.")
            return 0
        if not domain or not isinstance(domain, str):
            _warn("Invalid domain for mstx.range_start func. Please input valid domain string.")
            return 0
        if not _valid_stream(stream, "range_start"):
            return 0
        return next(_ids)

    @staticmethod
    def range_end(range_id: int, domain: str = "default"):
        if not isinstance(range_id, int):
            _warn("Invalid message for mstx.range_end function. Please provide the return value from "
                  "mstx.range_start.")
            return
        if not domain or not isinstance(domain, str):
            _warn("Invalid domain for mstx.range_end func. Please input valid domain string.")

    @staticmethod
    def mstx_range(message: str, stream=None, domain: str = "default"):
        def wrapper(func):
            def inner(*args, **kwargs):
                range_id = mstx.range_start(message, stream, domain)
                ret = func(*args, **kwargs)
                mstx.range_end(range_id, domain)
                return ret
            return inner
        return wrapper


class annotate:
    """``with annotate("step"):`` -- a range around the block."""

    def __init__(self, message: str = "", stream=None, domain: str = "default"):
        self.message, self.stream, self.domain = message, stream, domain
        self.range_id: int | None = None

    def __enter__(self):
        self.range_id = mstx.range_start(self.message, self.stream, self.domain)
        return self

    def __exit__(self, *exc):
        if self.range_id is not None:
            mstx.range_end(self.range_id, self.domain)
            self.range_id = None
        return False
