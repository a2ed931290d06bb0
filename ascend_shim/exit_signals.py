"""The exit report of a process ended by SIGTERM or SIGINT.

A signal's default action ends the process without running ``atexit``: a preempted job (the scheduler sends
SIGTERM, torchrun passes it on to every worker) would lose every process's report. While the shim is active, a
signal whose handler is the default action, or a handler the program installed before activation, first
writes the report, then goes on exactly as before: the default action (same exit status: killed by the
signal) or the previous handler. SIGINT under Python's own handler needs nothing: its ``KeyboardInterrupt``
reaches ``atexit``. A handler the program installs later replaces this one, as it would without the shim.

A Python handler runs in the main thread between two bytecodes of whatever it interrupted, possibly while that
code holds the report's lock: the report is written from a helper thread, waited for a bounded time. A process
forked from an activated one (a fork-started DataLoader or Pool worker, which ends without ``atexit`` too)
inherits the handler but writes nothing: the report is its parent's, under the parent's name.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: how long a signal waits for the report to be written before the process goes on ending
WRITE_TIMEOUT = 10.0

#: signal -> the handler it had before ours (a Python function, or SIG_DFL)
_previous: dict[int, Callable[[int, FrameType | None], Any] | int] = {}
_writer: Callable[[bool], None] | None = None  # writes the report; its argument: the process is ending now
_writer_pid = 0  # the process whose report it is


def install(write_report: Callable[[bool], None]) -> None:
    """Write the report through ``write_report(ending)`` on SIGTERM / SIGINT (main thread only: Python sets
    signal handlers there)."""
    global _writer, _writer_pid
    _writer, _writer_pid = write_report, os.getpid()
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if current is _on_signal or current in (None, signal.SIG_IGN, signal.default_int_handler):
            continue  # not set from Python, ignored, or already reaching atexit
        signal.signal(signum, _on_signal)
        _previous[signum] = current


def uninstall() -> None:
    """Give back the handlers that were there before (unless the program has replaced ours since)."""
    global _writer
    _writer = None
    if threading.current_thread() is not threading.main_thread():
        return  # ours stays installed, writes nothing and passes each signal on
    for signum, previous in list(_previous.items()):
        if signal.getsignal(signum) is _on_signal:
            signal.signal(signum, previous)
        del _previous[signum]


def _on_signal(signum, frame):
    previous = _previous.get(signum, signal.SIG_DFL)
    writer = _writer if _writer_pid == os.getpid() else None
    if writer is not None:
        done = threading.Thread(target=_write_quietly, args=(writer, not callable(previous)),
                                name="ascend_shim-exit-report", daemon=True)
        done.start()
        done.join(WRITE_TIMEOUT)
    if callable(previous):
        return previous(signum, frame)
    # the default action, as without the shim: the process ends by this signal (its exit status says so)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _write_quietly(writer: Callable[[bool], None], ending: bool) -> None:
    with contextlib.suppress(Exception):  # the signal must go on, whatever happened to the report
        writer(ending)
