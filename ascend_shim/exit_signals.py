"""The exit report of a process ended by SIGTERM or SIGINT.

A signal's default action ends the process without running ``atexit``: a preempted job (the scheduler sends
SIGTERM, torchrun passes it on to every worker) would lose every process's report. While the shim is active, a
signal whose handler is the default action, or a handler the program installed before activation, first
writes the report, then goes on exactly as before: the default action (same exit status: killed by the
signal) or the previous handler. SIGINT under Python's own handler needs nothing: its ``KeyboardInterrupt``
reaches ``atexit``. A handler the program installs later replaces this one, as it would without the shim.

A Python handler runs only in the main thread, between two bytecodes: never while that thread waits in native
code (a collective, a rendezvous waiting for a peer that never comes -- the usual reason to send SIGTERM),
where the default action would have ended the process at once. So a watcher thread hears of the signal too,
through the pipe Python's own C-level handler writes each signal number to (``signal.set_wakeup_fd``): for a
signal whose action is the default one, it writes the report and ends the process, whatever the main thread
is doing. The report is written from a helper thread, waited for a bounded time (the main thread may hold the
report's lock), and written once however many of the two get to it. A wakeup fd of the program's own (an event
loop's) goes first: set before activation, it stays; set later, it takes the shim's place while it is set, and
the program sees no trace of the shim's (trio warns of any). The main thread's handler is then the only way in.

A process forked from an activated one (a fork-started DataLoader or Pool worker, which ends without
``atexit`` too) writes nothing: the report is its parent's, under the parent's name. It gets back the
handlers it had before the shim, and leaves the parent's pipe alone.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from . import patching

SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: how long a signal waits for the report to be written before the process goes on ending
WRITE_TIMEOUT = 5.0

#: signal -> the handler it had before ours (a Python function, or SIG_DFL)
_previous: dict[int, Callable[[int, FrameType | None], Any] | int] = {}
_writer: Callable[[bool], None] | None = None  # writes the report; its argument: the process is ending now
_writer_pid = 0  # the process whose report it is
_lock = threading.Lock()
_final: tuple[threading.Thread, float] | None = None  # the write before the process ends, and its deadline
_wakeup: tuple[int, int] | None = None  # the pipe the C-level handler writes signal numbers to (read, write)
_watcher: threading.Thread | None = None
_fork_hook = False
_set_wakeup_fd = signal.set_wakeup_fd
_wakeup_change: patching.Change | None = None  # signal.set_wakeup_fd replaced while the watcher listens


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
        signal.signal(signum, _on_signal)  # a call, not an attribute patching could own: uninstall() undoes it
        _previous[signum] = current
    if _previous:
        _watch()


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
    _unwatch()


def _on_signal(signum, frame):
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        writer = _writer if _writer_pid == os.getpid() else None
        if writer is not None:
            done = threading.Thread(target=_write_quietly, args=(writer, False), name="ascend_shim-exit-report",
                                    daemon=True)
            done.start()
            done.join(WRITE_TIMEOUT)
        return previous(signum, frame)
    _write_before_ending()
    _default_action(signum)


def _write_before_ending() -> None:
    """The report of a process about to end by a signal: written once, waited for until one deadline."""
    global _final
    writer = _writer if _writer_pid == os.getpid() else None
    if writer is None:
        return
    with _lock:
        if _final is None:
            thread = threading.Thread(target=_write_quietly, args=(writer, True), name="ascend_shim-exit-report",
                                      daemon=True)
            thread.start()
            _final = (thread, time.monotonic() + WRITE_TIMEOUT)
        thread, deadline = _final
    thread.join(max(0.0, deadline - time.monotonic()))


def _write_quietly(writer: Callable[[bool], None], ending: bool) -> None:
    with contextlib.suppress(Exception):  # the signal must go on, whatever happened to the report
        writer(ending)


def _default_action(signum: int) -> None:
    """End the process by ``signum`` as its default action does (the exit status says so), from any thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signum, signal.SIG_DFL)
    elif not _set_default_natively(signum):
        os._exit(128 + signum)  # the status a shell gives a process killed by the signal
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    signal.pthread_kill(threading.get_ident(), signum)


def _set_default_natively(signum: int) -> bool:
    """``signal.signal`` only works in the main thread, which may be the one stuck: the same call in C."""
    try:
        import ctypes

        setsig = ctypes.pythonapi.PyOS_setsig
        setsig.restype = ctypes.c_void_p
        setsig.argtypes = (ctypes.c_int, ctypes.c_void_p)
        setsig(signum, int(signal.SIG_DFL))
        return True
    except (ImportError, AttributeError, OSError):
        return False


# -- the watcher: hears of a signal while the main thread is in native code -----------------------------------
def _watch() -> None:
    global _wakeup, _watcher, _fork_hook, _wakeup_change
    if _wakeup is not None:
        return
    read, write = os.pipe()
    os.set_blocking(write, False)  # what set_wakeup_fd asks for: a signal handler must never block
    try:  # the interpreter's wakeup fd is set by a call, not an attribute patching could own: _unwatch() undoes it
        theirs = _set_wakeup_fd(write, warn_on_full_buffer=False)
    except (ValueError, OSError):
        theirs = None
    if theirs is not None and theirs != -1:
        _set_wakeup_fd(theirs)  # the program's own (an event loop's) stays
    if theirs != -1:
        os.close(read)
        os.close(write)
        return
    _wakeup = (read, write)
    _watcher = threading.Thread(target=_watch_pipe, args=(read,), name="ascend_shim-signal-watcher", daemon=True)
    _watcher.start()
    _wakeup_change = patching.replace(__name__, signal, "set_wakeup_fd", _program_sets_wakeup_fd)
    if not _fork_hook:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook = True


def _unwatch() -> None:
    global _wakeup, _watcher
    if _wakeup is None:
        return
    read, write = _wakeup
    _wakeup = None
    _give_back_set_wakeup_fd()
    current = _set_wakeup_fd(-1)
    if current != write:
        _set_wakeup_fd(current)  # set by the program since: it stays
    os.close(write)  # the watcher reads the end of its pipe, closes it and ends
    if _watcher is not None:
        _watcher.join(1.0)
        _watcher = None


def _program_sets_wakeup_fd(fd, /, *, warn_on_full_buffer=True):
    """``signal.set_wakeup_fd`` while the watcher listens: the program's own fd (an event loop's) takes the place
    of the shim's, unseen (what was there before is -1 to it, as without the shim), and the shim's comes back when
    the program gives its own up."""
    previous = _set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer)
    if _wakeup is not None:
        if previous == _wakeup[1]:
            previous = -1
        if fd == -1:
            _set_wakeup_fd(_wakeup[1], warn_on_full_buffer=False)
    return previous


def _give_back_set_wakeup_fd() -> None:
    global _wakeup_change
    if _wakeup_change is not None:
        patching.revert([_wakeup_change], keep_later=True)  # a function the program put there since stays
        _wakeup_change = None


def _watch_pipe(read: int) -> None:
    try:
        while True:
            received = os.read(read, 64)
            if not received:
                break
            for signum in received:
                if signum in _previous:
                    _heard(signum)
    except OSError:
        pass
    finally:
        os.close(read)


def _heard(signum: int) -> None:
    """A signal whose handler is ours, its action the default one: the report, then the end, main thread or
    not (when the main thread is running Python, its handler does the same: whichever comes first ends it)."""
    if signal.getsignal(signum) is not _on_signal or callable(_previous.get(signum, signal.SIG_DFL)):
        return  # the program's handler decides, when the main thread runs it (as without the shim)
    _write_before_ending()
    if signal.getsignal(signum) is _on_signal:
        _default_action(signum)


def _after_fork_in_child() -> None:
    global _wakeup, _watcher, _final, _lock
    _lock, _final, _watcher = threading.Lock(), None, None
    if _wakeup is not None:
        read, write = _wakeup
        _wakeup = None
        _give_back_set_wakeup_fd()
        with contextlib.suppress(ValueError, OSError):
            current = _set_wakeup_fd(-1)
            if current != write:
                _set_wakeup_fd(current)
        os.close(read)
        os.close(write)
    with contextlib.suppress(ValueError):
        for signum, previous in list(_previous.items()):
            if signal.getsignal(signum) is _on_signal:
                signal.signal(signum, previous)
    _previous.clear()
