"""The user's main program, run the way ``python`` runs it, with the user-code rewrite.

One path for every process of a job: ``ascend-shim run`` calls :func:`run_file` / :func:`run_module` /
:func:`run_directory`, and every process that comes up activated at start-up (launcher workers: torchrun,
``torch.distributed.launch``, accelerate, deepspeed; ``subprocess`` pythons) runs its main script through
:func:`run_file` as well: :func:`arm_worker_main` (called by the ``user_code`` patch during start-up) claims
the script file Python was asked to run. CPython asks ``sys.path_hooks`` whether that file is a "package"
(as it does for a directory or zip); a one-shot hook answers with a finder whose ``__main__`` is a stub that
calls :func:`run_file`. ``-m module`` workers and ``multiprocessing`` spawn children (which re-run the main
script as ``__mp_main__`` through ``runpy.run_path``) are rewritten by the import hook itself.

Semantics kept from ``python``: a fresh ``__main__`` module (``__spec__`` None for a file, ``__file__``
absolute, ``__loader__`` a ``SourceFileLoader``), ``sys.argv``, ``sys.path[0]`` (the script's real directory,
none under ``-P``), exit status, and line numbers. A traceback that reaches the top starts at the user's first
frame: the frames of runpy, the CLI and the stub are dropped (and, for the shim's own errors such as
``UnsupportedOnNPUError``, the frames inside the shim below the user's call).
"""
from __future__ import annotations

import builtins
import codecs
import importlib.abc
import importlib.machinery
import io
import os
import re
import runpy
import sys
import threading
import types
import warnings
from types import FrameType, ModuleType, TracebackType

_main_codes: set[int] = set()  # ids of the code objects run as __main__ (their frames start user tracebacks)
_keep: list = []  # the code objects themselves (their ids stay valid)
_lock = threading.Lock()
_SHIM_DIR = os.path.dirname(os.path.abspath(__file__))


class ProgramNotFound(Exception):
    """What ``python`` reports as ``<python>: <message>`` and exit status 1 (no module, no ``__main__``)."""


# -- tracebacks ---------------------------------------------------------------------------------------------
def _is_shim_frame(frame) -> bool:
    g = frame.f_globals
    return (g.get("__name__", "") or "").startswith("ascend_shim") or bool(g.get("__ascend_shim_internal__")) \
        or frame.f_code.co_filename.startswith(_SHIM_DIR + os.sep)


def user_traceback(exc: BaseException):
    """``exc``'s traceback from the user's main program on (the whole one if it never reached user code)."""
    tb = exc.__traceback__
    first = tb
    while first is not None and id(first.tb_frame.f_code) not in _main_codes:
        first = first.tb_next
    if first is None:
        # the main program itself does not compile: Python shows no frame of whatever was compiling it
        return _without_shim_frames(tb) if isinstance(exc, SyntaxError) else tb
    from .errors import ShimError

    if isinstance(exc, ShimError):  # raised on purpose by the shim for the user's call: end at that call
        last: TracebackType | None = None
        cur: TracebackType | None = first
        while cur is not None:
            if not _is_shim_frame(cur.tb_frame):
                last = cur
            cur = cur.tb_next
        if last is not None and last.tb_next is not None and all(
                _is_shim_frame(t.tb_frame) for t in _walk(last.tb_next)):
            last.tb_next = None
    return first


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def reached_main(exc: BaseException) -> bool:
    """Did ``exc`` pass through the user's main program (or was it raised before any of it ran)?"""
    return any(id(t.tb_frame.f_code) in _main_codes for t in _walk(exc.__traceback__))


def _without_shim_frames(tb):
    """``tb`` from the first frame of the shim on, without the shim's frames (what runpy and the import system
    did for ``-m``, as Python shows it; nothing when the shim compiled the file itself)."""
    frames = list(_walk(tb))
    firsts = [i for i, t in enumerate(frames) if _is_shim_frame(t.tb_frame)]
    kept = [t for t in frames[firsts[0]:] if not _is_shim_frame(t.tb_frame)] if firsts else frames
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _bring_up_error(exc: BaseException | None):
    """The :class:`~ascend_shim.errors.BringUpError` behind ``exc`` (torch wraps what fails in its backend autoload
    in a RuntimeError of its own), or None."""
    from .errors import BringUpError

    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, BringUpError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _excepthook(etype, value, tb):
    bring_up = _bring_up_error(value) if isinstance(value, BaseException) else None
    if bring_up is not None:  # the device never came up: the cause and the fix, one line, nothing to sum up
        from .activation import set_summary_printing

        set_summary_printing(False)
        print(f"ascend_shim: ERROR: {bring_up}", file=sys.stderr)
        return
    if isinstance(value, BaseException) and value.__traceback__ is not None:
        tb = user_traceback(value)
        value.__traceback__ = tb
    _previous_hook(etype, value, tb)


_previous_hook = sys.excepthook


def _install_excepthook() -> None:
    """Once per process: a hook installed later over ours (torch_npu wraps ``sys.excepthook`` when it is imported)
    calls ours, and putting ours over it again would make the two call each other without end."""
    global _previous_hook, _hook_installed
    if not _hook_installed:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook
        _hook_installed = True


_hook_installed = False


def _mark_main(code) -> None:
    with _lock:
        _main_codes.add(id(code))
        _keep.append(code)


# -- the __main__ module ------------------------------------------------------------------------------------
def _fresh_main(**attrs) -> ModuleType:
    """A new ``__main__`` module, installed in ``sys.modules`` (as Python's own, it stays there)."""
    module = ModuleType("__main__")
    module.__dict__.update(__builtins__=builtins, **attrs)
    sys.modules["__main__"] = module
    return module


def _safe_path() -> bool:
    return bool(getattr(sys.flags, "safe_path", False) or sys.flags.isolated)


def _set_path0(value: str, own_entry: bool) -> None:
    """``sys.path[0]`` as Python sets it for a script (nothing under ``-P`` / ``-I``). ``own_entry``: the
    current ``sys.path[0]`` belongs to whatever started the program (the CLI, CPython's claim) and goes."""
    if own_entry and sys.path:
        if _safe_path():
            del sys.path[0]
        else:
            sys.path[0] = value
    elif not _safe_path():
        sys.path.insert(0, value)


def cli_owns_path0() -> bool:
    """Does ``sys.path[0]`` belong to the CLI (``python -m ascend_shim``: the cwd; ``ascend-shim``: its bin dir)?"""
    return not _safe_path()


def _main_code(path: str):
    """The code of a script file: rewritten when the rewrite is on and the file is CUDA code."""
    from . import rewrite
    from .rewrite import hook

    with io.open_code(path) as fh:
        data = fh.read()
    from importlib.util import MAGIC_NUMBER

    if data[:4] == MAGIC_NUMBER:  # a compiled script (python x.pyc): run as is
        import marshal

        return marshal.loads(data[16:])
    unreadable = _unreadable_source(data, path)
    if unreadable is not None:
        raise unreadable
    if rewrite.is_installed() and hook.script_is_cuda_code(path):
        code, sites = rewrite.rewrite_source(data, path)
        rewrite.report_sites(sites)
        finder = hook._finder
        if finder is not None:
            finder.config.saw(path, None)
        return code
    return compile(data, path, "exec", dont_inherit=True)


def _unreadable_source(data: bytes, path: str) -> SyntaxError | None:
    """The error ``python path`` gives a file it cannot read as text (a binary file): the first line with NUL
    bytes, or with bytes that are not UTF-8 when no encoding is declared. ``compile`` words both its own way,
    without the line, and the rewrite would fail on the second. Python 3.10 words them its own way again."""
    if sys.version_info < (3, 11) or (b"\0" not in data and _bad_utf8(data) is None):
        return None
    encoding = _declared_encoding(data)
    if encoding is not None and encoding.endswith(" with BOM"):
        return SyntaxError(f"encoding problem: {encoding}")
    if data.startswith(codecs.BOM_UTF8):
        data = data[3:]
    for lineno, line in enumerate(data.splitlines(), 1):  # \n, \r\n and \r, as Python reads a file
        head = line.split(b"\0", 1)[0]  # Python's reader checks a line up to its first NUL
        if encoding is None:
            bad = _bad_utf8(head)
            if bad is not None:
                return SyntaxError(f"Non-UTF-8 code starting with '\\x{bad:02x}' in file {path} on line {lineno}, "
                                   "but no encoding declared; see https://peps.python.org/pep-0263/ for details")
        if len(head) < len(line):
            try:  # UTF-8 is read as is, any other encoding decoded line by line
                text = head.decode(encoding) if encoding not in (None, "utf-8") else head.decode("utf-8", "replace")
            except (LookupError, UnicodeDecodeError):
                return None  # compile's answer stands
            return SyntaxError("source code cannot contain null bytes", (path, lineno, 0, text, lineno, 0))
    return None


def _bad_utf8(data: bytes) -> int | None:
    """The first byte of ``data`` that does not start a valid UTF-8 sequence, or None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return data[exc.start]
    return None


def _declared_encoding(data: bytes) -> str | None:
    """The encoding a UTF-8 byte-order mark or a PEP 263 comment in the first two lines declares (``"... with
    BOM"`` when the two disagree), or None."""
    bom = data.startswith(codecs.BOM_UTF8)
    first, _, rest = data[3 if bom else 0:].partition(b"\n")
    for i, line in enumerate((first, rest.partition(b"\n")[0])):
        found = re.match(rb"[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", line)
        if found:
            name = found.group(1).decode("ascii").lower().replace("_", "-")
            if name == "utf-8" or name.startswith("utf-8-"):
                return "utf-8"
            if name in ("latin-1", "iso-8859-1", "iso-latin-1") or \
                    name.startswith(("latin-1-", "iso-8859-1-", "iso-latin-1-")):
                name = "iso-8859-1"
            return f"{name} with BOM" if bom else name
        if i == 0 and not re.match(rb"[ \t\f]*(?:[#\r]|$)", line):
            break  # a second line declares nothing after a line of code
    return "utf-8" if bom else None


def run_file(path: str, argv: list[str] | None = None, *, own_path0: bool = True) -> None:
    """``python path [args]``: ``argv`` is the full new ``sys.argv`` (default: keep it)."""
    if argv is not None:
        sys.argv[:] = argv
    abspath = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    _install_excepthook()  # before compiling: a SyntaxError of the script is shown as Python shows it
    code = _main_code(abspath)
    _set_path0(os.path.dirname(os.path.realpath(abspath)), own_path0)
    module = _fresh_main(__name__="__main__", __doc__=None, __package__=None, __spec__=None, __file__=abspath,
                         __cached__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", abspath))
    _mark_main(code)
    _install_excepthook()
    exec(code, module.__dict__)


def run_stdin(argv: list[str] | None = None, *, own_path0: bool = True) -> None:
    """``python - [args]``: the program is read from standard input (``__file__`` and its code's file name
    ``<stdin>``, ``sys.path[0]`` ``''``: the working directory); it is the user's code, rewritten as a script is."""
    if sys.stdin is None or sys.stdin.isatty():
        raise ProgramNotFound("-: standard input is a terminal; pipe the program in (e.g. `... run - < train.py`)")
    if argv is not None:
        sys.argv[:] = argv
    _install_excepthook()
    source = sys.stdin.buffer.read()
    from . import rewrite

    if rewrite.is_installed():
        code, sites = rewrite.rewrite_source(source, "<stdin>")
        rewrite.report_sites(sites)
    else:
        code = compile(source, "<stdin>", "exec", dont_inherit=True)
    _set_path0("", own_path0)
    module = _fresh_main(__name__="__main__", __doc__=None, __package__=None, __spec__=None, __file__="<stdin>",
                         __cached__=None, __loader__=importlib.machinery.BuiltinImporter)
    _mark_main(code)
    exec(code, module.__dict__)


def _run_spec(mod_name: str, spec, code) -> None:
    """As ``runpy._run_module_as_main``: the code (rewritten by the import hook when it is the user's) runs in a
    fresh ``__main__`` whose ``__spec__`` is the module's."""
    module = _fresh_main(__name__="__main__", __doc__=None, __package__=spec.parent, __spec__=spec,
                         __file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader)
    _mark_main(code)
    _install_excepthook()
    exec(code, module.__dict__)


def run_module(name: str, argv: list[str] | None = None) -> None:
    """``python -m name [args]`` (a package runs its ``__main__``); the import hook rewrites user modules."""
    if argv is not None:
        sys.argv[:] = argv
    _set_path0(os.getcwd(), cli_owns_path0())
    _install_excepthook()
    # runpy's own resolution of ``python -m`` (private, so typeshed leaves it out). It warns when the module was
    # imported while its parent package was (before it runs as __main__): torch_npu, which torch loads with
    # torch, imports torch.distributed.run, which a plain ``python -m torch.distributed.run`` never sees
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", f"'{re.escape(name)}' found in sys.modules", RuntimeWarning)
        mod_name, spec, code = runpy._get_module_details(name, ProgramNotFound)  # type: ignore[attr-defined]
    sys.argv[0] = spec.origin
    _run_spec(mod_name, spec, code)


def run_directory(path: str, argv: list[str] | None = None) -> None:
    """``python DIR`` / ``python archive.zip``: its ``__main__`` with ``DIR`` as ``sys.path[0]``."""
    if argv is not None:
        sys.argv[:] = argv
    path = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)  # as CPython: absolute, not normalized
    if cli_owns_path0() and sys.path:
        sys.path[0] = path
    else:
        sys.path.insert(0, path)
    _install_excepthook()
    # runpy's own resolution of ``python DIR`` (private, so typeshed leaves it out)
    mod_name, spec, code = runpy._get_main_module_details(ProgramNotFound)  # type: ignore[attr-defined]
    _run_spec(mod_name, spec, code)


# -- workers: the script Python itself was asked to run -----------------------------------------------------
_armed: dict[str, str] = {}  # "path": the script, "real": its real path


def _in_startup() -> bool:
    """Called from the ``site`` start-up (sitecustomize, a .pth) before Python runs the main program?"""
    main = sys.modules.get("__main__")
    if main is None or "__file__" in main.__dict__:
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "site":
            return True
        frame = frame.f_back
    return False


def arm_worker_main() -> bool:
    """At start-up of an activated process about to run a user script file: run it through :func:`run_file`.

    Returns whether it armed the claim. Nothing happens for ``-c``, ``-m``, the REPL, a directory / zip (run
    through the import hook) or a script that is not CUDA code (a console script, an NPU-native library's file).
    """
    if not _in_startup() or _armed:
        return False
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 in ("", "-", "-c", "-m") or not os.path.isfile(argv0):
        return False
    from .rewrite import hook

    if not hook.script_is_cuda_code(argv0):
        return False
    _armed.update(path=argv0, real=os.path.realpath(argv0))
    from . import import_system

    import_system.install_path_hook(_main_path_hook)
    return True


def disarm_worker_main() -> None:
    from . import import_system

    import_system.uninstall_path_hook(_main_path_hook)


def _main_path_hook(entry):
    """Claims the armed script only when CPython itself asks (no Python frame calls it) -- once."""
    if not _armed or sys._getframe().f_back is not None or not isinstance(entry, str):
        raise ImportError
    try:
        same = os.path.realpath(entry) == _armed["real"] and os.path.isfile(entry)
    except (OSError, ValueError):
        same = False
    if not same:
        raise ImportError
    disarm_worker_main()
    return _MainFinder(entry)


class _MainFinder:
    def __init__(self, entry: str):
        self.entry = entry

    def find_spec(self, fullname, target=None):
        if fullname != "__main__":
            return None
        return importlib.machinery.ModuleSpec("__main__", _StubLoader(self.entry), origin="<ascend_shim>")

    def invalidate_caches(self):
        pass


class _StubLoader(importlib.abc.Loader):
    """Its ``__main__`` code calls :func:`_run_claimed_main` (runpy runs it as Python's main program)."""

    def __init__(self, entry: str):
        self.entry = entry

    def create_module(self, spec):
        return None

    def exec_module(self, module):  # pragma: no cover - runpy only asks for the code
        raise ImportError("the ascend_shim main stub is not importable")

    def get_code(self, fullname):
        return compile("from ascend_shim.entry import _run_claimed_main\n_run_claimed_main()\n",
                       "<ascend_shim>", "exec", dont_inherit=True)

    def is_package(self, fullname):
        return False


def _run_claimed_main() -> None:
    entry = _armed.get("path", "")
    cached = sys.path_importer_cache
    for key in [k for k, v in cached.items() if isinstance(v, _MainFinder)]:
        del cached[key]
    # CPython put the script itself on sys.path[0] (as for a directory); Python's own value is its directory
    claimed = bool(sys.path) and isinstance(sys.path[0], str) and os.path.isfile(sys.path[0])
    run_file(entry, own_path0=claimed)
